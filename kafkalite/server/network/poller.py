"""The event loop's poller: ``zmq.Poller``'s interface over one persistent
epoll set (issue 72).

``zmq.Poller.poll`` costs per registered socket on every call: libzmq's
``zmq_poll`` builds a pollfd array, asks each ZeroMQ socket for its
``ZMQ_FD`` and then its ``ZMQ_EVENTS`` -- a ``poll`` and a ``getpid`` system
call each (the mailbox's signaler, with its fork check) -- and when nothing
is ready at once it does all of that twice. A worker under one Kafka producer
spent a third of its loop there: ~4 ``poll`` and ~3 ``getpid`` calls a Produce
request, for six ZeroMQ sockets that carried nothing.

``EpollPoller`` keeps every descriptor registered in one epoll set, so a pass
whose only traffic is on plain descriptors (Kafka connections, ring
doorbells) is one ``epoll_wait`` and no ZeroMQ call. A ZeroMQ socket is
registered by its ``ZMQ_FD``, which is *not* its readiness: it signals that
the socket's mailbox has commands (a message arrived on an empty pipe, a
peer connected, ...), and whoever processes them -- reading ``ZMQ_EVENTS``,
and also any ``send`` or ``recv`` on that socket -- clears the signal
whether or not the messages were read. libzmq's documented rule follows,
and is this module's invariant:

    a ZeroMQ socket's ``ZMQ_EVENTS`` is read (and the socket reported when it
    has what it was registered for) after its ``ZMQ_FD`` signalled, and in
    the next ``poll`` after every ``send`` or ``recv`` on it and after every
    ``poll`` that reported it; ``poll`` never blocks while one of those reads
    is pending or found something.

``send`` and ``recv`` are seen by the sockets themselves: a ``PolledSocket``
(what ``polled_context()``'s sockets are) puts itself in its poller's
``touched`` set on each. A plain ``zmq.Socket`` registered here cannot say
so, and is read every ``poll``, as ``zmq.Poller`` reads it: correct,
without the saving.

What ``poll`` returns is ``zmq.Poller``'s: ``[(socket or fd, events)]`` with
ZeroMQ's event bits (``zmq.POLLIN`` 1, ``POLLOUT`` 2, ``POLLERR`` 4), a
descriptor's hang-up or error as ``POLLERR``; registering with no events
unregisters. Descriptors are level-triggered, as with ``poll(2)``.

One difference from ``poll(2)``, epoll's: a descriptor must be unregistered
before it is closed (every caller here does), or a duplicate of it held
elsewhere keeps reporting under its old number. ``unregister`` of a
descriptor already closed is quiet.

Who may call: the one thread of the loop that owns it (the worker's; the
supervisor keeps ``zmq.Poller``: its loop turns about 13 times a second
under load, where the saving is 0.03 µs a message).
"""
from __future__ import annotations

import errno
import select

import zmq

_ZMQ_POLLIN, _ZMQ_POLLOUT, _ZMQ_POLLERR = int(zmq.POLLIN), int(zmq.POLLOUT), int(zmq.POLLERR)
_EPOLL_ERR = select.EPOLLERR | select.EPOLLHUP
_EPOLL_KNOWN = select.EPOLLIN | select.EPOLLOUT | _EPOLL_ERR


def _epoll_mask(flags: int) -> int:
    """ZeroMQ's event bits -> epoll's (errors and hang-ups epoll always reports)."""
    return ((select.EPOLLIN if flags & _ZMQ_POLLIN else 0)
            | (select.EPOLLOUT if flags & _ZMQ_POLLOUT else 0))


# epoll's bits (those of _EPOLL_KNOWN) -> ZeroMQ's, as zmq_poll maps poll(2)'s
_ZMQ_EVENTS_OF = [((_ZMQ_POLLIN if ev & select.EPOLLIN else 0)
                   | (_ZMQ_POLLOUT if ev & select.EPOLLOUT else 0)
                   | (_ZMQ_POLLERR if ev & _EPOLL_ERR else 0))
                  for ev in range(_EPOLL_KNOWN + 1)]


class PolledSocket(zmq.Socket):
    """A ZeroMQ socket that tells its poller of every ``send`` and ``recv``
    (``send_multipart``, ``send_string``, ``recv_multipart``, ... all go
    through these two) and ``poll``: after one, its ``ZMQ_FD`` may have been
    cleared with messages waiting, so the poller reads its ``ZMQ_EVENTS``
    again. (Reading ``ZMQ_EVENTS`` elsewhere would clear it unseen: only the
    poller does.)"""

    # the set of the poller it is registered with (EpollPoller.touched), or
    # None; a class attribute so that pyzmq's attribute setter allows it
    touched: set | None = None

    def send(self, data, flags=0, copy=True, track=False, **kwargs):
        if self.touched is not None:
            self.touched.add(self)
        return super().send(data, flags, copy=copy, track=track, **kwargs)

    def recv(self, flags=0, copy=True, track=False):
        if self.touched is not None:
            self.touched.add(self)
        return super().recv(flags, copy=copy, track=track)

    def recv_into(self, buffer, /, *args, **kwargs):
        if self.touched is not None:
            self.touched.add(self)
        return super().recv_into(buffer, *args, **kwargs)

    def poll(self, timeout=None, flags=zmq.POLLIN):
        # a zmq_poll of its own: it reads ZMQ_EVENTS, which clears ZMQ_FD too
        if self.touched is not None:
            self.touched.add(self)
        return super().poll(timeout, flags)


class PolledContext(zmq.Context):
    """A context whose sockets are PolledSockets."""
    _socket_class = PolledSocket


def polled_context() -> PolledContext:
    """The process's ZeroMQ context (``zmq.Context.instance()``, shadowed:
    the same libzmq context, its inproc endpoints and I/O thread) handing
    out PolledSockets."""
    return PolledContext.shadow(zmq.Context.instance())


class EpollPoller:
    """``zmq.Poller``'s register / unregister / poll over a persistent epoll
    set (this module's docstring)."""

    def __init__(self):
        self._epoll = select.epoll()
        # epoll's fd -> (what poll() names: the socket or the fd given, the
        # ZeroMQ socket or None, the events registered for in ZeroMQ's bits)
        self._by_fd: dict[int, tuple] = {}
        self._fd_of: dict = {}                # what was registered -> its fd in the set
        # PolledSockets whose ZMQ_EVENTS the next poll reads: sent or
        # received on, or reported, since the last read
        self.touched: set = set()
        self._untracked: list = []            # plain zmq.Sockets: read every poll

    def register(self, socket, flags: int = _ZMQ_POLLIN | _ZMQ_POLLOUT) -> None:
        """Poll ``socket`` (a ZeroMQ socket, an fd, or an object with
        ``fileno()``) for ``flags``; again with other flags modifies; with
        none, unregisters (zmq.Poller's contract)."""
        if not flags:
            self.unregister(socket)
            return
        if isinstance(socket, zmq.Socket):
            fd, zsock, mask = socket.get(zmq.FD), socket, select.EPOLLIN
        else:
            fd = socket if isinstance(socket, int) else socket.fileno()
            zsock, mask = None, _epoll_mask(flags)
        if socket in self._fd_of:
            try:
                self._epoll.modify(fd, mask)
            except FileNotFoundError:           # closed and reused without unregistering
                self._epoll.register(fd, mask)
        else:
            try:
                self._epoll.register(fd, mask)
            except FileExistsError:
                self._epoll.modify(fd, mask)
        self._by_fd[fd] = (socket, zsock, int(flags))
        self._fd_of[socket] = fd
        if zsock is not None:
            if isinstance(zsock, PolledSocket):
                zsock.touched = self.touched
                self.touched.add(zsock)         # messages may wait already
            elif zsock not in self._untracked:
                self._untracked.append(zsock)

    def unregister(self, socket) -> None:
        fd = self._fd_of.pop(socket)            # KeyError as zmq.Poller's
        if self._by_fd.get(fd, (None,))[0] is socket:
            # (else the fd was closed unregistered and its number is
            # another's now, which stays)
            del self._by_fd[fd]
            try:
                self._epoll.unregister(fd)
            except OSError as exc:      # the fd closed first: epoll dropped it
                if exc.errno not in (errno.ENOENT, errno.EBADF):
                    raise
        if isinstance(socket, zmq.Socket):
            self.touched.discard(socket)
            if isinstance(socket, PolledSocket):
                socket.touched = None
            if socket in self._untracked:
                self._untracked.remove(socket)

    def poll(self, timeout: int | None = None) -> list[tuple]:
        """[(socket or fd, ZeroMQ event bits)] of what is ready, waiting up
        to ``timeout`` ms (None or negative: for ever)."""
        ready: dict = {}
        by_fd, touched = self._by_fd, self.touched
        if touched or self._untracked:
            # the ZeroMQ sockets whose ZMQ_FD may have been cleared with
            # messages waiting: read before blocking, so that none waits for
            # a signal that already came
            looked = (*touched, *self._untracked)
            touched.clear()
            for zsock in looked:
                fd = self._fd_of.get(zsock)
                if fd is not None:
                    bits = zsock.get(zmq.EVENTS) & by_fd[fd][2]
                    if bits:
                        ready[zsock] = bits
                        touched.add(zsock)
        if ready:
            wait = 0
        elif timeout is None or timeout < 0:
            wait = -1
        else:
            wait = timeout / 1000.0
        for fd, ev in self._epoll.poll(wait):
            entry = by_fd.get(fd)
            if entry is None:
                continue
            key, zsock, flags = entry
            if zsock is None:
                bits = _ZMQ_EVENTS_OF[ev & _EPOLL_KNOWN]
                if bits:
                    ready[key] = bits
            elif key not in ready:
                # reading ZMQ_EVENTS processes the socket's mailbox, which
                # clears its ZMQ_FD
                bits = zsock.get(zmq.EVENTS) & flags
                if bits:
                    ready[key] = bits
                    # read again next time, as zmq.Poller would: its handler
                    # may leave messages (a bounded drain)
                    touched.add(zsock)
        return list(ready.items())

    def close(self) -> None:
        for socket in list(self._fd_of):
            if isinstance(socket, PolledSocket):
                socket.touched = None
        self._epoll.close()
