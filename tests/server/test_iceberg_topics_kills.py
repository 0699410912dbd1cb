"""An Iceberg topic's table under kill -9 (issue 44): records produced by
an idempotent producer to a two-partition ``iceberg.mode=key_value`` topic
while the server's workers, which lead the partitions and commit their
records to the table, are killed at random moments
(``KAFKALITE_ICEBERG_TOPIC_KILLS`` times; tests/soak.py) and restarted by
the supervisor. Afterwards the table, read with pyiceberg and DuckDB, holds
every offset of every partition exactly once, with the key, value and
timestamp a read of the topic gives (tests/server/iceberg_tables.py's
checker, which test_iceberg_topics.py shows catching a planted duplicate
and a planted loss). ``KAFKALITE_ICEBERG_SEED`` picks the kill moments.
The same with ``iceberg.mode=value_schema_id_prefix`` (Avro values through
the schema registry, every 25th undecodable): the table and its dead-letter
table hold every offset once between them. The short setting runs one of
the two modes, the seed's (``KAFKALITE_ICEBERG_TOPIC_KILL_MODES=2``, and the
soak, run both)."""
from __future__ import annotations

import os
import random
import signal
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness import ServerProcess, stop_server, wait_until
from soak import setting

pytest.importorskip("pyiceberg")

from iceberg_tables import (check_exactly_once, duckdb_rows, load_table,  # noqa: E402
                            pyiceberg_rows, table_offsets, topic_rows)

KILLS = setting("KAFKALITE_ICEBERG_TOPIC_KILLS")
SEED = int(os.environ.get("KAFKALITE_ICEBERG_SEED", random.randrange(1 << 30)))
MODES = ["key_value", "value_schema_id_prefix"]
# a minute each: the short setting runs one of the two, the seed's, so that
# runs one after another cover both (the same writer and commits under the
# kills; the decoded mode adds the dead-letter table); the soak runs both
RUN_MODES = MODES if setting("KAFKALITE_ICEBERG_TOPIC_KILL_MODES") >= 2 else [MODES[SEED % 2]]


def _produce(bootstrap, topic, stop: threading.Event, produced: list, failed: list,
             serialize=None):
    """Records to both partitions, a steady stream until ``stop``; their
    count into ``produced``. ``serialize``: the value of record i as bytes
    (default ``value-i``)."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                            "linger.ms": 5, "batch.size": 8192,
                            "message.timeout.ms": 120_000})
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
    i = 0
    try:
        while not stop.is_set():
            for _ in range(20):
                try:
                    value = serialize(i) if serialize else b"value-%d" % i
                    producer.produce(topic, value, key=b"key-%d" % i,
                                     partition=i % 2, on_delivery=delivered)
                    i += 1
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            time.sleep(0.02)         # a stream over the kills, not one burst
        left = producer.flush(120)
        if left or errors:
            failed.append(f"{left} records undelivered, errors {errors[:3]}")
    except Exception as exc:
        failed.append(repr(exc))
    finally:
        produced.append(i)


def _ends(consumer, topic, count) -> dict | None:
    ends = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
            for p in (0, 1)}
    return ends if sum(ends.values()) >= count else None


def _avro_serializer(srv, topic):
    """Record i as the schema registry's wire format (AvroSerializer), every
    25th as bytes that do not decode (for the dead-letter table)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    serializer = AvroSerializer(SchemaRegistryClient({"url": srv.info["schema_registry"]}),
                                AVRO_SCHEMA)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return lambda i: b"not avro %d" % i if i % 25 == 0 else serializer({"n": i}, ctx)


AVRO_SCHEMA = '{"type": "record", "name": "Event", "fields": [{"name": "n", "type": "long"}]}'


@pytest.mark.processes
@pytest.mark.parametrize("mode", MODES)
def test_the_table_holds_every_record_once_through_kills_of_its_writers(tmp_path, mode):
    if mode not in RUN_MODES:
        pytest.skip(f"{mode}: this run's seed {SEED} picked {RUN_MODES[0]} "
                    f"(KAFKALITE_ICEBERG_TOPIC_KILL_MODES=2 runs both)")
    rnd = random.Random(SEED)
    srv = ServerProcess(str(tmp_path / "data")).start()
    try:
        topic = "events"
        admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1, config={
            "iceberg.mode": mode, "iceberg.target.lag.ms": "100",
            "segment.bytes": "32768"})])[topic].result(30)
        decoded = mode != "key_value"
        serialize = _avro_serializer(srv, topic) if decoded else None
        stop, produced, failed = threading.Event(), [], []
        producer = threading.Thread(target=_produce, args=(srv.kafka_bootstrap, topic, stop,
                                                           produced, failed, serialize),
                                    daemon=True)
        producer.start()
        for kill in range(KILLS):
            # each kill lands while the table grows: after a commit, before the next ones
            before = sum(table_offsets(srv.data_dir, topic).values())
            wait_until(lambda: sum(table_offsets(srv.data_dir, topic).values()) > before, 60,
                       f"a commit to the table before kill {kill + 1}")
            time.sleep(rnd.uniform(0, 0.5))
            index = rnd.randrange(srv.workers)
            pid = srv.worker_pid(index)
            os.kill(pid, signal.SIGKILL)
            srv.wait_for_worker_restart(index, pid, 30)
        stop.set()
        producer.join(180)
        assert produced and not producer.is_alive(), "the producer did not finish"
        assert not failed, failed
        count = produced[0]
        consumer = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": "ends"})
        try:
            ends = wait_until(lambda: _ends(consumer, topic, count), 30,
                              "the log's end offsets to count every record")
        finally:
            consumer.close()
        wait_until(lambda: table_offsets(srv.data_dir, topic) == ends, 120,
                   lambda: f"the table's offsets {table_offsets(srv.data_dir, topic)} short "
                           f"of the log's {ends} (seed {SEED})")
        records = topic_rows(srv.kafka_bootstrap, topic, ends)
        if decoded:
            _check_decoded(srv, topic, records, ends)
            return
        table = pyiceberg_rows(srv.data_dir, topic)
        assert check_exactly_once(table, records) == [], f"seed {SEED}"
        assert sorted((r[0], r[1]) for r in table) == [(p, o) for p in (0, 1)
                                                        for o in range(ends[p])]
        duck = duckdb_rows(srv.data_dir, topic)
        if duck is not None:
            assert check_exactly_once(duck, records) == [], f"DuckDB's read, seed {SEED}"
    finally:
        stop_server(srv)


def _check_decoded(srv, topic, records, ends):
    """The decoded table and its dead-letter table: every offset in exactly
    one of them, the decoded ``n`` that of the value produced, the
    dead-letter rows' values the bytes produced."""
    main = load_table(srv.data_dir, topic).scan().to_arrow().to_pylist()
    dlq = load_table(srv.data_dir, topic + "~dlq").scan().to_arrow().to_pylist()
    at = {(r[0], r[1]): r for r in records}
    main_keys = [(r["redpanda"]["partition"], r["redpanda"]["offset"]) for r in main]
    dlq_keys = [(r["redpanda"]["partition"], r["redpanda"]["offset"]) for r in dlq]
    assert sorted(main_keys + dlq_keys) == [(p, o) for p in (0, 1) for o in range(ends[p])], \
        f"seed {SEED}: main + dead-letter offsets are not every offset once"
    assert dlq_keys, "no record reached the dead-letter table"
    for r, k in zip(dlq, dlq_keys):
        assert r["value"] == at[k][4] and at[k][4].startswith(b"not avro"), (k, SEED)
    for r, k in zip(main, main_keys):
        assert at[k][4][5:] and r["n"] == int(at[k][3][4:]), (k, SEED)   # key-i has value n=i
