"""TLS on a Kafka listener's non-blocking socket, through memory BIOs.

``TlsConnection`` wraps an accepted socket as much of ``ssl.SSLSocket`` as
the listener uses (``do_handshake``, ``recv_into``, ``send``, ``pending``,
``getpeercert``, ``recv``, ``fileno``, ``close``), raising the same
exceptions (``ssl.SSLWantReadError`` / ``SSLWantWriteError`` when the
socket would block, ``ssl.SSLError`` and other ``OSError``s on failure), but
moves the ciphertext itself: the socket is read 256 KiB at a time into an
``ssl.MemoryBIO`` that ``ssl.SSLObject`` decrypts from, and what it
encrypts is written from another.

Why not SSLSocket: its reads go to the kernel for every TLS record (a
header, then the body: two syscalls), and clients cut records small --
librdkafka writes one TLS record per message of a produce request, 1 KiB
records for 1 KiB messages. Profiled under confluent-kafka's produce over
TLS, a worker spent 42% of its time in SSLSocket.read; reading the socket
in big chunks and decrypting from memory halves the CPU a byte costs
(tls_bench in the issue note: 226 against 463 MB per CPU-second for 1 KiB
records).

Writes: ``send`` encrypts and writes what the socket takes; ciphertext the
socket did not take waits in ``unsent`` and goes out before any new
plaintext is accepted (``SSLWantWriteError`` until then, so a caller
retries with the same bytes, as with SSLSocket). The listener polls for
POLLOUT while ``unsent`` and calls ``flush``.

Who may call: the KafkaListener that accepted the socket, on its thread.
"""
from __future__ import annotations

import socket
import ssl
import threading

RAW_CHUNK = 256 * 1024
# Ciphertext is read into a scratch buffer of the thread's, allocated once:
# ``sock.recv(RAW_CHUNK)`` would allocate 256 KiB a read, and shrink and free
# it, for what is mostly one TLS record (while glibc's mmap threshold is
# below 256 KiB, as in a fresh process: an mmap, mremap and munmap a read).
_scratch = threading.local()


class TlsConnection:
    __slots__ = ("sock", "_obj", "_incoming", "_outgoing", "unsent", "_eof")

    def __init__(self, sock: socket.socket, context: ssl.SSLContext):
        self.sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.unsent = b""          # ciphertext the socket has not taken yet
        self._eof = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def getpeercert(self):
        return self._obj.getpeercert()

    # ---- ciphertext in and out ----------------------------------------------------------------

    def _fill(self) -> bool:
        """Read what the socket has into the incoming BIO; False at EOF.
        Raises SSLWantReadError when nothing is there yet."""
        scratch = getattr(_scratch, "buffer", None)
        if scratch is None:
            scratch = _scratch.buffer = bytearray(RAW_CHUNK)
        try:
            n = self.sock.recv_into(scratch)
        except (BlockingIOError, InterruptedError):
            raise ssl.SSLWantReadError("the socket has nothing to read") from None
        if not n:
            self._eof = True
            self._incoming.write_eof()
            return False
        with memoryview(scratch) as view:
            self._incoming.write(view[:n])
        return True

    def flush(self) -> bool:
        """Send the ciphertext waiting; True when none is left."""
        if self._outgoing.pending:
            self.unsent += self._outgoing.read()
        while self.unsent:
            try:
                n = self.sock.send(self.unsent)
            except (BlockingIOError, InterruptedError):
                return False
            self.unsent = self.unsent[n:]
        return True

    # ---- the SSLSocket calls the listener makes ---------------------------------------------

    def do_handshake(self) -> None:
        while True:
            try:
                self._obj.do_handshake()
            except ssl.SSLWantReadError:
                if not self.flush():
                    raise ssl.SSLWantWriteError("the handshake's answer waits for the socket") \
                        from None
                if not self._fill():
                    raise ConnectionResetError("the peer closed during the TLS handshake") \
                        from None
                continue
            except ssl.SSLError:
                self._send_alert()
                raise
            self.flush()    # what is left of its last bytes: ``unsent``, for POLLOUT
            return

    def _send_alert(self) -> None:
        """The alert OpenSSL wrote on a failed handshake, best effort: the
        client then says why (an expired certificate, a protocol error)."""
        try:
            self.flush()
        except OSError:
            pass

    def pending(self) -> int:
        """Bytes decrypted or still to decrypt here, which poll cannot see."""
        return self._obj.pending() + self._incoming.pending

    def recv_into(self, buffer) -> int:
        """Decrypt into ``buffer`` what is at hand, reading the socket once
        if nothing is; 0 at the end of the stream."""
        view = memoryview(buffer)
        size = len(view)
        got = 0
        read_socket = True
        while got < size:
            try:
                n = self._obj.read(size - got, view[got:])
            except ssl.SSLWantReadError:
                if got or not read_socket or self._eof:
                    break
                read_socket = False
                if not self._fill():
                    continue        # EOF: whatever is left in the BIO, then 0
                continue
            except ssl.SSLZeroReturnError:
                break               # close_notify
            except ssl.SSLEOFError:
                if not self._eof:
                    raise
                break               # closed without close_notify: an end, as SSLSocket's
                #                     suppress_ragged_eofs has it
            if n == 0:
                break
            got += n
        if self._outgoing.pending:  # session tickets after the handshake, a key update's answer
            try:
                self.flush()
            except OSError:
                pass                # the peer is gone: the next read or send says so
        return got

    def recv(self, size: int) -> bytes:
        buf = bytearray(size)
        n = self.recv_into(buf)
        return bytes(buf[:n])

    def send(self, data) -> int:
        if not self.flush():
            raise ssl.SSLWantWriteError("earlier ciphertext waits for the socket")
        n = self._obj.write(data)
        self.flush()
        return n
