"""Producer id allocation for InitProducerId (idempotent producers).

Ids are handed out from blocks of ``BLOCK_SIZE``, like Kafka's
ProducerIdManager: the end of the current block is written to
``<data_dir>/producer-id-block`` (one decimal number, replaced atomically)
*before* any id of the block is given out, so after a restart -- clean or
not -- allocation resumes past every id that may have been used, and an id
is never handed out twice. Partitions key their idempotence state on the
id, so a reused id could make a new producer's batches look like
duplicates.

In a cluster (``reserve`` given: cluster_store.PostgresMetadataStore's
``reserve_producer_ids``) the blocks come from PostgreSQL instead, under
the controller lease, as KRaft's AllocateProducerIds gives them: a node
that takes over as controller continues past every block any controller
had, never from its own file.

Who may call: the supervisor's event loop only.
"""
from __future__ import annotations

import os

from kafkalite.errors import KafkaStorageError
from kafkalite.storage.checkpoint import write_atomically

PRODUCER_ID_FILE = "producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, data_dir: str, reserve=None):
        # reserve(count, floor) -> the first id of a new block of ``count``
        # ids, all at or past ``floor``
        self._reserve = reserve
        self._path = os.path.join(data_dir, PRODUCER_ID_FILE)
        try:
            with open(self._path, "r", encoding="ascii") as f:
                self._next = int(f.read().strip())
        except FileNotFoundError:
            self._next = 0
        except ValueError as exc:
            raise KafkaStorageError(f"{self._path} is corrupt ({exc}); refusing to reuse "
                                    f"producer ids") from None
        self._block_end = self._next      # nothing reserved yet in this run

    def next_id(self) -> int:
        if self._next >= self._block_end:
            if self._reserve is not None:
                self._next = self._reserve(BLOCK_SIZE, self._next)
                self._block_end = self._next + BLOCK_SIZE
            else:
                self._block_end = self._next + BLOCK_SIZE
                write_atomically(self._path, b"%d\n" % self._block_end)
        pid = self._next
        self._next += 1
        return pid
