"""A RemoteStorageManager over S3-compatible object storage, through boto3.

Layout in the bucket (the same names as the local-directory store, see
storage_manager.py):

    <topic>-<partition>/<base offset %020d>-<id>/segment.log
                                               /indexes

A copy is two objects, two PUTs: ``indexes`` holds the offset and time
indexes, the transaction index and producer snapshot when there are any,
and the leader epochs, one after another behind a table of where each
starts (``index_bundle``); ``segment.log`` is uploaded last, and a copy is
complete (``list_segments``) once it is there; whether a reader may use it
is still the remote log metadata's word (COPY_SEGMENT_FINISHED). Each
object is one PUT (boto3's managed transfer: a multipart upload for a
large segment, which S3 shows only once completed), so no object is ever
half written. A failed copy deletes what it uploaded; one a kill
interrupted is deleted by id when the partition reopens.

Copies made before the bundle keep an object per index (``offset.index``,
``time.index``, ...); a copy without ``indexes`` is read that way. Six
PUTs and a metadata write for every segment kept a loaded copier behind a
1 MB/s producer with 1 MiB segments (issue 71); a reader that fetches a
segment's three indexes now makes one GET of their first 64 KiB (and
another only for an index beyond it), and keeps the last few bundles' heads.

Credentials and region come from boto3's own chain (AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, ~/.aws, an instance role); kafkalite keeps no secret
of its own. ``endpoint_url`` points at any S3 API (MinIO, moto's server).
Errors are RemoteStorageError. boto3 is imported when a store is made, so
a broker without an S3 store never needs it (``pip install kafkalite[s3]``).
"""
from __future__ import annotations

import collections
import os
import threading

from kafkalite.storage.remote import index_bundle
from kafkalite.storage.remote.storage_manager import (
    INDEX_FILES, SEGMENT_FILE, LogSegmentData, RemoteLogSegmentId, RemoteStorageError,
    object_name)

_OPTIONAL = ("TRANSACTION", "PRODUCER_SNAPSHOT")
INDEXES_FILE = "indexes"
# the first GET of a bundle: its table and, for segments of ordinary size,
# every index with it
BUNDLE_HEAD_BYTES = 64 * 1024
BUNDLE_HEADS_KEPT = 16
_DELETE_OBJECTS_MAX = 1000   # keys a DeleteObjects request takes, at most
# S3's answers that no retry changes: the bucket or the credentials are wrong
_REFUSALS = frozenset({"NoSuchBucket", "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId",
                       "SignatureDoesNotMatch", "InvalidBucketName", "AccountProblem",
                       "InvalidToken", "ExpiredToken"})


def s3_region() -> str:
    """The region a store's client is made for (the environment's, else
    us-east-1): also the one Iceberg topics' FileIO over the same bucket is
    given (ServerConfig.iceberg_file_io), so that both reach it alike and
    pyiceberg never asks AWS where the bucket is."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


# S3's rules for a general purpose bucket's name
# (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problem(name: str) -> str | None:
    """Why S3 would refuse ``name`` as a bucket's, None if it would not."""
    import ipaddress
    import re
    if not 3 <= len(name) <= 63:
        return f"it has {len(name)} characters, S3's take 3 to 63"
    if not re.fullmatch(r"[a-z0-9.-]+", name):
        return "only lowercase letters, digits, dots and hyphens are allowed"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "it must begin and end with a letter or a digit"
    if ".." in name:
        return "two dots may not be adjacent"
    try:
        ipaddress.IPv4Address(name)
        return "it may not be an IP address"
    except ValueError:
        pass
    for prefix in _RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"the prefix {prefix!r} is reserved"
    for suffix in _RESERVED_SUFFIXES:
        if name.endswith(suffix):
            return f"the suffix {suffix!r} is reserved"
    return None


class S3RemoteStorage:
    def __init__(self, bucket: str, *, endpoint_url: str | None = None,
                 region: str | None = None, client=None):
        try:
            import boto3
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError as exc:
            raise RemoteStorageError(
                "an S3 remote store needs boto3 (pip install kafkalite[s3])") from exc
        self._errors = (BotoCoreError, ClientError)
        self.bucket = bucket
        self.s3 = client or boto3.client(
            "s3", endpoint_url=endpoint_url or None,
            region_name=region or s3_region())
        # prefix -> (table, head bytes) of recently read bundles (a copy never changes)
        self._heads: collections.OrderedDict = collections.OrderedDict()
        self._heads_lock = threading.Lock()

    def _prefix(self, segment_id: RemoteLogSegmentId, base_offset: int) -> str:
        return f"{segment_id.partition}/{object_name(base_offset, segment_id)}/"

    def _fail(self, what: str, exc: Exception) -> RemoteStorageError:
        error = RemoteStorageError(f"s3://{self.bucket}/{what}: {exc}")
        code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
        if code in _REFUSALS:
            error.refused = code
        return error

    def copy_log_segment_data(self, segment_id: RemoteLogSegmentId, base_offset: int,
                              data: LogSegmentData) -> None:
        prefix = self._prefix(segment_id, base_offset)
        try:
            # the small parts first: a follower's start from a remote
            # segment reads the leader epochs and the snapshot alone
            parts = [("LEADER_EPOCH", bytes(data.leader_epochs))]
            for source, kind in ((data.producer_snapshot, "PRODUCER_SNAPSHOT"),
                                 (data.transaction_index, "TRANSACTION"),
                                 (data.offset_index, "OFFSET"), (data.time_index, "TIMESTAMP")):
                if source is not None:
                    with open(source, "rb") as f:
                        parts.append((kind, f.read()))
            self.s3.put_object(Bucket=self.bucket, Key=prefix + INDEXES_FILE,
                               Body=index_bundle.build(parts))
            self.s3.upload_file(data.log_segment, self.bucket, prefix + SEGMENT_FILE)
        except (*self._errors, OSError) as exc:
            try:
                self.delete_log_segment_data(segment_id, base_offset)
            except RemoteStorageError:
                pass            # deleted by id at the next open
            raise self._fail(prefix, exc) from exc

    def fetch_log_segment(self, segment_id: RemoteLogSegmentId, base_offset: int,
                          start_position: int, end_position: int | None = None) -> bytes:
        key = self._prefix(segment_id, base_offset) + SEGMENT_FILE
        if end_position is not None and end_position <= start_position:
            return b""
        span = f"bytes={start_position}-" + ("" if end_position is None else str(end_position - 1))
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key, Range=span)["Body"].read()
        except self._errors as exc:
            raise self._fail(key, exc) from exc

    def fetch_index(self, segment_id: RemoteLogSegmentId, base_offset: int,
                    index_type: str) -> bytes | None:
        prefix = self._prefix(segment_id, base_offset)
        head = self._bundle_head(prefix)
        if head is None:                # a copy made before the bundle
            return self._fetch_index_object(prefix + INDEX_FILES[index_type], index_type)
        table, data = head
        where = table.get(index_type)
        if where is None:
            if index_type in _OPTIONAL:
                return None
            raise RemoteStorageError(f"s3://{self.bucket}/{prefix}{INDEXES_FILE} holds no "
                                     f"{index_type} index")
        start, length = where
        if start + length <= len(data):
            return data[start:start + length]
        key = prefix + INDEXES_FILE
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key,
                                      Range=f"bytes={start}-{start + length - 1}")["Body"].read()
        except self._errors as exc:
            raise self._fail(key, exc) from exc

    def _bundle_head(self, prefix: str) -> tuple[dict, bytes] | None:
        """The table and first bytes of the copy's bundle; None when the copy
        has none (made before it)."""
        with self._heads_lock:
            head = self._heads.get(prefix)
            if head is not None:
                self._heads.move_to_end(prefix)
                return head
        key = prefix + INDEXES_FILE
        try:
            data = self.s3.get_object(Bucket=self.bucket, Key=key,
                                      Range=f"bytes=0-{BUNDLE_HEAD_BYTES - 1}")["Body"].read()
        except self._errors as exc:
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                return None
            raise self._fail(key, exc) from exc
        try:
            table = index_bundle.table(data)
        except ValueError as exc:
            raise RemoteStorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        with self._heads_lock:
            self._heads[prefix] = (table, data)
            while len(self._heads) > BUNDLE_HEADS_KEPT:
                self._heads.popitem(last=False)
        return table, data

    def _fetch_index_object(self, key: str, index_type: str) -> bytes | None:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self._errors as exc:
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404") and index_type in _OPTIONAL:
                return None
            raise self._fail(key, exc) from exc

    def delete_log_segment_data(self, segment_id: RemoteLogSegmentId, base_offset: int) -> None:
        prefix = self._prefix(segment_id, base_offset)
        with self._heads_lock:
            self._heads.pop(prefix, None)
        try:
            listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
            keys = [{"Key": o["Key"]} for o in listed.get("Contents", ())]
            if keys:
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
        except self._errors as exc:
            raise self._fail(prefix, exc) from exc

    def create_metadata(self, name: str, data: bytes) -> bool:
        # S3's conditional write: refused (412) when the key exists
        try:
            self.s3.put_object(Bucket=self.bucket, Key=name, Body=data, IfNoneMatch="*")
            return True
        except self._errors as exc:
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            raise self._fail(name, exc) from exc

    def fetch_metadata(self, name: str) -> bytes | None:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=name)["Body"].read()
        except self._errors as exc:
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                return None
            raise self._fail(name, exc) from exc

    def list_metadata(self, prefix: str) -> list[str]:
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                      Prefix=prefix)
            return [o["Key"] for page in pages for o in page.get("Contents", ())]
        except self._errors as exc:
            raise self._fail(prefix, exc) from exc

    def delete_metadata(self, *names: str) -> None:
        for first in range(0, len(names), _DELETE_OBJECTS_MAX):
            keys = names[first:first + _DELETE_OBJECTS_MAX]
            try:
                if len(keys) == 1:
                    self.s3.delete_object(Bucket=self.bucket, Key=keys[0])
                    continue
                answer = self.s3.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys],
                                                "Quiet": True})
            except self._errors as exc:
                raise self._fail(keys[0], exc) from exc
            # DeleteObjects answers 200 with the keys it could not delete
            errors = answer.get("Errors") or ()
            if errors:
                raise RemoteStorageError(f"s3://{self.bucket}/{errors[0].get('Key')}: "
                                         f"{errors[0].get('Code')}: {errors[0].get('Message')}")

    def list_segments(self, partition: str) -> list[str]:
        """The complete copies of ``partition`` (object names), for tools and tests."""
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=partition + "/")
            keys = [o["Key"] for page in pages for o in page.get("Contents", ())]
        except self._errors as exc:
            raise self._fail(partition, exc) from exc
        return sorted(k.split("/")[1] for k in keys if k.endswith("/" + SEGMENT_FILE))
