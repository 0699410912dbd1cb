"""Shared-memory rings of same-host producers, drained into the replica manager.

A producer on this host creates a ring in /dev/shm (kafkalite/shm/) and
asks the worker to drain it with the ``shm_attach`` extension request. Each
ring entry is (topic, partition, record batches); the gateway appends it as
the partition's leader through the replica manager (the same write path as
a Produce request) and acknowledges it in the ring with the base offset or
an error code: at once, or -- for a producer that attached with acks=all,
to a partition with followers -- once the high watermark has passed it (a
``DelayedProduce`` waits in the replica manager's purgatory, answered as an
acks=all Produce would be). The ring takes acknowledgements in sequence
order only, and entries of different partitions (or an error after an
entry that waits) are settled out of order: an entry settled while an
earlier one still waits is queued behind it (``unacked``) and acknowledged
when that one is. The ring's memory is released as soon as an entry is in
the log. Each ring's doorbell descriptor sits in the worker's poller.

The common entry -- no authorizer, no quota, acks 0 or 1, a batch
leader_append.pyx's one-pass append serves, not transactional -- is
read, appended, acknowledged and released in C (WorkerCore.append_entries
with ring_append.LeaderSink), no Python call or object of its own (issue
72: at 100 partitions an entry is a record or a few, and the Python path's
two dozen calls an entry cost 17-23 us of worker CPU a message); the C path
stops at the first entry it declines, which the Python path below takes,
so the ring's order holds. Acknowledgements and releases are written
without ringing the producer; ``drain`` rings it once at its end, if it
sleeps (a producer woken by the first ack of a drain re-armed and slept
again while the rest were written: a doorbell write and a wake-up per
entry).

Transactions: a transactional producer names its transactional id (and
its transaction version) in ``shm_attach``. An entry that would open the
producer's transaction in a partition is verified with the transaction
coordinator first -- or, for transactions v2, added to the transaction --
exactly as a Produce request is (replica_manager.py); the ring's later
entries wait meanwhile, so its order holds, and the ring is not drained.
Transactional batches in a ring attached without a transactional id are
refused with INVALID_RECORD.

A ring is its producer's to break, never the worker's: a ring whose memory
is corrupt, impossible or truncated (the core raises RingCorrupted, and
survives the SIGBUS of a truncation: ext/shm_ring.pyx) is closed with
``CORRUPT_MESSAGE`` and the reason left in its header, where the producer
finds it (RingPoisoned; the client's RingLink answers its requests with the
error), and the worker goes on serving every other ring and partition. The
files of a ring closed that way are unlinked once its producer is gone.
A drain takes at most POLLS_PER_DRAIN polls of ENTRIES_PER_DRAIN entries,
and a busy ring is drained for at most DRAINS_PER_ARM rounds before the
loop sleeps; it then rings its own doorbell, so the loop comes straight
back to it after serving the others. The bounds are small (128 entries
per round) because the loop's sockets wait meanwhile: a consumer's fetch
that the appends would answer sat unread behind up to 8,192 appends (half
a second of one-record batches), so the records were in the log and
acknowledged long before any consumer had them. At most MAX_RINGS rings are attached at a time.

Security: a ring is attached only through ``shm_attach`` on the worker's
native ROUTER, so with CURVE on (``native_curve_secret_key_file``, or
security on at all: server/auth/security.py native_security) only by an
authenticated client, and the ring remembers that client's principal. With
the authorizer on as well, the attach is refused (TOPIC_AUTHORIZATION_FAILED)
unless the principal may Write some topic (and every topic the attach names
in ``topics``), and each entry is checked for Write on its own topic before
it is appended (refused entries are acknowledged with
TOPIC_AUTHORIZATION_FAILED), as a Produce request is. The ring's files are
its producer's own, mode 0600 (kafkalite/shm/): other local users cannot
open them, but the worker, as the server's user, can. So, in every
configuration, the attach is refused (CLUSTER_AUTHORIZATION_FAILED) unless
the request shows the ring's attach secret (``secret``, hex), which only a
process that can read the ring knows, and -- on a local door, whose peer's
uid the kernel tells -- the ring's files belong to that uid; links are not
followed (WorkerRing.attach). Before, another local user who read a ring's
name in /dev/shm attached it to the worker draining it, which took it over
under that user's principal (issue 67).

Quotas (quotas.py): each entry's batch bytes count against the
``producer_byte_rate`` of the ring's principal and the client id its
producer named in ``shm_attach``. A ring whose producer went over its quota
is not drained for the throttle time (its doorbell leaves the poller
meanwhile, so a ringing doorbell does not spin the loop): the ring fills
and the producer waits for room, which is how a ring producer is slowed.
``next_deadline`` is when the first paused ring resumes.

Who may call: the worker, on its event-loop thread.
"""
from __future__ import annotations

import collections
import logging
import os
import time

import zmq

from kafkalite import errors
from kafkalite._ext.leader_append import append_once
from kafkalite._ext.ring_append import LeaderSink
from kafkalite.errors import KafkaError
from kafkalite.protocol.enums import AclOperation, ResourceType
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.replica.purgatory import DelayedProduce
from kafkalite.server.network.quotas import PRODUCER_BYTE_RATE, user_of
from kafkalite.server.network.requests import ANONYMOUS

log = logging.getLogger("kafkalite.rings")

ENTRIES_PER_DRAIN = 128
POLLS_PER_DRAIN = 1
DRAINS_PER_ARM = 1
MAX_RINGS = 1024
MAX_CLOSED_RINGS = 8 * MAX_RINGS
RING_ACK_TIMEOUT_S = 30.0        # an acks=all entry not committed by then is REQUEST_TIMED_OUT
TOPIC_DENIED = errors.TopicAuthorizationFailedError.code
# an entry refused while the worker's ACLs are behind (server/auth/stale_acls.py's
# STALE_ACLS_CODE, and why; replica/ does not import auth/)
STALE_ACLS_CODE = errors.NotLeaderOrFollowerError.code
# A ring's producer is on this host by construction: its ACL host.
RING_HOST = "127.0.0.1"


def _secret(body: dict) -> bytes:
    """The ring's attach secret the asker showed (hex); b"" (which no ring
    has) when it showed none, or nothing of the kind."""
    try:
        return bytes.fromhex(body.get("secret") or "")
    except (TypeError, ValueError):
        return b""


class RingGateway:
    def __init__(self, replica_manager, poller: zmq.Poller, broker_id: int):
        self.replica_manager = replica_manager
        self.poller = poller
        self.broker_id = broker_id
        self.rings: dict[int, object] = {}     # doorbell fd -> WorkerRing
        self.closed: dict[str, int] = {}       # name of a ring closed with an error -> producer ident
        # per ring: its producer's transactional id and transaction version,
        # the entries taken from it but not appended yet (behind one being
        # verified), and whether a verification is under way
        self.txn: dict[int, tuple] = {}
        self.held: dict[int, collections.deque] = {}
        # per ring: [seq, error code or None while it waits, base offset] of
        # the entries appended but not acknowledged, from the oldest that
        # waits for its high watermark on; empty when none waits
        self.unacked: dict[int, collections.deque] = {}
        self.verifying: set = set()
        self.acks: dict[int, int] = {}         # per ring: its producer's acks
        self.principals: dict[int, str] = {}   # per ring: who attached it
        self.authorizer = None                 # the worker's, with the authorizer on
        # the worker's ACLs are behind the controller's (acl_control.py): no
        # decision is made with them, the attach or entry is refused retriably
        self.acls_behind = False
        self.quotas = None                     # the worker's QuotaManager
        self.client_ids: dict[int, str] = {}   # per ring: its producer's client id
        self.paused: dict[int, float] = {}     # per ring over its quota: resume time
        self._bad_ring = RateLimitedLog(log)
        self._sink = LeaderSink(replica_manager, lambda: self._bad_ring.exception(
            "broker %d: ring append failed", self.broker_id))

    def attach(self, body: dict, principal: str, peer_uid: int | None = None) -> dict:
        """The ``shm_attach`` extension request of ``principal`` (the user
        ``peer_uid`` when the kernel told who asks: a local door's peer)."""
        from kafkalite.shm.ring import RingRefused, WorkerRing
        if self.authorizer is not None:
            topics = body.get("topics") or []
            if self._behind(principal):
                raise errors.NotLeaderOrFollowerError(
                    "this broker's ACLs are out of date; attach again (it is catching up)")
            allowed = self.authorizer.authorize_any(principal, RING_HOST, AclOperation.WRITE,
                                                    ResourceType.TOPIC) and all(
                isinstance(t, str) and self._may_write(principal, t) for t in topics)
            if not allowed:
                what = f"topics {', '.join(map(str, topics))}" if topics else "any topic"
                raise errors.TopicAuthorizationFailedError(
                    f"{principal} may not write {what}, so it may not attach a ring")
        if len(self.rings) >= MAX_RINGS:
            raise errors.PolicyViolationError(
                f"worker {self.broker_id} drains {MAX_RINGS} rings already")
        try:
            ring = WorkerRing.attach(body["ring"], _secret(body), peer_uid)
        except RingRefused as exc:
            raise errors.ClusterAuthorizationFailedError(
                f"{principal} may not attach ring {body.get('ring')!r}: {exc}")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise errors.InvalidRequestError(f"cannot attach ring {body.get('ring')!r}: {exc}")
        except Exception as exc:    # RingCorrupted: a ring broken before it was attached
            raise errors.CorruptRecordError(f"cannot attach ring {body.get('ring')!r}: {exc}")
        self.rings[ring.fileno()] = ring
        self.txn[ring.fileno()] = (body.get("transactional_id") or None,
                                   int(body.get("transaction_version") or 1))
        self.acks[ring.fileno()] = int(body.get("acks", 1))
        self.principals[ring.fileno()] = principal
        self.client_ids[ring.fileno()] = str(body.get("client_id") or "")
        self.held[ring.fileno()] = collections.deque()
        self.unacked[ring.fileno()] = collections.deque()
        self.poller.register(ring.fileno(), zmq.POLLIN)
        self.drain(ring)
        return {"worker": self.broker_id, "pid": os.getpid()}

    def arm(self) -> None:
        """Before the loop sleeps: drain what arrived since the last drain,
        until each ring's doorbell is armed."""
        if self.paused:
            self._resume()
        for fd, ring in list(self.rings.items()):
            if fd in self.verifying or fd in self.paused:
                continue            # drained again when the coordinator answers / it resumes
            try:
                for _ in range(DRAINS_PER_ARM):
                    if ring.arm():
                        break
                    self.drain(ring)
                else:
                    ring._nudge()       # still busy: come back after serving the rest
            except Exception as exc:
                self._close_with_error(ring, exc)

    def on_events(self, events: dict) -> None:
        for fd, ring in list(self.rings.items()):
            if fd in events and fd not in self.paused:
                self.drain(ring)

    # ---- quotas ------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        return min(self.paused.values()) if self.paused else None

    def _pause(self, fd: int, ms: int) -> None:
        if fd not in self.paused:
            self.poller.unregister(fd)
        self.paused[fd] = max(self.paused.get(fd, 0.0), time.monotonic() + ms / 1000.0)

    def _resume(self) -> None:
        now = time.monotonic()
        for fd, until in list(self.paused.items()):
            if until <= now:
                del self.paused[fd]
                if fd in self.rings:
                    self.poller.register(fd, zmq.POLLIN)

    def drain(self, ring, everything: bool = False) -> None:
        """Append what the ring holds (up to POLLS_PER_DRAIN polls unless
        ``everything``); a ring that turns out broken is closed."""
        try:
            # a consumer waiting on several partitions gets the drain's
            # appends in one answer
            with self.replica_manager.gathered_wakeups():
                self._drain(ring, everything)
            # the drain's acks and releases were written without a wake: the
            # producer is rung once for all of them, if it sleeps
            ring.wake_peer()
        except Exception as exc:
            self._close_with_error(ring, exc)

    def _drain(self, ring, everything: bool) -> None:
        fd = ring.fileno()
        if fd in self.verifying or (fd in self.paused and not everything):
            return
        quotas = self.quotas if self.quotas is not None and self.quotas.enabled else None
        held = self.held.setdefault(fd, collections.deque())
        # entries that need no check of their own are appended in C
        # (ext/ring_append.pyx); it stops at the first it does not serve
        sink = self._sink if (quotas is None and self.authorizer is None
                              and self.acks.get(fd, 1) != -1) else None
        polls = 0
        while held or everything or polls < POLLS_PER_DRAIN:
            if not held:
                polls += 1
                taken = ring.append_entries(sink, ENTRIES_PER_DRAIN) if sink is not None else 0
                if taken < ENTRIES_PER_DRAIN:
                    held.extend(ring.poll(ENTRIES_PER_DRAIN - taken))
                if not held:
                    if taken:
                        continue
                    return
            while held:
                seq, topic, partition, batch = held[0]
                refused = self._check(fd, ring, topic, partition, batch)
                if refused is None:
                    return          # the rest waits for the coordinator's answer
                held.popleft()
                self._append(ring, seq, topic, partition, batch, refused)
                if quotas is not None and not everything:
                    ms = quotas.record(PRODUCER_BYTE_RATE, user_of(self.principals.get(fd) or
                                                                   ANONYMOUS),
                                       self.client_ids.get(fd, ""), len(batch))
                    if ms:
                        self._pause(fd, ms)
                        return

    def _append(self, ring, seq: int, topic: str, partition: int, batch, refused: int = 0) -> None:
        try:
            if refused == errors.InvalidRecordError.code:
                raise errors.InvalidRecordError(
                    "transactional record batches in a ring attached without a transactional id")
            if refused == TOPIC_DENIED:
                raise errors.TopicAuthorizationFailedError(
                    f"the ring's principal may not write topic {topic!r}")
            if refused:
                raise errors.error_for_code(refused)(
                    f"{topic}-{partition} is not in the producer's open transaction"
                    if refused == errors.InvalidTxnStateError.code else
                    f"the transaction coordinator could not verify {topic}-{partition}")
            all_acks = self.acks.get(ring.fileno(), 1) == -1
            if not all_acks:
                # the common kind in one C call (leader_append.pyx), as a
                # Produce request's: None when it is not, nothing appended
                part = self.replica_manager.partitions.get((topic, partition))
                done = append_once(self.replica_manager, part, batch, seq) \
                    if part is not None else None
                if done is not None:
                    self._ack(ring, seq, 0, done[1])
                    ring.release_through(seq, False)
                    return
            part = self.replica_manager.partition(topic, partition)
            if all_acks and part.under_min_isr:
                raise errors.NotEnoughReplicasError(
                    f"{part.name} has {len(part.isr)} in-sync replica(s); min.insync.replicas "
                    f"is {part.log.config.min_insync_replicas}")
            info = self.replica_manager.append(part, batch)
            if all_acks and part.high_watermark <= info.last_offset:
                self._ack_when_committed(ring, seq, part, info)
            else:
                self._ack(ring, seq, 0, info.first_offset)
        except KafkaError as exc:
            self._ack(ring, seq, exc.code, -1)
        except Exception:
            self._bad_ring.exception("broker %d: ring append failed", self.broker_id)
            self._ack(ring, seq, errors.UnknownServerError.code, -1)
        ring.release_through(seq, False)

    def _ack(self, ring, seq: int, error_code: int, base_offset: int) -> None:
        """Acknowledge entry ``seq`` now, or behind the earlier ones that
        still wait for their high watermark."""
        unacked = self.unacked[ring.fileno()]
        if unacked:
            unacked.append([seq, error_code, base_offset])
        else:
            ring.ack(seq, error_code, base_offset, False)    # drain() wakes the producer once

    def _ack_when_committed(self, ring, seq: int, part, info) -> None:
        fd = ring.fileno()
        entry = [seq, None, -1]
        self.unacked[fd].append(entry)

        def respond(failed: dict) -> None:
            if self.rings.get(fd) is not ring:
                return                  # the ring went away; its producer retries
            exc = failed.get(part.key)
            entry[1:] = (0, info.first_offset) if exc is None else (exc.code, -1)
            unacked = self.unacked[fd]
            try:
                while unacked and unacked[0][1] is not None:
                    ring.ack(*unacked.popleft())
            except Exception as broken:     # RingCorrupted: the producer broke it
                self._close_with_error(ring, broken)
        self.replica_manager.purgatory.watch(DelayedProduce(
            None, time.monotonic() + RING_ACK_TIMEOUT_S, {part.key: part},
            {part.key: info.last_offset + 1}, respond))

    def _check(self, fd: int, ring, topic: str, partition: int, batch) -> int | None:
        """0: the entry may be appended; an error code: it is refused; None:
        it would open the producer's transaction here, and the coordinator
        has been asked (``_verified`` goes on)."""
        if self.authorizer is not None:
            principal = self.principals.get(fd)
            if self._behind(principal):
                return STALE_ACLS_CODE
            if not self._may_write(principal, topic):
                return TOPIC_DENIED
        rm = self.replica_manager
        found = rm.transaction_start(topic, partition, batch)
        if found is None or not found[2] or rm.verifier is None:
            return 0
        tid, version = self.txn.get(fd, (None, 1))
        if tid is None:
            return errors.InvalidRecordError.code
        pid, epoch, _, sequence = found
        self.verifying.add(fd)
        rm.start_verification(pid, epoch, {(topic, partition): sequence}, version >= 2)
        rm.verifier(tid, pid, epoch, [(topic, partition)],
                    lambda codes: self._verified(fd, ring, codes), add=version >= 2)
        return None

    def _verified(self, fd: int, ring, codes: dict) -> None:
        """The coordinator's answer for the ring's first held entry."""
        if self.rings.get(fd) is not ring:
            return                  # the ring was closed meanwhile
        self.verifying.discard(fd)
        seq, topic, partition, batch = self.held[fd].popleft()
        self._append(ring, seq, topic, partition, batch, codes.get((topic, partition), 0))
        self.drain(ring)

    def _behind(self, principal: str | None) -> bool:
        return self.acls_behind and principal not in self.authorizer.super_users

    def _may_write(self, principal: str | None, topic: str) -> bool:
        return principal is not None and self.authorizer.authorize(
            principal, RING_HOST, AclOperation.WRITE, ResourceType.TOPIC, topic)

    def _forget(self, fd: int) -> None:
        if self.paused.pop(fd, None) is not None:
            self.poller.register(fd, zmq.POLLIN)    # the callers unregister it as usual
        self.client_ids.pop(fd, None)
        self.principals.pop(fd, None)
        self.txn.pop(fd, None)
        self.acks.pop(fd, None)
        self.held.pop(fd, None)
        self.unacked.pop(fd, None)
        self.verifying.discard(fd)

    def _close_with_error(self, ring, exc: Exception) -> None:
        from kafkalite.shm.ring import RingCorrupted, RingFenced
        fd = next((fd for fd, r in self.rings.items() if r is ring), None)
        if fd is None:
            return
        del self.rings[fd]
        self._forget(fd)
        self.poller.unregister(fd)
        if isinstance(exc, RingFenced):      # another worker took it over: not ours to judge
            ring.close()
            return
        code = (errors.CorruptRecordError.code if isinstance(exc, RingCorrupted)
                else errors.UnknownServerError.code)
        self._bad_ring.warning("broker %d: closed ring %s of producer pid %d: %s",
                               self.broker_id, ring.name, ring.producer_pid, exc)
        if len(self.closed) >= MAX_CLOSED_RINGS:    # stop watching the oldest
            del self.closed[next(iter(self.closed))]
        self.closed[ring.name] = ring._producer_ident()
        ring.close_with_error(code, str(exc))

    def housekeeping(self) -> None:
        """Drop the rings whose producer is gone (after draining them), and
        unlink the files of closed rings whose producer is gone."""
        from kafkalite.shm.ring import process_alive, unlink_ring
        for fd, ring in list(self.rings.items()):
            if not ring.producer_alive():
                self.drain(ring, everything=True)     # it appends no more
                self._drop(fd, unlink=True)
        for name, ident in list(self.closed.items()):
            if not process_alive(ident):
                del self.closed[name]
                unlink_ring(name)

    def _drop(self, fd: int, unlink: bool) -> None:
        ring = self.rings.pop(fd, None)
        self._forget(fd)
        if ring is not None:
            self.poller.unregister(fd)
            ring.close(unlink=unlink)

    def close(self) -> None:
        for fd in list(self.rings):
            self._drop(fd, unlink=True)

