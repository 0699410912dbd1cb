"""Source offsets: where each source partition of a connector was read up to.

A source task names its source partitions and offsets as dicts
(``{"filename": ...}`` -> ``{"position": 123}``). Stored as Kafka Connect
stores them: the key is the JSON ``["<connector>", {partition}]``, the value
the JSON offset (None: the partition's offset was reset, a tombstone).

- FileOffsetStore (standalone mode, ``offset.storage.file.filename``):
  one JSON file ``{"offsets": [[key, value], ...]}`` rewritten whole on
  every flush (written to a temporary file, fsync'ed, renamed over, so a
  crash leaves the old or the new file, never half of one).
- KafkaOffsetStore (``offset.storage.topic``, default ``connect-offsets``):
  a compacted topic, created if missing (``offset.storage.partitions``,
  default 25, ``cleanup.policy=compact``), read to its end at start; each
  flush produces the keys and waits for them to be acknowledged.

Concurrency: one store per worker, shared by its source tasks and the REST
offsets endpoints; every call takes the store's lock.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading


def offset_key(connector: str, partition: dict) -> str:
    return json.dumps([connector, partition], sort_keys=True, separators=(",", ":"))


class OffsetStore:
    def __init__(self):
        self._lock = threading.Lock()
        self._data: dict[str, dict | None] = {}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def get(self, connector: str, partition: dict) -> dict | None:
        with self._lock:
            return self._data.get(offset_key(connector, partition))

    def offsets_of(self, connector: str) -> list[tuple[dict, dict]]:
        """(partition, offset) of every live partition of ``connector``."""
        with self._lock:
            out = []
            for k, v in self._data.items():
                name, part = json.loads(k)
                if name == connector and v is not None:
                    out.append((part, v))
            return sorted(out, key=lambda pv: json.dumps(pv[0], sort_keys=True))

    def put(self, connector: str, offsets: list[tuple[dict, dict | None]]) -> None:
        """Store these offsets durably (None resets a partition)."""
        if not offsets:
            return
        with self._lock:
            entries = {offset_key(connector, p): o for p, o in offsets}
            self._write(entries)
            self._data.update(entries)

    def _write(self, entries: dict) -> None:
        raise NotImplementedError


class FileOffsetStore(OffsetStore):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def start(self):
        try:
            with open(self.path) as f:
                doc = json.load(f)
        except FileNotFoundError:
            return
        except ValueError as e:
            raise ValueError(f"offset file {self.path} is not an offsets file: {e}") from None
        self._data = {k: v for k, v in doc.get("offsets", [])}

    def _write(self, entries):
        data = {**self._data, **entries}
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".offsets-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"offsets": [[k, v] for k, v in data.items() if v is not None]}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


class KafkaOffsetStore(OffsetStore):
    def __init__(self, client_config: dict, topic: str = "connect-offsets",
                 partitions: int = 25):
        super().__init__()
        self.client_config, self.topic, self.partitions = client_config, topic, partitions
        self._producer = None

    def start(self):
        from kafkalite.client import NewTopic
        from kafkalite.connect.clients import AdminClient, Producer
        from kafkalite.errors import TopicAlreadyExistsError
        admin = AdminClient(self.client_config)
        try:
            fut = admin.create_topics([NewTopic(self.topic, self.partitions,
                                                config={"cleanup.policy": "compact"})])
            try:
                fut[self.topic].result()
            except TopicAlreadyExistsError:
                pass
            self.partitions = len(admin.list_topics(self.topic).topics[self.topic].partitions)
        finally:
            admin.close()
        self._data = self._read_to_end()
        self._producer = Producer({**self.client_config, "linger.ms": 0})

    def refresh(self) -> None:
        """Read the topic to its end again (distributed mode: offsets written
        by a connector's previous owner). Under the lock, for the whole read: a
        source task of this worker that commits meanwhile would otherwise have
        its put replaced by a view read before it, and a restart of that task
        would resume from the older offset, repeating what it sent since."""
        with self._lock:
            self._data = self._read_to_end()

    def _read_to_end(self) -> dict:
        from kafkalite.client import OFFSET_BEGINNING, TopicPartition
        from kafkalite.connect.clients import Consumer
        # read_committed: offsets of an aborted exactly-once transaction never count
        c = Consumer({**self.client_config, "enable.auto.commit": False,
                      "isolation.level": "read_committed"})
        data: dict = {}
        try:
            tps = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)]
            ends = {tp.partition: c.get_watermark_offsets(tp)[1] for tp in tps}
            todo = {p for p, end in ends.items() if end > 0}
            c.assign([tp for tp in tps if tp.partition in todo])
            while todo:
                for m in c.consume(10_000, 0.5):
                    if m.error():
                        continue
                    v = m.value()
                    data[m.key().decode()] = None if v is None else json.loads(v)
                # by position, not by the last record: transaction markers and aborted
                # records take offsets no record is returned for
                for tp in c.position([TopicPartition(self.topic, p) for p in todo]):
                    if tp.offset >= ends[tp.partition]:
                        todo.discard(tp.partition)
        finally:
            c.close()
        return data

    def records_for(self, connector, offsets) -> list[tuple[bytes, bytes | None]]:
        """The offsets topic's (key, value) records of these offsets, for a
        caller that produces them itself (inside its transaction)."""
        return [(offset_key(connector, p).encode(), None if o is None else json.dumps(o).encode())
                for p, o in offsets]

    def remember(self, connector, offsets) -> None:
        """Offsets a caller wrote itself (and committed): into the view."""
        with self._lock:
            self._data.update({offset_key(connector, p): o for p, o in offsets})

    def _write(self, entries):
        failed = []

        def on_delivery(err, msg):
            if err is not None:
                failed.append(err)
        for k, v in entries.items():
            self._producer.produce(self.topic, key=k.encode(),
                                   value=None if v is None else json.dumps(v).encode(),
                                   on_delivery=on_delivery)
        left = self._producer.flush(30)
        if failed or left:
            raise failed[0] if failed else TimeoutError(
                f"{left} offset records of {self.topic} not acknowledged in 30 s")

    def stop(self):
        if self._producer is not None:
            self._producer.close()
            self._producer = None
