"""The client's transport seam: a link is its path to one broker process.

Every request a client sends goes through a ``Link``; the producer's
sender, the consumer and the group membership hold links, never sockets,
so a new transport is a new ``Link`` and nothing else changes. Three exist:

- ``Connection`` (connection.py): a ZeroMQ DEALER to a worker or the
  supervisor, carrying the native protocol (any API), with a socket
  monitor that notices a broker process going away at once;
- ``RingLink`` (ring_link.py): a shared-memory ring to a worker on this
  host, which carries Produce requests only;
- ``TcpLink`` (tcp_link.py): Kafka's wire protocol on a plain socket to a
  worker's PLAINTEXT Kafka listener, written from the owner's thread (no
  ZeroMQ I/O thread on either side): the producer's and the consumer's
  links with ``kafkalite.transport: tcp``, their default.

The contract, for every link:

- ``send(api_key, body)`` queues a request and returns its correlation id;
  ``expect_response=False`` for a request that gets no answer (acks=0).
  ``ready()`` says whether the link takes another request now (flow
  control: a cap on requests in flight, room in a ring); a caller that
  sends anyway is not refused, the link queues it.
- ``receive()`` returns, without blocking, every answer that has arrived:
  (correlation id, body), or (correlation id, KafkaError) for a request
  the broker refused as a whole or the link failed.
- ``register(poller)`` / ``unregister(poller)`` put what the link waits on
  into a ``zmq.Poller`` (a link may need more than one descriptor, e.g. a
  socket and its disconnect monitor); after the poller wakes, the owner
  calls ``receive()`` on its links (those whose ``woken(ready)`` is True,
  ``ready`` being the set of what the poller reported: a link that knows
  its answers come only through its own descriptor is not read when the
  poller did not report it). ``arm()`` is called just before the
  poller sleeps and returns False when answers are already waiting (a
  ring's doorbell would not ring for them).
- ``alive()`` turns False once the broker process behind the link is known
  to be gone; the owner then drops the link, retries what was in flight
  elsewhere, and asks for metadata again.
- ``close()`` releases it; ``linger_ms`` lets queued requests go out.
- ``acks_in_order``: True for a link whose broker answers its requests
  strictly in the order they were sent, holding later answers back behind
  one it cannot give (a ring: the worker acknowledges entries in sequence
  order only). A request on it that times out holds back everything
  behind it, so the owner gives such a link up, as for a dead one, rather
  than retry on it.

Who may call: one thread per link (the thread that owns it); links are not
thread-safe.
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class Link(ABC):
    endpoint: str
    acks_in_order = False

    @abstractmethod
    def send(self, api_key: int, body: dict, *, expect_response: bool = True,
             version: int | None = None) -> int:
        """Queue a request; returns its correlation id."""

    @abstractmethod
    def receive(self) -> list:
        """Every answer that has arrived: [(correlation id, body | KafkaError)]."""

    @abstractmethod
    def register(self, poller) -> None:
        """Add what this link waits on to ``poller``."""

    @abstractmethod
    def unregister(self, poller) -> None:
        """Take it out again."""

    @abstractmethod
    def alive(self) -> bool:
        """False once the broker process behind the link is known to be gone."""

    @abstractmethod
    def close(self, linger_ms: int = 0) -> None:
        """Release the link; with ``linger_ms``, queued requests may still go out."""

    def ready(self) -> bool:
        """Whether another request may be sent now."""
        return True

    def arm(self) -> bool:
        """Before the owner's poller sleeps: False if answers already wait."""
        return True

    def woken(self, ready) -> bool:
        """Whether ``receive()`` may have something after a poll that
        reported ``ready`` (a set of what was registered). True unless the
        link knows better."""
        return True

    def _logged_in_again(self, result) -> bool:
        """Whether ``result`` was a refusal for a login this link had lost
        and the link has logged in again (the request is then sent once
        more). Only a native link that logs in (connection.py) ever does."""
        return False
