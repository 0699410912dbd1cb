"""Incremental fetch sessions (KIP-227): the session metadata of Fetch (Kafka's
FetchMetadata: ids, epochs) and the fetching side's handler (Kafka's
FetchSessionHandler), one per broker fetched from, used by kafkalite's
consumer and its followers' replica fetcher. The broker's side is
server/replica/fetch_session.py.

The first fetch to a broker is full, at epoch 0, which asks the broker to
open a session of its partitions; the answer names it (or 0: the broker's
cache had no room, and the next fetch is full again). From then on each
fetch carries the session's id and next epoch and names only the
partitions added or whose parameters changed (a new fetch offset, after
records); those no longer wanted are forgotten (``forgotten_topics_data``).
The broker answers only the partitions with something new, so an idle
partition costs neither side anything per fetch.

A session error (FETCH_SESSION_ID_NOT_FOUND: the broker lost or evicted
it; INVALID_FETCH_SESSION_EPOCH: a fetch lost or repeated), a fetch that
was never answered, or a new connection make the next fetch full again:
at epoch 0 with the old id, which closes it on the broker, as Kafka's
client does (``closing``), or with id 0 when the broker no longer has it.

Who may call: the owner of the fetches (the consumer, the replica
fetcher), on its own thread; one fetch in flight per handler. The
constants and ``next_epoch`` are for either side.
"""
from __future__ import annotations

from kafkalite import errors

INVALID_SESSION_ID = 0       # no session
INITIAL_EPOCH = 0            # a full fetch opening a session
FINAL_EPOCH = -1             # a full fetch in no session
MAX_EPOCH = (1 << 31) - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


class FetchSessionHandler:
    """The session with one broker. ``build(wanted)`` gives the next
    fetch's session fields and partitions; ``handle_response`` /
    ``handle_error`` take its outcome. A partition's value (its fetch
    offset and whatever else the fetch names per partition) is compared
    as a whole: a changed value is sent again."""

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict = {}          # the session's, as last sent: key -> value

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict) -> tuple[int, int, dict, list]:
        """(session id, epoch, {key: value} to send, [keys] to forget) of a
        fetch of ``wanted`` ({key: value}, in the order to fetch them)."""
        if self.full:
            self.partitions = dict(wanted)
            return self.session_id, self.epoch, dict(wanted), []
        send = {k: v for k, v in wanted.items() if self.partitions.get(k, _ABSENT) != v}
        forget = [k for k in self.partitions if k not in wanted]
        self.partitions = dict(wanted)
        return self.session_id, self.epoch, send, forget

    def handle_response(self, body: dict) -> None:
        code = body.get("error_code", 0)
        if code == errors.FetchSessionIdNotFoundError.code:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif code:
            self.epoch = INITIAL_EPOCH          # close it, open a new one
        elif body.get("session_id", INVALID_SESSION_ID) == INVALID_SESSION_ID:
            # none made (a full cache), or closed (nothing left in it)
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif self.full:
            self.session_id, self.epoch = body["session_id"], next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)

    def handle_error(self) -> None:
        """The fetch was not answered (a lost connection, a timeout)."""
        self.epoch = INITIAL_EPOCH


_ABSENT = object()
