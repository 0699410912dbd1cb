"""Client quotas at work: the rate a producer over its ``producer_byte_rate``
achieves against the quota, and what an unthrottled client beside it gets
against the same client alone (the baseline), in one run on one server.

    python benchmarks/bench_quotas.py                  # about a minute
    python benchmarks/bench_quotas.py --seconds 30 --quota 1048576

A real 2-worker server (kafkalite.launcher) and confluent-kafka over
the Kafka port; the topic's partitions are led by both workers, so the
quota is the node's. The throttled rate is given over the whole run and
from the first throttle librdkafka reported (before it, Kafka's sampled
rate lets a new client burst up to ``quota_window_num - 1`` windows'
worth). Timing never fails anything: this prints figures.
"""
from __future__ import annotations

import tempfile
import threading
import time

import confluent_kafka as ck

from kafkalite.client.admin import (AdminClient, ClientQuotaAlteration, ClientQuotaEntity,
                                    NewTopic)
from kafkalite.launcher import ServerProcess

import common

VALUE = b"b" * 1000
WINDOWS_S = 11.0    # quota_window_num * quota_window_size_seconds (the defaults)


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict:
    throttles, deliveries = [], []
    p = ck.Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                     "queue.buffering.max.kbytes": 64,
                     "throttle_cb": lambda ev: throttles.append((time.monotonic(),
                                                                 ev.throttle_time))})

    def delivered(err, msg):
        if err is None:
            deliveries.append((time.monotonic(), len(msg.value())))
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.005)
        p.poll(0)
    p.flush(60)
    return {"start": start, "end": end, "throttles": throttles, "deliveries": deliveries}


def rate(run: dict, since: float | None = None) -> float:
    since = run["start"] if since is None else since
    return sum(n for t, n in run["deliveries"] if since <= t < run["end"]) / (run["end"] - since)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="the throttled run")
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    parser.add_argument("--quota", type=int, default=500_000, help="producer_byte_rate, bytes/s")
    args = common.parse(parser)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(f"{tmp}/data").start()
        try:
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            for f in admin.create_topics([NewTopic("bench-quotas", 4)]).values():
                f.result()
            bootstrap = server.kafka_bootstrap
            alone = produce_for(bootstrap, "bench-quotas", "unlimited", args.baseline_seconds)
            for f in admin.alter_client_quotas([ClientQuotaAlteration(
                    ClientQuotaEntity({"client-id": "limited"}),
                    {"producer_byte_rate": args.quota})]).values():
                f.result()
            admin.close()
            runs = {}
            threads = [threading.Thread(target=lambda c=c, s=s: runs.__setitem__(
                c, produce_for(bootstrap, "bench-quotas", c, s)))
                for c, s in (("limited", args.seconds), ("unlimited", args.baseline_seconds))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            server.stop()
    limited, beside = runs["limited"], runs["unlimited"]
    first = limited["throttles"][0][0] if limited["throttles"] else None
    common.say(f"throttled producer, quota {args.quota:,} B/s, {args.seconds:g} s; "
               + (f"first throttle at {first - limited['start']:.1f} s, "
                  f"{len(limited['throttles'])} throttles reported" if first is not None
                  else "never throttled")
               + f"; throttles reported to the unthrottled one: {len(beside['throttles'])}")
    quota = f"quota {args.quota:,} B/s"
    rows = [common.Row("throttled, over the run", rate(limited), "B/s", args.quota, quota)]
    if first is not None:
        rows += [common.Row("throttled, from its first throttle", rate(limited, first), "B/s",
                            args.quota, quota),
                 common.Row("throttled, once the windows rolled past the burst",
                            rate(limited, first + WINDOWS_S), "B/s", args.quota, quota)]
    rows.append(common.Row("unthrottled, beside it", rate(beside), "B/s", rate(alone),
                           "alone (baseline, same run)"))
    common.say_table(rows)

if __name__ == "__main__":
    main()
