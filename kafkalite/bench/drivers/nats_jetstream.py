"""NATS JetStream: ``nats-server -js`` (the Debian package) started by the
harness on a free loopback port, file storage in the run's temporary
directory.

One stream per topic, subjects ``<topic>.<partition>``. The nats-py client
is asyncio; each producer and consumer process runs its own event loop in
its main thread (the runner's calls are synchronous; each call runs the
loop until its work is done). Producers ``publish_async`` every value of a
batch (pipelined) and the batch is acknowledged when every PubAck is in,
later, while the loop serves other batches (``poll``). Consumers use an
ordered push consumer per subject they own (or one on ``<topic>.*`` when
they own every partition of the topic), delivering from the start of the
stream.
"""
from __future__ import annotations

import asyncio
import os

import numpy as np

from kafkalite.bench.drivers.base import (ConsumerClient, PeerServerDriver, ProducerClient,
                                          find_binary, free_port)
from kafkalite.bench.recorder import split, stamps_of_values


def _close_loop(loop, nc) -> None:
    """Closes the connection, then cancels the client's background tasks, so
    nothing is left pending when the loop closes."""
    loop.run_until_complete(nc.close())
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


def _stream_name(topic: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in topic)


class NatsProducer(ProducerClient):
    def __init__(self, endpoint, workload):
        import nats
        self.size = workload.message_size
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(endpoint["url"]))
        self.js = self.nc.jetstream()
        self.pending = []   # (future of the batch's PubAcks, on_ack), in send order

    async def _publish(self, subject, values):
        futures = [await self.js.publish_async(subject, v) for v in values]
        return asyncio.gather(*futures)

    def send(self, topic, partition, block, count, keys, on_ack):
        done = self.loop.run_until_complete(
            self._publish(f"{topic}.{partition}", split(block, self.size)))
        self.pending.append((done, on_ack))

    async def _wait(self, timeout):
        if self.pending and not self.pending[0][0].done():
            await asyncio.wait([self.pending[0][0]], timeout=timeout)
        else:
            await asyncio.sleep(0)

    def poll(self, timeout):
        self.loop.run_until_complete(self._wait(timeout))
        while self.pending and self.pending[0][0].done():
            done, on_ack = self.pending.pop(0)
            done.result()          # raises if a publish failed
            on_ack()

    def flush(self, timeout):
        deadline = self.loop.time() + timeout
        while self.pending and self.loop.time() < deadline:
            self.poll(min(0.5, max(0.0, deadline - self.loop.time())))

    def close(self):
        _close_loop(self.loop, self.nc)


class NatsConsumer(ConsumerClient):
    def __init__(self, endpoint, workload, assignment):
        import nats
        self.loop = asyncio.new_event_loop()
        self.buf: list[bytes] = []
        self.arrived = asyncio.Event()
        self.nc = self.loop.run_until_complete(nats.connect(endpoint["url"]))
        js = self.nc.jetstream()
        by_topic: dict[str, list[int]] = {}
        for t, p in assignment:
            by_topic.setdefault(t, []).append(p)
        subjects = []
        for t, parts in by_topic.items():
            if len(parts) == workload.partitions_per_topic:
                subjects.append(f"{t}.*")
            else:
                subjects += [f"{t}.{p}" for p in parts]

        async def on_message(msg):
            self.buf.append(msg.data)
            self.arrived.set()

        async def subscribe():
            return [await js.subscribe(s, cb=on_message, ordered_consumer=True,
                                       pending_bytes_limit=1 << 30) for s in subjects]
        self.subs = self.loop.run_until_complete(subscribe())

    async def _receive(self, timeout):
        if not self.buf:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        await asyncio.sleep(0)      # let the callbacks of messages already read run

    def receive(self, timeout):
        self.loop.run_until_complete(self._receive(timeout))
        values, self.buf = self.buf, []
        if not values:
            return np.empty(0, np.int64), 0
        return stamps_of_values(values), sum(len(v) for v in values)

    def close(self):
        _close_loop(self.loop, self.nc)


class NatsJetStreamDriver(PeerServerDriver):
    name = "nats-jetstream"
    label = "NATS JetStream (publish_async, ordered push consumer), file storage"
    kind = "peer"

    def unavailable(self):
        if find_binary("nats-server", "/usr/sbin", "/usr/local/sbin") is None:
            return "nats-server is not installed (apt-get install nats-server)"
        try:
            import nats  # noqa: F401
        except ImportError:
            return "the nats-py Python package is not installed (a kafkalite dependency: pip install -e .)"
        return None

    def setup(self, workload, topics, work_dir):
        store = os.path.join(work_dir, "nats")
        os.makedirs(store, exist_ok=True)
        port = free_port()
        self.start_server(
            [find_binary("nats-server", "/usr/sbin", "/usr/local/sbin"), "-js", "-sd", store,
             "-a", "127.0.0.1", "-p", str(port)],
            port, work_dir, "nats-server")
        url = f"nats://127.0.0.1:{port}"

        async def create_streams():
            import nats
            from nats.js.api import StorageType, StreamConfig
            nc = await nats.connect(url)
            try:
                js = nc.jetstream()
                for t in topics:
                    await js.add_stream(StreamConfig(name=_stream_name(t), subjects=[f"{t}.*"],
                                                     storage=StorageType.FILE))
            finally:
                await nc.close()
        asyncio.run(create_streams())
        return {"url": url}

    @classmethod
    def producer(cls, endpoint, workload):
        return NatsProducer(endpoint, workload)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return NatsConsumer(endpoint, workload, assignment)
