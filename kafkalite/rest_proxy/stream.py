"""v3's streaming produce: a chunked body of concatenated JSON records in, an answer line a record out.

Two threads a stream, so that neither direction of the connection waits on
the other:

- the stream's reader (a thread of its own) reads the body as it comes,
  parses each record and produces it at once (RecordProducer.send), up to
  MAX_IN_FLIGHT records waiting for their delivery reports;
- the request's thread (the HTTP server's) writes the answers, one JSON
  object a line in the records' order, each as its report comes.

A client may write the whole body before it reads a byte of the answer
(Python's ``requests`` with a generator body does). Its answers then wait
unread, and an answer written into the full socket would wait with them:
the records behind it unread, until the server's write timeout cut the
stream after its 200 was sent. So while the body is still arriving, the
request's thread writes only what the connection's send buffer takes
without waiting (``environ["kafkalite.send_room"]``, from the HTTP
server) and holds the rest (AnswerSpool: memory, then a temporary file);
once the body has ended it writes everything, and a write that waits is
again one on a client that went away. Every record read is answered; if
answers held unread pass MAX_HELD_BYTES the reader stops, and the last
line (413) says that no record after the answered ones was read.

Who may call: the proxy's request threads (produce_stream), any number of
streams at once.
"""
from __future__ import annotations

import codecs
import collections
import json
import logging
import os
import tempfile
import threading

from kafkalite.rest_proxy.errors import (BAD_REQUEST, INTERNAL_ERROR, PAYLOAD_TOO_LARGE,
                                         ProxyError)
from kafkalite.rest_proxy.records import POLL_S, AnswerLines

log = logging.getLogger("kafkalite.rest_proxy")

MAX_IN_FLIGHT = 20_000
# answers held in memory before the rest go to a temporary file, and the
# most a stream holds unread (about five million answers)
SPOOL_MEMORY_BYTES = 8 << 20
MAX_HELD_BYTES = 1 << 30
# the most one write of answers hands the server
WRITE_BYTES = 256 << 10
_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\r\n"


def produce_stream(records, cluster_id: str, topic: str, chunks, req=None, send_room=None):
    """The streaming mode: ``chunks`` (the body's bytes as they come)
    parsed as concatenated JSON, each record produced at once by
    ``records`` (a RecordProducer); yields the answers' bytes, in the
    records' order. ``send_room()``: the bytes the connection takes now
    without waiting (None: writes are never held, as for a caller that
    collects the answers itself)."""
    stream = _Stream(records, cluster_id, topic, req)
    threading.Thread(target=stream.read, args=(chunks,), name="rest-proxy-stream",
                     daemon=True).start()
    try:
        yield from stream.answers(send_room)
    finally:
        stream.stopped.set()        # also when the client went away (the generator closed)
        stream.spool.close()


class _Stream:
    """One stream's records waiting for reports (``pending``, appended by
    the reader, taken from the head under ``_lock`` by either thread once
    answered) and its answers not yet written (``spool``)."""

    def __init__(self, records, cluster_id: str, topic: str, req):
        self.records, self.topic, self.req = records, topic, req
        self.count = records.partitions(topic)
        self.producer = records.producer
        self.pending: collections.deque = collections.deque()
        self.spool = AnswerSpool()
        self.line = AnswerLines(cluster_id, topic).line
        self._lock = threading.Lock()
        self.ended = threading.Event()      # the reader is done: every record read is pending
        self.stopped = threading.Event()    # the answers' side is done: read no more
        self.failure: ProxyError | None = None

    def collect(self) -> None:
        """Answered records at the head of ``pending`` into the spool."""
        with self._lock:
            pending, out = self.pending, []
            while pending and pending[0].answer is not None:
                out.append(self.line(pending.popleft()))
            if out:
                self.spool.put(("\n".join(out) + "\n").encode())

    # ---- the reader's thread ------------------------------------------------------------------

    def read(self, chunks) -> None:
        try:
            self.failure = self._read(chunks)
        except Exception:
            log.exception("rest proxy: the stream to %s", self.topic)
            self.failure = ProxyError(INTERNAL_ERROR, "Internal Server Error (see the server's "
                                                      "log)")
        finally:
            self.ended.set()

    def _read(self, chunks) -> ProxyError | None:
        """Records read and produced until the body ends; the error that
        ended it early, if one did."""
        utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        text = ""
        try:
            for piece in chunks:
                if self.stopped.is_set():
                    return None
                try:
                    text += utf8.decode(piece)
                except UnicodeDecodeError:
                    return ProxyError(BAD_REQUEST, "the body is not UTF-8")
                text = self._produce(text)
                self.producer.poll(0)
                self.collect()
                if self.spool.held > MAX_HELD_BYTES:
                    return ProxyError(PAYLOAD_TOO_LARGE, f"over {MAX_HELD_BYTES} bytes of "
                                                         f"answers wait unread: no record after "
                                                         f"the answered ones was read")
        except ProxyError as exc:
            return exc              # a malformed chunk: the records before it are answered
        except OSError:
            pass                    # the client went away: what came is answered
        if text.strip():
            return ProxyError(BAD_REQUEST, f"the body ends with text that is not a JSON "
                                           f"object: {text[:80]!r}")
        return None

    def _produce(self, text: str) -> str:
        """Each whole record of ``text`` produced; the rest (a record cut
        by the chunk's end)."""
        pos, end = 0, len(text)
        pending, producer = self.pending, self.producer
        while True:
            while pos < end and text[pos] in _WHITESPACE:
                pos += 1
            if pos == end:
                break
            try:
                record, pos = _DECODER.raw_decode(text, pos)
            except ValueError:
                break               # an object cut by the chunk's end: wait for more
            pending.append(self.records.send(self.topic, self.count, record, self.req))
            while len(pending) >= MAX_IN_FLIGHT and pending[0].answer is None \
                    and not self.stopped.is_set():
                producer.poll(POLL_S)
                self.collect()
        return text[pos:]

    # ---- the request's thread -----------------------------------------------------------------

    def answers(self, send_room):
        """The answers' bytes as they can go out: while the body arrives,
        no more than ``send_room()``; after, all of them."""
        spool = self.spool
        while True:
            ended = self.ended.is_set()     # before collect(): then nothing read is missed
            self.collect()
            if ended and not self.pending and not spool.held:
                break
            room = WRITE_BYTES
            if not ended and send_room is not None:
                room = min(room, send_room())
            if spool.held and room > 0:
                yield spool.take(room)
            else:
                self.producer.poll(POLL_S)  # a report, the body's next piece or room
        if self.failure is not None:
            yield (json.dumps(self.failure.body()) + "\n").encode()


class AnswerSpool:
    """Answer bytes not yet written, first in first out: in memory up to
    SPOOL_MEMORY_BYTES, the rest in a temporary file (deleted when closed)
    until it has been read to its end. ``held``: the bytes it holds.
    Thread-safe: one thread puts while another takes; once closed it
    drops what it is given."""

    def __init__(self):
        self._lock = threading.Lock()
        self._memory: collections.deque[bytes] = collections.deque()
        self._in_memory = 0
        self._file = None
        self._written = self._read = 0      # the file's offsets
        self._closed = False
        self.held = 0

    def put(self, data: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            if self._file is None and self._in_memory + len(data) <= SPOOL_MEMORY_BYTES:
                self._memory.append(data)
                self._in_memory += len(data)
            else:
                if self._file is None:
                    self._file = tempfile.TemporaryFile(prefix="kafkalite-rest-answers-")
                os.pwrite(self._file.fileno(), data, self._written)
                self._written += len(data)
            self.held += len(data)

    def take(self, limit: int) -> bytes:
        """At most ``limit`` of the oldest bytes held (b"" when none)."""
        with self._lock:
            out = []
            while self._memory and limit > 0:
                head = self._memory.popleft()
                if len(head) > limit:
                    self._memory.appendleft(head[limit:])
                    head = head[:limit]
                out.append(head)
                limit -= len(head)
                self._in_memory -= len(head)
            if self._file is not None and limit > 0 and not self._memory:
                data = os.pread(self._file.fileno(), min(limit, self._written - self._read),
                                self._read)
                self._read += len(data)
                out.append(data)
                if self._read == self._written:         # drained: memory first again
                    self._file.close()
                    self._file, self._written, self._read = None, 0, 0
            data = b"".join(out)
            self.held -= len(data)
            return data

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._memory.clear()
            if self._file is not None:
                self._file.close()
                self._file = None
