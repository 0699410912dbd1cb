"""One local SparkSession (local[2]) for every Spark test, with the
kafkalite source registered; Spark's Python workers run this interpreter
(which has pyarrow and kafkalite), so PYSPARK_PYTHON is set to it.

Without a Java runtime or pyspark every test module here is reported
skipped, with the reason. (A module-level ``pytest.skip`` in a conftest is
not a skip: pytest aborts the whole run with it.)"""
import hashlib
import importlib.util
import os
import shutil
import sys
import time

import pytest

from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, TopicPartition

from harness import SPARK_DRIVER_JAVA_OPTIONS


def _missing() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return ("the Spark tests need a Java runtime (java on PATH or JAVA_HOME); "
                "tools/install-system-deps installs one")
    if importlib.util.find_spec("pyspark") is None:
        return "the Spark tests need pyspark: pip install -e '.[spark]' (or '.[test]')"
    return None


MISSING = _missing()


class _Unavailable(pytest.Item):
    """Stands for a test module that cannot even be imported here: one skipped test."""
    def runtest(self):
        pytest.skip(MISSING)

    def reportinfo(self):
        return self.path, None, self.name


class _UnavailableModule(pytest.Module):
    def collect(self):
        # not imported (its imports need pyspark); one skipped item, so that the
        # run counts skips and exits 0 rather than "no tests collected"
        return [_Unavailable.from_parent(self, name=self.path.stem)]


def pytest_pycollect_makemodule(module_path, parent):
    if MISSING and module_path.name.startswith("test_"):
        return _UnavailableModule.from_parent(parent, path=module_path)
    return None


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kafkalite_spark
    session = (SparkSession.builder.master("local[2]").appName("kafkalite-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true")
               .config("spark.driver.extraJavaOptions", SPARK_DRIVER_JAVA_OPTIONS)
               # the JVM's sockets for its Python side (collect, local data, Python
               # workers): Unix domain sockets, not loopback TCP ports from the ephemeral
               # range, where a ZeroMQ client still reconnecting to a stopped server's
               # port (any test process's) once connected first and Spark read its
               # greeting (0xFF000000) as the length of the connection's secret
               .config("spark.python.unix.domain.socket.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kafkalite_spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def module_topic(request):
    """A topic name of the module's own on the session's shared server, for
    a module-scoped fixture's data (tests use ``topic_name``)."""
    tag = hashlib.blake2s(request.node.nodeid.split("::")[0].encode(), digest_size=3).hexdigest()
    return f"t{tag}-{request.module.__name__}"


def create(server, name, partitions=1):
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(name, partitions)]).values():
            f.result()
    finally:
        admin.close()


def consume_all(server, topic, partitions, expect, timeout=20.0):
    """What the native consumer reads: (partition, offset) -> Message."""
    c = Consumer(server.config())
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, deadline = {}, time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                out[(m.partition(), m.offset())] = m
        return out
    finally:
        c.close()


def reader(spark, server, **options):
    r = spark.read.format("kafkalite").option("kafkalite.bootstrap.servers", server.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def writer(df, server, **options):
    w = df.write.format("kafkalite").mode("append").option("kafkalite.bootstrap.servers",
                                                           server.bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    return w
