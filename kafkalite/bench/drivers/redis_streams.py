"""Redis Streams: ``redis-server`` (the Debian package) started by the
harness on a free loopback port, persistence on as a user would run it for
a log: ``appendonly yes``, ``appendfsync everysec``, RDB snapshots off, the
append-only file in the run's temporary directory.

One stream per partition (``<topic>-<partition>``). Producers XADD each
value (field ``v``) in one non-transactional pipeline per batch; the
pipeline's reply is the acknowledgement. Streams are capped with
``MAXLEN ~`` so a long run fits in memory (Redis keeps a stream in RAM):
about 512 MiB of values over all streams, far more than a consumer that
keeps up ever lags by. Consumers XREAD (BLOCK, COUNT 10,000) their streams
from the start.
"""
from __future__ import annotations

import os

from kafkalite.bench.drivers.base import (ConsumerClient, PeerServerDriver, ProducerClient,
                                          find_binary, free_port)
from kafkalite.bench.recorder import split, stamps_of_values

MEMORY_BUDGET = 512 << 20


def stream_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class RedisProducer(ProducerClient):
    def __init__(self, endpoint, workload):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=endpoint["port"])
        self.size = workload.message_size
        self.maxlen = endpoint["maxlen"]

    def send(self, topic, partition, block, count, keys, on_ack):
        key = stream_key(topic, partition)
        pipe = self.r.pipeline(transaction=False)
        for value in split(block, self.size):
            pipe.xadd(key, {"v": value}, maxlen=self.maxlen, approximate=True)
        pipe.execute()
        on_ack()

    def close(self):
        self.r.close()


class RedisConsumer(ConsumerClient):
    def __init__(self, endpoint, workload, assignment):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=endpoint["port"])
        self.last = {stream_key(t, p): "0-0" for t, p in assignment}

    def receive(self, timeout):
        got = self.r.xread(self.last, count=10_000, block=max(1, int(timeout * 1000)))
        values = []
        for key, entries in got or ():
            if entries:
                self.last[key.decode() if isinstance(key, bytes) else key] = entries[-1][0]
                values.extend(fields[b"v"] for _id, fields in entries)
        return stamps_of_values(values), sum(len(v) for v in values)

    def close(self):
        self.r.close()


class RedisStreamsDriver(PeerServerDriver):
    name = "redis-streams"
    label = "Redis Streams (XADD pipeline / XREAD), AOF appendfsync everysec"
    kind = "peer"

    def unavailable(self):
        if find_binary("redis-server") is None:
            return "redis-server is not installed (apt-get install redis-server)"
        try:
            import redis  # noqa: F401
        except ImportError:
            return "the redis Python package is not installed (a kafkalite dependency: pip install -e .)"
        return None

    def setup(self, workload, topics, work_dir):
        data = os.path.join(work_dir, "redis")
        os.makedirs(data, exist_ok=True)
        port = free_port()
        self.start_server(
            [find_binary("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
             "--dir", data, "--appendonly", "yes", "--appendfsync", "everysec",
             "--save", "", "--protected-mode", "no", "--daemonize", "no"],
            port, work_dir, "redis-server")
        streams = len(topics) * workload.partitions_per_topic
        maxlen = max(10_000, MEMORY_BUDGET // (workload.message_size + 64) // streams)
        return {"port": port, "maxlen": maxlen}

    @classmethod
    def producer(cls, endpoint, workload):
        return RedisProducer(endpoint, workload)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return RedisConsumer(endpoint, workload, assignment)
