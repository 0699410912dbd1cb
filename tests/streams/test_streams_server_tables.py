"""KGroupedTable and the foreign-key join against a real server (tables.py):
an orders table (3 partitions) joined by foreign key with a customers table
(2 partitions: not co-partitioned, the internal subscription and response
topics carry the work across) and re-grouped by customer for a count, under
exactly_once_v2; updates and deletes of both tables arrive in rounds while
the application runs. The outputs, read read_committed as tables, equal the
model over the two tables' final states.
"""
from __future__ import annotations

import random

from harness import create
from test_streams_runtime import config, long_of, read, run_until_caught_up, wait_running

from kafkalite.client import Producer
from kafkalite.streams import (Consumed, Grouped, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder)

S, L = Serdes.string(), Serdes.long()


def put(server, topic, records) -> None:
    p = Producer(server.config())
    for k, v in records:
        p.produce(topic, None if v is None else v.encode(), k.encode())
    assert p.flush(10) == 0
    p.close()


def test_fk_join_and_grouped_count_equal_the_model(server, topic_name, tmp_path):
    orders_t, customers_t = f"{topic_name}-orders", f"{topic_name}-customers"
    create(server, orders_t, 3)
    create(server, customers_t, 2)
    for out in ("joined", "per-customer"):
        create(server, f"{topic_name}-{out}", 3)
    b = StreamsBuilder()
    orders = b.table(orders_t, Consumed.with_(S, S))
    customers = b.table(customers_t, Consumed.with_(S, S), Materialized.as_("customers"))
    orders.join(customers, lambda v: v.split(":")[0], lambda o, c: f"{o}|{c}").to_stream().to(
        f"{topic_name}-joined", Produced.with_(S, S))
    orders.group_by(lambda k, v: (v.split(":")[0], v), Grouped.with_(S, S)).count(
        Materialized.as_("per-customer")).to_stream().to(f"{topic_name}-per-customer",
                                                         Produced.with_(S, L))
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{topic_name}-app", **{
        "processing.guarantee": "exactly_once_v2"}))
    rnd = random.Random(5)
    tables = ({}, {})
    sent = 0
    streams.start()
    try:
        for _ in range(6):
            batch = [(0, f"o{rnd.randrange(30)}",
                      None if rnd.random() < 0.15 else f"c{rnd.randrange(8)}:{rnd.randrange(99)}")
                     for _ in range(40)]
            batch += [(1, f"c{rnd.randrange(8)}",
                       None if rnd.random() < 0.2 else f"name{rnd.randrange(99)}")
                      for _ in range(8)]
            rnd.shuffle(batch)
            for side, topic in ((0, orders_t), (1, customers_t)):
                put(server, topic, [(k, v) for s, k, v in batch if s == side])
            for side, k, v in batch:
                if v is None:
                    tables[side].pop(k, None)
                else:
                    tables[side][k] = v
            # the next round once this one is read: rounds, not one backlog
            sent += len(batch)
            wait_running(streams, lambda: streams.metrics()["processed"] >= sent,
                         "the round processed")
    finally:
        run_until_caught_up(streams, server, timeout=60, started=True)
    orders_now, customers_now = tables
    want_joined = {k.encode(): f"{v}|{customers_now[v.split(':')[0]]}"
                   for k, v in orders_now.items() if v.split(":")[0] in customers_now}
    got = {}
    for _, k, v, _ in read(server, f"{topic_name}-joined", 3):
        if v is None:
            got.pop(k, None)
        else:
            got[k] = v.decode()
    assert got == want_joined
    counts = {}
    for _, k, v, _ in read(server, f"{topic_name}-per-customer", 3):
        counts[k.decode()] = long_of(v)
    want = {c: sum(1 for v in orders_now.values() if v.split(":")[0] == c) for c in counts}
    assert {c: n for c, n in counts.items()} == want
    assert sum(counts.values()) == len(orders_now)
