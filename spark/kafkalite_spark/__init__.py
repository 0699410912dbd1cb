"""kafkalite as a Spark source and sink (a Python Data Source named ``kafkalite``).

    from kafkalite_spark import register
    register(spark)
    df = (spark.read.format("kafkalite")
          .option("kafkalite.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

The options and the schema are those of Spark's own Kafka source (see
options.py), so Spark code moves over by changing the format name and the
``kafka.`` option prefix. source.py reads (``kafkalite.isolation.level=
read_committed`` hides aborted and open transactions), sink.py writes
(at-least-once, or ``exactlyOnce=true``: a transaction per task, committed
by the driver). history.py's ``read_with_history`` reads a topic's Iceberg
copy (the Connect Iceberg sink, record format ``kafka``) through Spark's
native Parquet reader and only the uncopied rest through the source;
iceberg_topic.py's ``read_topic`` does the same for a topic that is itself
an Iceberg table (``iceberg.mode``), from the table the leaders commit.
"""
try:
    import pyspark  # noqa: F401
except ModuleNotFoundError:
    # pyspark is an extra, not a dependency of kafkalite: say which one, in one line
    raise ModuleNotFoundError(
        "kafkalite_spark needs pyspark, kafkalite's spark extra: pip install 'kafkalite[spark]' "
        "(in a checkout: pip install -e '.[spark]'); Spark also needs Java 17+ "
        "(tools/install-system-deps)", name="pyspark") from None

from kafkalite_spark.history import read_with_history  # noqa: E402
from kafkalite_spark.iceberg_topic import read_topic  # noqa: E402
from kafkalite_spark.source import (SCHEMA, SCHEMA_WITH_HEADERS, KafkaLiteDataSource,  # noqa: E402
                                    register)

__all__ = ["KafkaLiteDataSource", "SCHEMA", "SCHEMA_WITH_HEADERS", "read_topic",
           "read_with_history", "register"]

