"""kafkalite/sql/topic_source.py against the shared server: a topic's
history is read to the bound fixed when its read starts, however many
records arrive while it runs."""
from __future__ import annotations

from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.sql import topic_source


def test_records_that_arrive_during_a_read_are_past_its_bound(server, topic_name):
    # small fetches, so that the read is on its way when the late records
    # come, and a small late batch, so that a partition's last fetch brings
    # it along: only the mask of records past the bound leaves them out (a
    # batch past no bound is not masked; with no mask this fails)
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config(**{"batch.size": 10_000}))      # many small batches
    for p in (0, 1):
        producer.produce_batch(topic_name, [b"x" * 100] * 20_000, partition=p)
    assert producer.flush(30) == 0
    batches = topic_source.history(server.config(**{"max.partition.fetch.bytes": 20_000}),
                                   topic_name)
    first = next(batches)
    for p in (0, 1):
        producer.produce_batch(topic_name, [b"late"] * 20, partition=p)
    assert producer.flush(30) == 0
    rest = list(batches)
    per_partition = {0: [], 1: []}
    for batch in [first, *rest]:
        for p, offset in zip(batch.column("partition").to_pylist(),
                             batch.column("offset").to_pylist()):
            per_partition[p].append(offset)
    assert {p: sorted(o) for p, o in per_partition.items()} == \
        {0: list(range(20_000)), 1: list(range(20_000))}
    assert len(rest) > 10       # many fetches: the late records came while it read
