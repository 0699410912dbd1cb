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

A writer without idempotence may also count the messages its client sent
again on its own (``ResentLog``): librdkafka puts a batch a broker
refused with NOT_LEADER_OR_FOLLOWER (or that never left its queue) back at
the head of the partition's queue and sends it to the new leader whatever
``retries`` says, so with requests pipelined it lands after records sent
there meanwhile. ``ResentLog`` reads those refusals from librdkafka's
``debug=msg`` log (a confluent-kafka ``logger``); ``check`` leaves them to
the test, which knows which writer may reorder. ``kept_out_of_order``
lists the acknowledged records that follow a later-produced one.

Who may call: tests (and benchmarks) that run faults against a server.
"""
from __future__ import annotations

import logging
import re
import threading
from collections import Counter
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


# librdkafka's line for a refused batch (rdkafka_request.c, debug "msg")
_REFUSED = re.compile(r" \[(\d+)\]: MessageSet with (\d+) message\(s\) .*encountered error: "
                      r"(.*) \(actions ([^)]*)\)")


class ResentLog(logging.Handler):
    """A handler for one confluent-kafka producer's ``logger`` (with
    ``debug: msg`` and ``log_level: 7``) that counts, per partition
    (``resent``), the messages of each batch librdkafka will send again
    without counting a retry: refused with a metadata error (actions
    Refresh, not persisted: the partition's leader moved) or timed out
    before it was sent. A batch that failed for good (retries=0) is not
    one. ``lines``: those log lines, for a failure's message; ``errors``:
    how many of them each error made."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.resent: dict[int, int] = {}
        self.lines: list[str] = []
        self.errors: Counter = Counter()
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if "encountered error" not in line:
            return
        m = _REFUSED.search(line)
        if m is None:
            return
        error, actions = m.group(3), m.group(4).split(",")
        # Refresh and Retry together (a storage error) counts a retry: failed
        if "MsgNotPersisted" in actions and (
                "Refresh" in actions and "Retry" not in actions or "Timed out in queue" in error):
            with self._lock:
                self.lines.append(line)
                self.errors[error] += 1
                partition = int(m.group(1))
                self.resent[partition] = self.resent.get(partition, 0) + int(m.group(2))

    def logger(self, name: str) -> logging.Logger:
        """A logger of its own for one producer, writing here only."""
        lg = logging.getLogger(f"jepsen.resent.{name}.{id(self)}")
        lg.setLevel(logging.DEBUG)
        lg.propagate = False
        lg.addHandler(self)
        return lg


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


def kept_out_of_order(final: dict, acked: set) -> list:
    """Acknowledged records at offsets out of their produce order:
    (partition, offset, value) of each that follows a later-produced one."""
    out = []
    for p, records in final.items():
        last: dict[bytes, int] = {}
        for offset, value in records:
            if value not in acked:
                continue
            writer, _, seq = value.rpartition(b"-")
            if int(seq) < last.get(writer, -1):
                out.append((p, offset, value))
            last[writer] = max(int(seq), last.get(writer, -1))
    return out
