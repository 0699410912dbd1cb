"""A Jepsen-style checker for a replicated log: what was acknowledged, what
was read while faults happened, and what the log holds at the end.

Writers give every record a value unique in the run, ``<writer>-<seq>``,
with ``seq`` increasing per writer and partition, and note each
acknowledgement (partition, offset, value). Readers note every (partition,
offset, value) they were served while the run went on. At the end the
whole log is read once more. ``check`` then reports:

- ``lost``: acknowledged values missing from the final log;
- ``moved``: acknowledged values found at another offset than acknowledged
  (an acknowledgement without an offset -- librdkafka's implicit ack of an
  idempotent producer's earlier batches, whose response was lost, once a
  later batch of the partition is acknowledged -- must be found in its
  partition);
- ``duplicates``: values stored more than once;
- ``reordered``: a writer's values in a partition out of their seq order;
- ``phantom_reads``: values a reader was served that the final log does
  not hold at that offset (a consumer read a record later truncated: data
  served above the high watermark);
- ``unacknowledged_present`` (information, not an error): values whose
  acknowledgement never came but that were stored -- allowed, as in Kafka.

Who may call: tests (and benchmarks) that run faults against a server.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class History:
    acked: list = field(default_factory=list)          # (partition, offset, value)
    reads: dict = field(default_factory=dict)          # (partition, offset) -> value
    read_conflicts: list = field(default_factory=list)  # two reads of one offset disagreed
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.acked.append((partition, offset, value))

    def read(self, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            seen = self.reads.setdefault((partition, offset), value)
            if seen != value:
                self.read_conflicts.append((partition, offset, seen, value))


@dataclass
class Report:
    acked: int
    stored: int
    lost: list
    moved: list
    duplicates: list
    reordered: list
    phantom_reads: list
    unacknowledged_present: int

    @property
    def ok(self) -> bool:
        return not (self.lost or self.moved or self.duplicates or self.reordered
                    or self.phantom_reads)

    def __str__(self) -> str:
        return (f"acked {self.acked}, stored {self.stored}: lost {len(self.lost)} "
                f"{self.lost[:5]}, moved {len(self.moved)} {self.moved[:5]}, duplicates "
                f"{len(self.duplicates)} {self.duplicates[:5]}, reordered {len(self.reordered)} "
                f"{self.reordered[:5]}, phantom reads {len(self.phantom_reads)} "
                f"{self.phantom_reads[:5]}, stored without an ack {self.unacknowledged_present}")


def _seq(value: bytes) -> tuple[bytes, int]:
    writer, _, seq = value.rpartition(b"-")
    return writer, int(seq)


def check(history: History, final: dict[int, list]) -> Report:
    """``final``: partition -> [(offset, value)] of the whole log, in order."""
    at: dict[tuple[int, int], bytes] = {}
    where: dict[bytes, list] = {}
    reordered = []
    for partition, records in final.items():
        last: dict[bytes, int] = {}
        for offset, value in records:
            at[(partition, offset)] = value
            where.setdefault(value, []).append((partition, offset))
            writer, seq = _seq(value)
            if writer in last and seq < last[writer]:
                reordered.append((partition, offset, value))
            last[writer] = max(seq, last.get(writer, -1))
    acked_values = set()
    lost, moved = [], []
    for partition, offset, value in history.acked:
        acked_values.add(value)
        found = where.get(value)
        if not found:
            lost.append((partition, offset, value))
        elif (partition, offset) not in found if offset is not None else \
                all(p != partition for p, _ in found):
            moved.append((partition, offset, value, found))
    duplicates = [(v, places) for v, places in where.items() if len(places) > 1]
    phantom = [(p, o, v) for (p, o), v in history.reads.items() if at.get((p, o)) != v]
    phantom += [(p, o, a, b) for p, o, a, b in history.read_conflicts]
    return Report(len(history.acked), len(at), lost, moved, duplicates, reordered, phantom,
                  sum(1 for v in where if v not in acked_values))
