"""A partition's remote log metadata where every replica reads it: in the
remote store, beside the segments (the part of Kafka's
TopicBasedRemoteLogMetadataManager that kafkalite needs: one place all
brokers hosting a replica read, written by the leader, fenced by leader
epoch).

Kafka keeps the metadata as events in ``__remote_log_metadata``. kafkalite's
workers share the remote store, so the metadata is kept there, as whole
versions of the partition's entries, each an object created only if absent:

    __remote_log_metadata/<partition key>/<version %020d>.json
        {"version": 1, "metadata_version": 7, "leader_epoch": 4,
         "segments": [<metadata.py's entries>]}

Rules:

- A writer (the partition's leader) knows the last version it read or
  wrote, N, and creates N+1 (directory store: a fsynced hidden file linked
  to its name, ``link`` failing if the name exists; S3: ``PutObject`` with
  ``If-None-Match: *``). A version is complete or absent: a crash mid-write
  leaves version N readable (and, in a directory, a hidden temporary file
  that no reader lists).
- If N+1 exists, another writer got there first: the newest version is
  read, and if its leader epoch is newer than the writer's, the write is
  refused (RemoteLogMetadataFenced): a deposed leader never overwrites a
  newer leader's metadata. Otherwise (a former incarnation of the same
  leadership) the writer writes after the newest.
- A new leader *claims* the partition: it reads the newest version, merges
  (remote_log.py) and writes the next one under its epoch, so that any
  write of an older leader after that conflicts and is refused.
- The versions a writer wrote over are deleted STALE_VERSIONS at a time,
  in one request (S3's DeleteObjects): a change costs one PUT, not a PUT
  and a DELETE (issue 71: with 1 MiB segments, two requests a segment
  each second). A claim deletes every version below the newest (what a
  crash or a former leader left). A reader lists at most STALE_VERSIONS
  and some more names, and one that lists N and finds it deleted lists
  again.
- Readers (followers, a new leader) list the versions and read the newest.

The partition key is the partition's directory name with the topic id,
so a topic deleted and created again under its name never reads the old
one's metadata.

Who may call: any one thread at a time per partition (remote_log.py calls
it from the copier thread only, so a replica's store calls never wait on
the worker's loop).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from kafkalite.storage.remote.metadata import RemoteLogSegmentMetadata
from kafkalite.storage.remote.storage_manager import RemoteStorageError

METADATA_PREFIX = "__remote_log_metadata"
_FORMAT = 1
_SUFFIX = ".json"
_RETRIES = 10       # versions written by others between a read and a write, at most
STALE_VERSIONS = 32  # versions written over that a writer deletes together


class RemoteLogMetadataFenced(RemoteStorageError):
    """The partition's metadata was written under a newer leader epoch."""


@dataclass(frozen=True)
class MetadataVersion:
    version: int
    leader_epoch: int
    segments: tuple[RemoteLogSegmentMetadata, ...]


def partition_key(partition: str, topic_id=None) -> str:
    return f"{partition}-{topic_id}" if topic_id else partition


class SharedRemoteLogMetadata:
    """One partition's versions in ``storage`` (see the module docstring)."""

    def __init__(self, storage, key: str):
        self.storage = storage
        self.key = key
        self.prefix = f"{METADATA_PREFIX}/{key}/"
        self._stale: list[int] = []     # versions this writer wrote over, not deleted yet

    def _name(self, version: int) -> str:
        return self.prefix + "%020d%s" % (version, _SUFFIX)

    def versions(self) -> list[int]:
        return sorted(int(name[len(self.prefix):-len(_SUFFIX)])
                      for name in self.storage.list_metadata(self.prefix)
                      if name.endswith(_SUFFIX) and name[len(self.prefix):-len(_SUFFIX)].isdigit())

    def latest(self) -> MetadataVersion | None:
        """The newest version, None when the partition has none yet."""
        for _ in range(_RETRIES):
            versions = self.versions()
            if not versions:
                return None
            data = self.storage.fetch_metadata(self._name(versions[-1]))
            if data is not None:
                return self._decode(versions[-1], data)
            # deleted (a newer one written) between the listing and the read
        raise RemoteStorageError(f"{self.prefix}: the newest version keeps changing")

    def _decode(self, version: int, data: bytes) -> MetadataVersion:
        try:
            doc = json.loads(data)
            if doc.get("version") != _FORMAT:
                raise ValueError(f"unknown format {doc.get('version')!r}")
            return MetadataVersion(version, int(doc["leader_epoch"]), tuple(
                RemoteLogSegmentMetadata.from_json(d) for d in doc["segments"]))
        except (ValueError, KeyError, TypeError) as exc:
            # never guessed at: the remote copies it names would be lost
            raise RemoteStorageError(f"{self._name(version)}: unreadable: {exc}") from exc

    def publish(self, leader_epoch: int, segments, after: int) -> int:
        """Write ``segments`` as the version after ``after`` (-1: none yet)
        under ``leader_epoch``; returns the version written. Raises
        RemoteLogMetadataFenced when a newer leader epoch wrote."""
        version = after + 1
        for _ in range(_RETRIES):
            doc = {"version": _FORMAT, "metadata_version": version, "leader_epoch": leader_epoch,
                   "segments": [s.to_json() for s in segments]}
            if self.storage.create_metadata(self._name(version),
                                            json.dumps(doc, separators=(",", ":")).encode()):
                if after >= 0:
                    self._stale.append(after)
                if len(self._stale) >= STALE_VERSIONS:
                    stale, self._stale = self._stale, []
                    try:
                        self.storage.delete_metadata(*map(self._name, stale))
                    except RemoteStorageError:
                        self._stale[:0] = stale     # written all the same; deleted next time
                return version
            newest = self.latest()
            if newest is not None and newest.leader_epoch > leader_epoch:
                raise RemoteLogMetadataFenced(
                    f"{self.prefix}: version {newest.version} was written at leader epoch "
                    f"{newest.leader_epoch}, newer than {leader_epoch}")
            after = version if newest is None else newest.version
            version = after + 1
        raise RemoteStorageError(f"{self.prefix}: versions keep being written by others")

    def delete_below(self, version: int) -> None:
        """Delete the versions older than ``version`` (a crash's leftovers)."""
        self._stale.clear()
        self.storage.delete_metadata(*(self._name(v) for v in self.versions() if v < version))

    def delete_all(self) -> None:
        self.storage.delete_metadata(*map(self._name, self.versions()))
