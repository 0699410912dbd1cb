"""kafkalite's one HTTP server: every HTTP service's WSGI app, over HTTP/1.1 with keep-alive.

The node's HTTP port (/metrics, /health, the web console), the schema
registry (also standalone), the REST proxy, the Iceberg REST catalog and
Connect's REST API are each served by ``serve()``: cheroot's HTTP/1.1
(persistent connections, chunked bodies both ways, ``Expect:
100-continue``) with what kafkalite adds, the same for every port:

- A connection cap. At most ``max_connections`` connections are open at
  once; one more is handed to ``refuse`` on the accept thread (by
  default a ``503`` with ``Retry-After`` written into its empty send
  buffer, ``answer_busy``; over TLS nothing, since an answer would need a
  handshake) and closed. A connection is served on a thread while a
  request of it is due or being answered, up to one thread a connection;
  an idle kept-alive connection waits in cheroot's selector without one,
  and a thread idle for IDLE_THREAD_S ends.
- One timeout, HTTP_IO_TIMEOUT_S: the longest a read or a write waits on a
  connection, and the longest a kept-alive connection waits for its next
  request. A body that stops short is answered by the app (its read
  fails), and the connection is closed.
- TLS (an ``ssl.SSLContext``): the handshake runs on the connection's own
  thread, on its first read, so a client that never says hello holds no
  other connection up.
- Request bodies as they come: ``wsgi.input`` of a chunked body answers
  each ``read(n)`` with what the chunk at hand holds (short reads), so an
  app reading a stream (the REST proxy's streaming produce) is not kept
  waiting for bytes the client has not sent; a body the app did not read
  to its end closes the connection after the answer.
- ``environ["kafkalite.send_room"]``: the bytes the connection's socket
  takes now without a send waiting (``send_room``), for a streamed answer
  that must not wait on a client still writing its body.

Which process runs it: any that serves HTTP (the supervisor, a broker
node, ``python -m kafkalite.registry``, a Connect worker); its threads
call the apps, any number at once. What it may import: the standard
library and cheroot (it sits at the bottom of the layers, so that the
capabilities and server/ share it).
"""
from __future__ import annotations

import fcntl
import io
import logging
import socket
import ssl
import struct
import termios
import threading
import time
from collections import deque

from cheroot import server as cheroot_server
from cheroot import wsgi
from cheroot.makefile import StreamReader, StreamWriter
from cheroot.ssl import Adapter

log = logging.getLogger("kafkalite.http")

# The longest the server waits on one read or write of a connection, and a
# kept-alive connection for its next request: a request that never comes,
# or a body that stops short of its Content-Length, would otherwise hold a
# thread, and the connection, for good.
HTTP_IO_TIMEOUT_S = 10.0
# The connection cap of a service without a setting of its own (the
# standalone registry, Connect's REST API): a node's http_max_connections'.
MAX_CONNECTIONS = 64
# How long a thread with no connection to serve waits for one before it ends.
IDLE_THREAD_S = 30.0
# What a connection over the cap gets: written by the accept thread into the
# fresh socket's empty send buffer, so it never waits on the client, then
# the connection is closed.
HTTP_RETRY_AFTER_S = 1
_BUSY_BODY = b"the HTTP port serves as many connections as it may (http_max_connections)\n"
HTTP_BUSY_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\n"
                    b"Retry-After: %d\r\n"
                    b"Content-Type: text/plain; charset=utf-8\r\n"
                    b"Content-Length: %d\r\n"
                    b"Connection: close\r\n\r\n" % (HTTP_RETRY_AFTER_S, len(_BUSY_BODY))
                    + _BUSY_BODY)
# Bytes of an early request read (and dropped) before a refused connection
# closes: closing with unread input resets it, which can discard the 503.
_BUSY_DRAIN_BYTES = 65536
# A burst of connections (a refused one's retries among them) must not wait
# out SYN retransmits of 1 s and more behind a short listen backlog.
LISTEN_BACKLOG = 128


def serve(host: str, port: int, app, tls=None, *, max_connections: int = MAX_CONNECTIONS,
          refuse=None, name: str, any_port_if_taken: bool = True,
          access_log: logging.Logger | None = None) -> "HttpServer":
    """The WSGI ``app`` served on ``host``:``port`` (0: any free port; a
    taken one: any free port, with a warning, as a node's ports do; or
    OSError, without ``any_port_if_taken``) by threads of its own.
    ``tls``: an ssl.SSLContext; ``refuse(sock, address, answer)``: what a
    connection over ``max_connections`` gets on the accept thread before
    it is closed (``answer``: False over TLS); None: answer_busy.
    ``access_log``: a logger given one INFO line a request, in the common
    log format (``addr - - [time] "GET /path HTTP/1.1" 200 -``)."""
    bind = host if host not in ("", "*") else "0.0.0.0"
    if access_log is not None:
        app = _logged(app, access_log)
    try:
        return HttpServer(bind, port, app, tls, max_connections, refuse, name)
    except OSError as exc:
        if port == 0 or not any_port_if_taken:
            raise
        log.warning("%s port %d: %s; using any free port", name, port, exc)
        return HttpServer(bind, 0, app, tls, max_connections, refuse, name)


def _logged(app, logger: logging.Logger):
    def logged(environ, start_response):
        def start(status, headers, exc_info=None):
            logger.info('%s - - [%s] "%s %s %s" %s -', environ.get("REMOTE_ADDR") or "-",
                        time.strftime("%d/%b/%Y %H:%M:%S"), environ.get("REQUEST_METHOD"),
                        environ.get("REQUEST_URI") or environ.get("PATH_INFO"),
                        environ.get("SERVER_PROTOCOL"), status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)
        return app(environ, start)
    return logged


def answer_busy(sock) -> None:
    """A 503 into a refused connection's empty send buffer, on the accept
    thread (never waiting on the client); the caller closes it."""
    try:
        sock.setblocking(False)
        drained = 0
        while drained < _BUSY_DRAIN_BYTES:
            chunk = sock.recv(4096)
            if not chunk:
                break
            drained += len(chunk)
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        return
    try:
        sock.send(HTTP_BUSY_ANSWER)
    except OSError:
        pass                   # gone already, or a full buffer: closed all the same


def send_room(sock) -> int:
    """The bytes a connection's socket takes now without a send waiting:
    half its send buffer (the kernel counts each packet's overhead against
    the buffer too) less what is queued in it, unsent or unacknowledged.
    Where the platform does not tell (no TIOCOUTQ), as much as a write is."""
    try:
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ,
                                                b"\0\0\0\0"))[0]
        size = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    except (OSError, AttributeError):
        return 1 << 30
    return size // 2 - queued


class HttpServer:
    """One port's server, serving from the moment it is made. ``server_port``:
    the port bound; ``close()`` stops it: the port is free, every
    connection closed (a request still running ends on its own thread)."""

    def __init__(self, host: str, port: int, app, tls, max_connections: int, refuse,
                 name: str):
        self.name = name
        self._server = _Server((host, port), app, max_connections, refuse, name)
        if tls is not None:
            self._server.ssl_adapter = _DeferredTls(tls)
        self._server.prepare()
        self.server_port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve, name=f"{name}-http",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.stop()
        self._thread.join(5.0)


class _Server(wsgi.Server):
    """cheroot's WSGI server with the connection cap, the kafkalite environ
    and its log in ``kafkalite.http``."""

    def __init__(self, bind_addr, app, max_connections: int, refuse, name: str):
        super().__init__(bind_addr, app, numthreads=1, server_name="kafkalite",
                         request_queue_size=LISTEN_BACKLOG, timeout=HTTP_IO_TIMEOUT_S)
        self.gateway = _Gateway
        self.ConnectionClass = _Connection
        self.requests = _ConnectionThreads(self, max_connections, name)
        self.keep_alive_conn_limit = max_connections
        self.max_connections = max_connections
        self.refuse = refuse
        self.open_connections = 0           # accept thread adds, the closing thread takes
        self._count_lock = threading.Lock()

    def process_conn(self, conn) -> None:
        """A connection with a request due: a new one counted (or refused),
        then served on a thread."""
        if not conn.counted:
            with self._count_lock:
                over = self.open_connections >= self.max_connections
                if not over:
                    self.open_connections += 1
                    conn.counted = True
            if over:
                self._refuse(conn)
                return
        super().process_conn(conn)

    def _refuse(self, conn) -> None:
        answer = self.ssl_adapter is None
        try:
            if self.refuse is not None:
                self.refuse(conn.socket, (conn.remote_addr, conn.remote_port), answer)
            elif answer:
                answer_busy(conn.socket)
        finally:
            conn.close()

    def _serve_unservicable(self):
        # cheroot's thread for connections its pool's queue had no room for
        # (a non-daemon thread, which would hold the process at exit): the
        # pool here has no such queue, so it has nothing to do
        return

    def closed(self, conn) -> None:
        with self._count_lock:
            self.open_connections -= 1

    def error_log(self, msg="", level=20, traceback=False):
        # cheroot's reports of a client that went away, timed out or failed
        # its handshake are the clients' business; an error is ours
        if level >= logging.ERROR:
            log.error("%s", msg, exc_info=traceback)
        else:
            log.debug("%s", msg, exc_info=traceback)


# the bytes a request may start with: a method's letters, or the empty line
# RFC 9112 lets a server skip before it
_REQUEST_LINE_STARTS = frozenset(
    bytes([c]) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\r\n")


class _Request(cheroot_server.HTTPRequest):
    """One request; its connection closes after the answer when the app
    did not read the body to its end, or a read of it failed. The answer's
    head waits in the connection's buffer for its first piece of body, so
    that a short answer is one send."""

    body = None             # the _Body the app reads (set by the gateway)

    def respond(self):
        try:
            super().respond()
        finally:
            self.conn.wfile.flush()
        if self.body is not None and not self.body.finished:
            self.close_connection = True

    def write(self, chunk):
        super().write(chunk)
        self.conn.wfile.flush()     # a streamed answer's piece goes out as it comes

    def simple_response(self, status, msg=""):
        super().simple_response(status, msg)
        self.conn.wfile.flush()

    def read_request_line(self):
        # A request line starts with its method, a token of letters (after at
        # most an empty line). A peer that starts otherwise -- a Kafka client's
        # length-prefixed frame, which holds no line end -- would be read up to
        # the I/O timeout and then dropped without a word (issue 74: a client
        # pointed at this port waited 10.75 s): it gets the 400 at once.
        peek = getattr(self.conn.rfile, "peek", None)
        if peek is not None:
            first = peek(1)[:1]
            if first and first not in _REQUEST_LINE_STARTS:
                self.started_request = True
                self.simple_response("400 Bad Request", "not an HTTP request")
                return False
        return super().read_request_line()

    def read_request_headers(self):
        ok = super().read_request_headers()
        self.conn.wfile.flush()     # a "100 Continue" the client waits for
        return ok


class _Connection(cheroot_server.HTTPConnection):
    """A connection counted against the cap from its first request due to
    its close."""

    RequestHandlerClass = _Request
    counted = False
    _closed = False

    def __init__(self, server, sock, makefile=cheroot_server.MakeFile):
        super().__init__(server, sock, makefile)
        self.wfile = _Writer(sock)
        if not isinstance(sock, ssl.SSLSocket):
            self.rfile = _Reader(sock)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            super().close()
        finally:
            if self.counted:
                self.server.closed(self)


class _Gateway(wsgi.Gateway_10):
    """WSGI 1.0 (PEP 3333) with the body as ``_Body`` and ``kafkalite.send_room``."""

    def get_environ(self):
        env = super().get_environ()
        req = self.req
        req.body = _ChunkedBody(req, req.conn.rfile) if req.chunked_read else \
            _Body(req, req.rfile)
        env["wsgi.input"] = req.body
        sock = req.conn.socket
        env["kafkalite.send_room"] = lambda: send_room(sock)
        return env


class _Reader(io.BufferedReader):
    """A plain connection's reads through C's buffered reader (cheroot's is
    the pure-Python one, a third of a short request's time in its header
    lines); ``has_data``, cheroot's question before a kept-alive
    connection waits in the selector, peeks without waiting."""

    bytes_read = 0

    def __init__(self, sock):
        super().__init__(socket.SocketIO(sock, "rb"), 1 << 16)
        self._sock = sock

    def has_data(self) -> bool:
        timeout = self._sock.gettimeout()
        self._sock.setblocking(False)
        try:
            return bool(self.peek(1))
        except OSError:
            return False
        finally:
            self._sock.settimeout(timeout)


class _Writer(io.BufferedWriter):
    """The connection's writes, buffered until flushed (cheroot's own
    writer sends each write at once: an answer's head and body apart)."""

    bytes_written = 0

    def __init__(self, sock):
        super().__init__(socket.SocketIO(sock, "wb"), 1 << 16)


class _Body:
    """A Content-Length body (cheroot's KnownLengthRFile ``rfile``): a read
    that fails (a timeout, the client gone) marks the connection closed,
    so the answer is not followed by a wait to drain what never comes."""

    def __init__(self, req, rfile):
        self.req, self.rfile = req, rfile

    @property
    def finished(self) -> bool:
        return not self.req.close_connection

    def _guard(self, read, *args):
        try:
            return read(*args)
        except (OSError, ValueError):
            self.req.close_connection = True
            raise

    def read(self, size=None):
        return self._guard(self.rfile.read, size)

    def readline(self, size=None):
        return self._guard(self.rfile.readline, size)

    def __iter__(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line


class _ChunkedBody(_Body):
    """A chunked body, decoded: ``read(n)`` answers at most n bytes of the
    chunk at hand (fetching the next when none is left), b"" at the end; a
    malformed chunk raises ValueError."""

    def __init__(self, req, rfile):
        super().__init__(req, rfile)
        self._left = b""
        self._ended = False

    @property
    def finished(self) -> bool:
        return self._ended and not self.req.close_connection

    def _next_chunk(self) -> bytes:
        line = self.rfile.readline(1024)
        if not line:
            raise ValueError("the body ended before its last chunk")
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise ValueError(f"a malformed chunk size: {line[:40]!r}") from None
        if size == 0:
            while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                pass                        # trailers
            self._ended = True
            return b""
        data = self.rfile.read(size)
        if len(data) < size or self.rfile.read(2) not in (b"\r\n",):
            raise ValueError("a chunk shorter than its size")
        return data

    def _read(self, size):
        if size is None or size < 0:
            out = [self._left]
            self._left = b""
            while not self._ended:
                out.append(self._next_chunk())
            return b"".join(out)
        if not self._left and not self._ended:
            self._left = self._next_chunk()
        data, self._left = self._left[:size], self._left[size:]
        return data

    def read(self, size=None):
        return self._guard(self._read, size)

    def readline(self, size=None):
        out = bytearray()
        while not out.endswith(b"\n") and (size is None or size < 0 or len(out) < size):
            piece = self.read(1 << 14)
            if not piece:
                break
            cut = piece.find(b"\n") + 1 or len(piece)
            if size is not None and size >= 0:
                cut = min(cut, size - len(out))
            out += piece[:cut]
            self._left = piece[cut:] + self._left
        return bytes(out)


class _DeferredTls(Adapter):
    """TLS with the handshake on the connection's thread: the accept thread
    only wraps the socket, and the first read shakes hands."""

    def __init__(self, context):             # noqa: D107 -- Adapter's files are unused
        self.context = context
        self.certificate = self.private_key = self.certificate_chain = self.ciphers = None
        self.private_key_password = None

    def bind(self, sock):
        return sock

    def wrap(self, sock):
        wrapped = self.context.wrap_socket(sock, server_side=True,
                                           do_handshake_on_connect=False)
        return wrapped, {"HTTPS": "on"}

    def get_environ(self):
        return {"HTTPS": "on"}

    def makefile(self, sock, mode="r", bufsize=-1):
        return (StreamReader if "r" in mode else StreamWriter)(sock, mode, bufsize)


class _ConnectionThreads:
    """cheroot's request pool (``min``, ``get``, ``put``, ``start``,
    ``stop``): each connection with a request due is served on an idle
    thread, or a new one up to ``max`` (one a connection: the cap); a
    thread idle for IDLE_THREAD_S ends."""

    def __init__(self, server, max_threads: int, name: str):
        self.server, self.max, self.min = server, max_threads, 1
        self.name = name
        self._due: deque = deque()
        self._cond = threading.Condition()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._stopping = False

    def start(self) -> None:
        self._stopping = False

    def put(self, conn) -> None:
        with self._cond:
            self._due.append(conn)
            if self._idle >= len(self._due) or len(self._threads) >= self.max:
                self._cond.notify()
                return
            thread = threading.Thread(target=self._run, name=f"{self.name}-http-conn",
                                      daemon=True)
            self._threads.add(thread)
        thread.start()

    def get(self):
        """The next connection due (cheroot's interface; the threads here
        take theirs in _run)."""
        with self._cond:
            while not self._due:
                self._cond.wait()
            return self._due.popleft()

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._due:
                    if self._stopping:
                        self._threads.discard(me)
                        return
                    self._idle += 1
                    woke = self._cond.wait(IDLE_THREAD_S)
                    self._idle -= 1
                    if not woke and not self._due:
                        self._threads.discard(me)
                        return
                conn = self._due.popleft()
            self._serve(conn)

    def _serve(self, conn) -> None:
        keep = False
        try:
            keep = conn.communicate()
        except Exception:                   # noqa: BLE001 -- a bug of ours: logged, closed
            log.exception("HTTP: a connection from %s", conn.remote_addr)
        finally:
            if keep:
                self.server.put_conn(conn)
            else:
                conn.close()

    @property
    def idle(self) -> int:
        return self._idle

    @property
    def qsize(self) -> int:
        return len(self._due)

    def stop(self, timeout=5) -> None:
        with self._cond:
            self._stopping = True
            due, self._due = list(self._due), deque()
            self._cond.notify_all()
        for conn in due:
            conn.close()
