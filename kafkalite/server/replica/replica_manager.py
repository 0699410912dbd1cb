"""The replica manager: the data APIs for the partitions one broker hosts.

One module of about 1,250 lines, with reason: ReplicaManager is Kafka's
class of that name, where a worker's data APIs meet its partitions,
purgatory and fetchers; each API's handler is short, and the
per-partition work is in partition.py, purgatory.py, the fetchers and
fetch_handler.py (the Fetch API).

A worker process is one broker. Its replica manager holds a ``Partition``
(partition.py) for every topic-partition the controller gave it, and
serves, for those partitions and no others:

- Produce: appends as leader; acks=1 answers once the batch is in the log,
  acks=all (-1) once the high watermark has passed it (a ``DelayedProduce``
  waits for that in the purgatory; while each partition has one replica
  that is at once), acks=0 never answers;
- Fetch (fetch_handler.py, with incremental fetch sessions:
  fetch_session.py): reads committed batches (below the high watermark)
  as file regions; a consumer's partitions with nothing new are answered
  in C from ``leader_states`` (ext/fetch_state.pyx), which this class
  publishes each led partition's high watermark, last stable offset, log
  start offset and leader epoch to wherever they change (``_publish``); a
  fetch that finds fewer than ``min_bytes`` waits as a ``DelayedFetch``
  until appends bring enough or ``max_wait_ms`` passes; one below a
  tiered partition's local log start waits as a ``DelayedRemoteFetch``
  while the remote reader's threads download the segment
  (storage/remote/remote_log_reader.py), off this thread. A follower's
  fetch there is answered OFFSET_MOVED_TO_TIERED_STORAGE, as Kafka's: the
  follower starts its log at the local log start instead
  (replica_fetcher.py);
- ListOffsets and OffsetForLeaderEpoch; a lookup by timestamp that needs
  a remote segment waits as a ``DelayedRemoteListOffsets`` while the same
  reader's threads download it;
- WriteTxnMarkers: the transaction coordinator's COMMIT/ABORT markers,
  appended as control batches (``AppendOrigin.COORDINATOR``) and answered,
  like acks=all, once the high watermark has passed them;
- DescribeProducers: the producer state of partitions;
- DeleteRecords: moves the log start offset of partitions it leads; the
  answer waits (a ``DelayedDeleteRecords``) until the low watermark -- the
  in-sync followers' log start offsets, which their fetches report once
  the fetch answers told them the leader's -- reached it, or ``timeout_ms``
  passed (REQUEST_TIMED_OUT), as Kafka's delayed-delete purgatory does.
- ShareFetch and ShareAcknowledge (share groups, KIP-932): the
  share-partitions of the partitions it leads (share_partition.py).
- DescribeLogDirs and AlterReplicaLogDirs: its one log dir, the data dir.

read_committed fetches and ListOffsets stop at the last stable offset, and
fetches carry the aborted transactions their batches may belong to.

Transaction verification (KIP-890 part 1): before the first transactional
batch of a producer's transaction goes into a partition (the partition has
no open transaction of that producer yet), the transaction coordinator is
asked whether the partition is in the producer's open transaction (a
``verifier``: AddPartitionsToTxn with ``verify_only``). The produce request
waits for the answer -- and so do that producer's later requests, to keep
its order --; a partition not in the transaction is refused with
INVALID_TXN_STATE, so a stray or late write can never open a transaction no
coordinator will end (a "hanging" transaction holding back the LSO).
Transactions v2 (Produce v12): the coordinator is asked to *add* the
partition instead (the producer sends no AddPartitionsToTxn). A batch whose
epoch is newer than the producer's transaction open in the partition (the
marker ending it, bumped, is not written yet) is verified too: the
coordinator answers once that marker is written. Before asking, each
partition's log records the verification (``start_verification``: the
write's base sequence, and whether it is transactions v2), which holds the
producer's appends there to Kafka's sequence rules until its first
transactional batch is in: not above the lowest sequence verified, and for
transactions v2 with no batches there, from sequence 0
(OUT_OF_ORDER_SEQUENCE_NUMBER; storage/producer_state.py says why).
A shared-memory ring names its producer's transactional id when it is
attached, and the ring gateway has its writes verified (or added) the same
way, holding the ring's later entries meanwhile.

Which APIs those are is said once, in ``API_HANDLERS``; the supervisor
advertises them for the whole cluster from there.

Periodic work costs what changed, not how many partitions there are (a
worker may host thousands): ``housekeeping()`` (each second) runs the
log's own housekeeping for the partitions whose log end moved in the last
``ACTIVE_TICKS`` ticks, for those just opened or reconfigured, and for a
rolling slice of the rest so that every partition's retention is checked
at least every ``SWEEP_S``; ``checkpoint()`` takes the checkpoints of
those partitions only, into the broker's one CheckpointFile
(``broker-<id>.partition-checkpoints``, storage/checkpoint.py), which a
background thread writes when anything changed: one fsync per interval
however many partitions changed, none on the event loop. Logs are opened
(a worker's start: thousands at once) and closed (its stop) on a small
thread pool, since each mostly waits for fsyncs of its own files. The
leader of an Iceberg topic's partition (``iceberg.mode=key_value``) hands
its committed records to the topic's table from the same tick
(storage/iceberg/partition_writer.py decides what is due; the commits run
on its own thread).

The controller's decisions arrive through ``assign`` (open the log if
needed; lead, or follow the named leader, at the new leader epoch; take
the configs and ISR) and ``stop_replica`` (close, or delete with the
topic). A follower's partition answers clients NOT_LEADER_OR_FOLLOWER; the
replica fetcher (replica_fetcher.py) keeps its log a copy of the leader's.

Replication, leader side: a Fetch naming a replica id is a follower's. It
reads up to the log end (not the high watermark), and the offset it asks
from is that follower's log end, which may move the high watermark (then
acks=all produces and consumers' fetches waiting on the partition are
woken). The appends of one produce request (or one drain of a
shared-memory ring) wake what waits on their partitions once, after the
last of them (``gathered_wakeups``, Kafka's action queue completed after
each request): a fetch waiting on several partitions that one request
writes is answered with all of them, not with the first alone while the
others go to the next fetch. A follower on this host (its Fetch's
``local_host`` is ours) is answered where its records are in our segment
file rather than the records themselves, and reads them from there
(storage/local_region.py). Followers' fetches wait in the purgatory under their own key
(``replica_key``) and are woken by appends; consumers' fetches and acks=all
produces are woken when the high watermark moves (``_wake_readers``: by
the partition's key, and the long polls watching its leader state). An acks=all produce is
refused NOT_ENOUGH_REPLICAS while the ISR is smaller than
``min.insync.replicas`` and answered NOT_ENOUGH_REPLICAS_AFTER_APPEND if
it shrank below it meanwhile; one waiting when this broker stops leading
is answered NOT_LEADER_OR_FOLLOWER. The ISR changes this leader proposes
(``isr_proposals``) go to the controller, which answers with an assign.

A partition whose log could not be opened (out of file descriptors, disk)
is offline here: every request for it is answered KAFKA_STORAGE_ERROR at
once, as Kafka answers for a replica in an offline log directory, until a
later ``become_leader`` opens it. A partition of an internal topic
(metadata.INTERNAL_TOPICS) is never hosted by a worker, and requests for
one are answered INVALID_TOPIC_EXCEPTION.

Who may call: the worker (worker.py) and its ring gateway, on the worker's
one event-loop thread.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kafkalite import errors
from kafkalite._ext.fetch_state import LeaderStates
from kafkalite.errors import KafkaError
from kafkalite.protocol.enums import IsolationLevel
from kafkalite.record import build_control_batch
from kafkalite.record.layout import ATTR_TRANSACTIONAL, OFF_ATTRIBUTES, OFF_PRODUCER_ID, PRODUCER
from kafkalite.server.topic import INTERNAL_TOPICS
from kafkalite.server.replica.partition import (EARLIEST_LOCAL_TIMESTAMP,
                                                EARLIEST_PENDING_UPLOAD_TIMESTAMP,
                                                LATEST_TIERED_TIMESTAMP, Partition)
from kafkalite.server.network.per_partition import (Shape, each_partition, name_produce_topics,
                                                    produce_topic_id, produce_topic_name)
from kafkalite.server.config import ServerConfig
from kafkalite.server.replica.fetch_handler import FetchHandler, watch_key
from kafkalite.server.replica.fetch_session import FetchSessionCache
from kafkalite.server.replica.replica_apis import (API_HANDLERS, API_KEYS, DELETE_RECORDS,
                                                   PRODUCE, alter_replica_log_dirs_response,
                                                   delete_records_blank, produce_blank)
from kafkalite.server.replica.purgatory import (DelayedDeleteRecords, DelayedProduce,
                                                DelayedRemoteListOffsets, Purgatory, replica_key)
from kafkalite.server.network.requests import DEFERRED, NO_RESPONSE, RequestContext
from kafkalite.server.replica.produce_at_once import answer_at_once, answer_frame
from kafkalite.server.replica.share_partition_manager import SharePartitionManager
from kafkalite.storage import AppendOrigin, PartitionLog
from kafkalite.storage.checkpoint import BROKER_CHECKPOINTS, CheckpointFile
from kafkalite.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from kafkalite.storage.config import ICEBERG_OFF
from kafkalite.storage.iceberg.partition_writer import ICEBERG_DIR, IcebergTopicWriter
from kafkalite.storage.remote.remote_log import RemoteReadPending
from kafkalite.storage.remote.remote_log_deleter import NODE_DELETER
from kafkalite.storage.remote.remote_log_reader import RemoteLogReader

log = logging.getLogger("kafkalite.replica_manager")

ACTIVE_TICKS = 10          # housekeeping ticks a partition stays active after its log end moved
SWEEP_S = 30.0             # every partition's housekeeping (retention) runs at least this often
IO_THREADS = 16            # opening or closing many logs at once: they wait on fsyncs
TRANSACTIONS_V2_PRODUCE = 12   # Produce v12+: a transactional write adds its partition (KIP-890)
PROPOSAL_TIMEOUT_S = 5.0   # an ISR proposal the controller did not answer is made again

LIST_OFFSETS = Shape("name", "partitions", "partition_index",
                     "name", "partitions", "partition_index")
OFFSET_FOR_LEADER_EPOCH = Shape("topic", "partitions", "partition",
                                "topic", "partitions", "partition")
# WriteTxnMarkers and DescribeProducers list partitions as bare indexes;
# they are wrapped as {"partition": i} to walk them.
WRITE_TXN_MARKERS = Shape("name", "partitions", "partition",
                          "name", "partitions", "partition_index")
DESCRIBE_PRODUCERS = Shape("name", "partitions", "partition",
                           "name", "partitions", "partition_index", error_message=True)
# ListOffsets: the first version that takes each timestamp spec (a negative
# timestamp), as Kafka's ReplicaManager checks; a partition asked for a spec
# its request's version predates, or for one Kafka has not defined, is
# answered UNSUPPORTED_VERSION. (v0 takes latest and earliest too: Kafka
# serves v0 by its own path, which knows them.)
LIST_OFFSETS_SPEC_VERSIONS = {
    LATEST_TIMESTAMP: 0,
    EARLIEST_TIMESTAMP: 0,
    MAX_TIMESTAMP: 7,                   # KIP-734
    EARLIEST_LOCAL_TIMESTAMP: 8,        # KIP-405
    LATEST_TIERED_TIMESTAMP: 9,         # KIP-1005
    # KIP-1023: ListOffsets v11 is Kafka 4.2's, not advertised while kafkalite
    # claims 4.1 (api_keys.py), so -6 is refused at every version served
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}


def delete_records_key(key: tuple[str, int]) -> tuple:
    """The purgatory key DeleteRecords of a partition wait under (woken when
    a follower reports a new log start, or the leadership or ISR changes)."""
    return ("delete-records", *key)


def _indexed(topics: list, name_field: str, indexes_field: str) -> list:
    return [{"name": t[name_field], "partitions": [{"partition": i} for i in t[indexes_field]]}
            for t in topics]


def _list_offsets_blank() -> dict:
    return {"error_code": 0, "old_style_offsets": [], "timestamp": -1, "offset": -1,
            "leader_epoch": -1}


def _offset_for_epoch_blank() -> dict:
    return {"error_code": 0, "leader_epoch": -1, "end_offset": -1}


class ReplicaManager:
    API_HANDLERS = API_HANDLERS     # the APIs this class serves: API key -> method name
    API_KEYS = API_KEYS

    def __init__(self, broker_id: int, data_dir: str, log_config, verifier=None,
                 remote_storage=None):
        self.broker_id = broker_id
        # (transactional id, producer id, epoch, [(topic, partition)], on_done({tp: code}))
        # asks the transaction coordinator; None: no verification
        self.verifier = verifier
        # producer id -> produce requests waiting behind its verification
        self._verifying: dict[int, list] = {}
        self.data_dir = data_dir
        self.log_config = log_config            # topic configs dict -> LogConfig
        # the broker's RemoteStorageManager (KIP-405), None without tiered storage
        self.remote_storage = remote_storage
        # downloads of remote segments for fetches, off the event loop; the
        # worker polls its wakeup_fd and calls remote_reads_completed
        self.remote_reader = RemoteLogReader() if remote_storage is not None else None
        if remote_storage is not None:
            # the remote deletes of partitions deleted before a stop, made off this thread
            NODE_DELETER.resume(data_dir, remote_storage)
        # Iceberg topics: the tables of the partitions led here (made at first use)
        self._iceberg: IcebergTopicWriter | None = None
        # (catalog URL or None: the data directory's SQLite file, warehouse,
        # why none can be kept, FileIO properties), the worker's config's
        # (ServerConfig.iceberg_*); None: a directory store's, or the data
        # directory's
        self.iceberg_tables: tuple[str | None, str | None, str | None, dict] | None = None
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.offline: dict[tuple[str, int], str] = {}  # could not be opened: why
        # housekeeping: partitions that changed lately -> ticks left, the
        # log end each had at the last tick, the sweep's position, and the
        # partitions whose checkpoint may have changed
        self._active: dict[tuple[str, int], int] = {}
        self._seen_end: dict[tuple[str, int], int] = {}
        self._sweep: list[tuple[str, int]] = []
        self._dirty: set[tuple[str, int]] = set()
        self.visited: list[tuple[str, int]] = []
        self.checkpoints = CheckpointFile(os.path.join(data_dir, BROKER_CHECKPOINTS % broker_id))
        self.topic_names: dict[uuid.UUID, str] = {}   # Fetch v13+ names topics by id
        # the cluster's topics and their partition counts, as the controller
        # tells them (learn_partition_counts); None until it has
        self.partition_counts: dict[str, int] | None = None
        self.purgatory = Purgatory()
        # the partitions led here, as idle fetches of them are answered
        # (ext/fetch_state.pyx): published wherever their offsets change
        self.leader_states = LeaderStates()
        # the Fetch API (fetch_handler.py) and its incremental sessions
        self.fetches = FetchHandler(self, FetchSessionCache())
        # inside gathered_wakeups: purgatory key -> bytes appended since
        self._woken: dict | None = None
        self._gathered = _GatheredWakeups(self)
        # topic -> [bytes in, records in, bytes out]: producers' appends and
        # consumers' fetch responses (metrics.py; Kafka's BrokerTopicMetrics)
        self.topic_stats: dict[str, list] = {}
        self._dirs: dict[tuple[str, int], str] = {}   # log directories the controller named
        # the follower side of replication (set by the worker; a stand-in
        # that follows nothing otherwise)
        self.fetcher = _NoFetcher()
        self.replica_lag_time_max_ms = 30_000
        # a ListOffsets' wait for remote segments without a timeout_ms of its
        # own (the worker sets the server's remote_list_offsets_request_timeout_ms)
        self.remote_list_offsets_request_timeout_ms = \
            ServerConfig.remote_list_offsets_request_timeout_ms
        # a Fetch's or ShareFetch's wait for remote segments (the worker sets
        # the server's remote_fetch_max_wait_ms)
        self.remote_fetch_max_wait_ms = ServerConfig.remote_fetch_max_wait_ms
        self._proposals: list[Partition] = []
        # partitions this broker leads that have followers (ISR upkeep)
        self.led_with_followers: set[tuple[str, int]] = set()
        # share groups' state of the partitions led here (the worker sets
        # its settings from the server config)
        self.shares = SharePartitionManager(self)

    def handlers(self) -> dict:
        return {key: getattr(self, name) for key, name in self.API_HANDLERS.items()}

    # ---- the controller's decisions ----------------------------------------------------------

    def assign(self, specs: list[dict]) -> list[dict]:
        """``become_leader`` (or follower) for each of ``specs``; the logs
        not open yet are opened on a thread pool first (a worker's start
        opens thousands)."""
        for spec in specs:
            if spec.get("dir"):
                self._dirs[(spec["topic"], spec["partition"])] = spec["dir"]
        todo = [s for s in specs if (s["topic"], s["partition"]) not in self.partitions
                and s["topic"] not in INTERNAL_TOPICS]
        opened: dict = {}
        if len(todo) > 1:
            for spec in todo:
                self.checkpoints.bind(self._directory(spec["topic"], spec["partition"]),
                                      spec.get("topic_id"))

            def open_log(spec):
                key = (spec["topic"], spec["partition"])
                try:
                    plog = PartitionLog.open(self._directory(*key),
                                             self.log_config(spec.get("configs")),
                                             checkpoints=self.checkpoints,
                                             remote_storage=self.remote_storage,
                                             remote_leadership=True)
                    if spec.get("leader", self.broker_id) == self.broker_id:
                        # the leader epoch's checkpoint fsyncs here, in
                        # parallel, rather than one by one in make_leader
                        plog.leader_epoch_cache.assign(spec.get("leader_epoch", -1),
                                                        plog.log_end_offset)
                    return key, plog
                except (KafkaError, OSError) as exc:
                    return key, exc
            with ThreadPoolExecutor(min(IO_THREADS, len(todo)),
                                    thread_name_prefix="kafkalite-open") as pool:
                opened = dict(pool.map(open_log, todo))
        return [self.become_leader(s, opened.pop((s["topic"], s["partition"]), None))
                for s in specs]

    def become_leader(self, spec: dict, opened=None) -> dict:
        """Lead ``spec`` (topic, partition, topic_id, leader_epoch, configs,
        replicas, isr) -- or follow, when ``spec["leader"]`` is another
        broker; returns the per-partition result the controller waits for.
        ``opened``: its log, or the error opening it, from ``assign``."""
        key = (spec["topic"], spec["partition"])
        try:
            if key[0] in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(
                    f"{key[0]} is an internal topic: its coordinator keeps it, not a broker")
            if isinstance(opened, BaseException):
                raise opened
            config = self.log_config(spec.get("configs"))
            part = self.partitions.get(key)
            if part is None:
                if opened is None:
                    self.checkpoints.bind(self._directory(*key), spec.get("topic_id"))
                    opened = PartitionLog.open(self._directory(*key), config,
                                               checkpoints=self.checkpoints,
                                               remote_storage=self.remote_storage,
                                               remote_leadership=True)
                plog = opened
                part = Partition(key[0], key[1], spec.get("topic_id"), plog, self.broker_id)
                self.partitions[key] = part
            else:
                part.config_changed(config)     # the log's config, and under_min_isr
                if config.remote_storage_enable and self.remote_storage is not None:
                    part.log.enable_remote_storage(self.remote_storage, remote_leadership=True)
            if spec.get("topic_id"):
                self.topic_names[uuid.UUID(str(spec["topic_id"]))] = key[0]
            leader = spec.get("leader", self.broker_id)
            if leader == self.broker_id:
                hw = part.high_watermark
                if part.make_leader(spec["leader_epoch"], spec.get("replicas"), spec.get("isr"),
                                    spec.get("partition_epoch", 0)):
                    self.fetcher.stop_following(key)
                self._publish(part)
                if part.high_watermark != hw:
                    # a smaller ISR can commit at once: nothing else may come
                    # to wake what waits for it (an acks=all producer waits
                    # before sending more)
                    self._wake_readers(key, None)
                # a smaller ISR may reach a waiting DeleteRecords' offset
                self.purgatory.check(delete_records_key(key))
            elif part.make_follower(spec["leader_epoch"], leader, spec.get("replicas") or [],
                                    spec.get("isr") or [], spec.get("partition_epoch", 0)):
                # waiting produces and fetches are answered NOT_LEADER_OR_FOLLOWER
                self._publish(part)
                self.shares.forget(key)
                self._complete_readers_of(key)
                self.purgatory.complete_watchers_of(replica_key(key))
                self.purgatory.complete_watchers_of(delete_records_key(key))
                self.fetcher.follow(part)
            if part.followers:
                self.led_with_followers.add(key)
            else:
                self.led_with_followers.discard(key)
            self.offline.pop(key, None)
            # a new log or config: one pass (retention may be due), then
            # only when its log end moves
            self._active.setdefault(key, 1)
            self._seen_end[key] = part.log.log_end_offset
            # what this broker now holds: the controller names an elected
            # leader in Metadata once it confirmed leading
            return {"topic": key[0], "partition": key[1], "error": 0,
                    "leader": part.leader_id, "leader_epoch": part.leader_epoch}
        except (KafkaError, OSError) as exc:
            if isinstance(exc, OSError):    # e.g. EMFILE from a directory listing
                exc = errors.KafkaStorageError(
                    f"cannot open {self._directory(*key)}: {exc.strerror or exc}")
            if key not in self.partitions:
                self.offline[key] = str(exc)
            log.error("broker %d: cannot open %s-%d: %s", self.broker_id, *key, exc)
            return {"topic": key[0], "partition": key[1], "error": exc.code,
                    "message": str(exc)}

    def stop_replica(self, topic: str, partition: int, delete: bool,
                     directory: str | None = None, delete_remote: bool = False) -> None:
        """Close this broker's replica, or with ``delete`` delete its log;
        a tiered log's remote segments go too only with ``delete_remote``
        (the partition itself is deleted): a replica moved away by a
        reassignment leaves them to the replicas that stay, as Kafka's
        StopReplica deletes remote logs only for a deleted topic."""
        if directory:
            self._dirs[(topic, partition)] = directory
        part = self.partitions.pop((topic, partition), None)
        self.leader_states.stop_leading(topic, partition)
        self.offline.pop((topic, partition), None)
        self._active.pop((topic, partition), None)
        self._seen_end.pop((topic, partition), None)
        self.fetcher.stop_following((topic, partition))
        self.led_with_followers.discard((topic, partition))
        self._complete_readers_of((topic, partition))
        self.purgatory.complete_watchers_of(replica_key((topic, partition)))
        self.purgatory.complete_watchers_of(delete_records_key((topic, partition)))
        self.shares.forget((topic, partition))
        if self._iceberg is not None:
            self._iceberg.forget((topic, partition))
        if delete:
            self.checkpoints.forget(self._directory(topic, partition))
        where = self._directory(topic, partition)
        self._dirs.pop((topic, partition), None)
        if part is None:
            if delete:  # the log may exist on disk from an earlier owner
                shutil.rmtree(where, ignore_errors=True)
            return
        if delete:
            part.log.delete(remote=delete_remote)
        else:
            part.log.close()

    def _directory(self, topic: str, partition: int) -> str:
        # the controller names it (metadata.replica_dir); topic-N by default
        return os.path.join(self.data_dir,
                            self._dirs.get((topic, partition)) or f"{topic}-{partition}")

    def learn_partition_counts(self, counts: dict[str, int], replace: bool = False) -> None:
        """The controller's word on how many partitions topics have (0: the
        topic is gone); ``replace``: ``counts`` is every topic there is."""
        if replace or self.partition_counts is None:
            self.partition_counts = {}
        for name, n in counts.items():
            if n > 0:
                self.partition_counts[name] = n
            else:
                self.partition_counts.pop(name, None)

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, if this broker leads it (the data APIs' check)."""
        part = self.hosted(topic, index)
        if not part.is_leader:
            raise errors.NotLeaderOrFollowerError(
                f"broker {self.broker_id} follows {topic}-{index}; broker {part.leader_id} "
                f"leads it at epoch {part.leader_epoch}")
        return part

    def hosted(self, topic: str, index: int) -> Partition:
        """The partition, if this broker has a replica of it."""
        part = self.partitions.get((topic, index))
        if part is None:
            if topic in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(f"cannot append to or read internal topic {topic} "
                                               f"here: its coordinator keeps it")
            why = self.offline.get((topic, index))
            if why is not None:
                raise errors.KafkaStorageError(f"{topic}-{index} is offline: {why}")
            # As Kafka's ReplicaManager.getPartitionOrError: a partition the
            # cluster does not have is UNKNOWN_TOPIC_OR_PARTITION, one that
            # another broker has NOT_LEADER_OR_FOLLOWER (the client's
            # metadata is stale); before the controller told us, the latter
            counts = self.partition_counts
            if counts is not None and not 0 <= index < counts.get(topic, 0):
                raise errors.UnknownTopicOrPartitionError(
                    f"{topic}-{index} does not exist" if topic in counts
                    else f"topic {topic!r} does not exist")
            raise errors.NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not lead {topic}-{index}")
        return part

    # ---- writes ------------------------------------------------------------------------------

    def append(self, part: Partition, records, origin: AppendOrigin = AppendOrigin.CLIENT):
        """Append as leader and wake what waits on the partition; the one
        write path of produce requests, shared-memory rings and markers."""
        hw = part.log.high_watermark
        info = part.append_as_leader(records, origin)
        self._publish(part)
        if origin is AppendOrigin.CLIENT and not info.duplicate:
            stats = self.topic_stats.get(part.topic)
            if stats is None:
                stats = self.topic_stats[part.topic] = [0, 0, 0]
            stats[0] += info.size_in_bytes
            stats[1] += info.record_count
        if info.size_in_bytes and self.purgatory:
            if part.log.high_watermark > hw:       # committed at once: no follower in the ISR
                self._wake(part.key, info.size_in_bytes)
            if len(part.replicas) > 1:
                self._wake(replica_key(part.key), info.size_in_bytes)
        return info

    def _wake(self, key, appended: int) -> None:
        woken = self._woken
        if woken is None:
            self._wake_now(key, appended)
        else:
            woken[key] = woken.get(key, 0) + appended

    def _wake_now(self, key, progress) -> None:
        if len(key) == 2:           # (topic, partition): consumers' fetches, acks=all produces
            self._wake_readers(key, progress)
        else:
            self.purgatory.check(key, progress)

    def _wake_readers(self, key: tuple[str, int], progress) -> None:
        """``progress`` on a partition (bytes committed, None: its high
        watermark moved) for what waits on it: by its purgatory key, and
        the fetches watching it through the leader states (fetch_handler.py)."""
        self.purgatory.check(key, progress)
        if self.leader_states.watching:
            for waiter in self.leader_states.waiters(*key):
                self.purgatory.check(watch_key(waiter), progress)

    def _complete_readers_of(self, key: tuple[str, int]) -> None:
        """The partition is no longer led here: what waits on it is read
        again and answered now (the table says so first: ``_publish``)."""
        for waiter in self.leader_states.waiters(*key):
            self.purgatory.complete_watchers_of(watch_key(waiter))
        self.purgatory.complete_watchers_of(key)

    def _publish(self, part: Partition) -> None:
        """Tell the leader states what idle fetches of ``part`` are answered
        from: after every change of its high watermark, last stable offset,
        log start offset, leadership or leader epoch."""
        offsets = part.log.fetch_offsets() if part.leader_id == part.broker_id else None
        if offsets is not None:         # led here, its log open
            hw, lso, log_start = offsets
            self.leader_states.publish(part.topic, part.index, hw, lso, log_start,
                                       part.leader_epoch, part)
        else:
            self.leader_states.stop_leading(part.topic, part.index)

    def gathered_wakeups(self) -> "_GatheredWakeups":
        """Appends made inside (``with``) wake what waits on their
        partitions at the end, once per partition (nested: at the end of
        the outermost)."""
        return self._gathered

    def update_follower_end(self, part: Partition, broker_id: int, log_end_offset: int,
                            now: float, log_start_offset: int = -1) -> None:
        """What a follower's fetch reports (replication): the high watermark
        may move, completing acks=all produces and fetches waiting on it;
        its log start offset may complete a DeleteRecords; a follower that
        caught up may be proposed back into the ISR."""
        if part.update_follower_end(broker_id, log_end_offset, now, log_start_offset):
            self._publish(part)
            self._wake_readers(part.key, None)
        self.purgatory.check(delete_records_key(part.key))     # a dict lookup when none waits
        if broker_id not in part.isr and part.pending_isr is None:
            self._propose(part, now, broker_id)

    def _propose(self, part: Partition, now: float, fetched_by: int | None = None) -> None:
        isr = part.isr_change(now, self.replica_lag_time_max_ms, fetched_by)
        if isr is not None:
            part.pending_isr, part.pending_since = isr, now
            self._proposals.append(part)

    def check_isr(self, now: float | None = None) -> None:
        """The periodic part of ISR upkeep: followers fallen behind are
        proposed out; a proposal not answered in ``PROPOSAL_TIMEOUT_S`` is
        made again."""
        now = time.monotonic() if now is None else now
        for key in self.led_with_followers:
            part = self.partitions[key]
            if part.pending_isr is not None and now - part.pending_since > PROPOSAL_TIMEOUT_S:
                part.pending_isr = None
            if part.pending_isr is None:
                self._propose(part, now)

    def isr_proposals(self) -> list[dict]:
        """The ISR changes to send the controller now (AlterPartition's items)."""
        out, self._proposals = self._proposals, []
        return [{"topic": p.topic, "partition": p.index, "leader_epoch": p.leader_epoch,
                 "partition_epoch": p.partition_epoch, "isr": p.pending_isr}
                for p in out if p.pending_isr is not None]

    def produce(self, ctx: RequestContext, body: dict):
        name_produce_topics(body, ctx.api_version, self.topic_names.get)
        acks = body.get("acks", 1)
        if acks not in (0, 1, -1):
            # Kafka answers every partition (a Produce response has no
            # top-level error) and appends nothing
            message = f"acks must be 0, 1 or -1, not {acks}"
            return {"throttle_time_ms": 0, "responses": [
                {"name": t["name"], "topic_id": t.get("topic_id"), "partition_responses": [
                    {**produce_blank(), "index": pd["index"],
                     "error_code": errors.InvalidRequiredAcksError.code, "error_message": message}
                    for pd in t["partition_data"]]} for t in body.get("topic_data") or ()]}
        done = self.produce_at_once(body)
        if done is not None:
            return done
        if self.verifier is None:
            return self._produce(ctx, body, {})
        starts = self._transaction_starts(body)
        waiting = next((pid for pid in starts if pid in self._verifying), None)
        if waiting is not None:
            self._verifying[waiting].append((ctx, body))     # after the requests before it
            return DEFERRED
        if starts and not body.get("transactional_id"):
            # transactional batches but no transactional id to verify them by
            return self._produce(ctx, body, {}, refuse_transactional=True)
        unverified = {pid: tps for pid, tps in starts.items() if tps[1]}
        if not unverified:
            return self._produce(ctx, body, {})
        pid, (epoch, tps) = next(iter(unverified.items()))
        self._verifying[pid] = []
        add = ctx.api_version >= TRANSACTIONS_V2_PRODUCE
        self.start_verification(pid, epoch, tps, add)
        self.verifier(body["transactional_id"], pid, epoch, sorted(tps),
                      lambda codes: self._verified(ctx, body, pid, codes), add=add)
        return DEFERRED

    def produce_at_once(self, body: dict):
        """A common Produce request's answer in one pass (produce_at_once.py):
        its body, NO_RESPONSE for acks 0, or None (not the common kind,
        nothing done); the dispatcher's ``at_once`` path for it."""
        done = answer_at_once(self, body)
        if done is None or body["acks"]:
            return done
        return NO_RESPONSE

    # The same for a Produce request as its TCP frame (header + body), read
    # without the generic codec: the answer's frame, a response body,
    # NO_RESPONSE, or None; the dispatcher's ``frames_at_once`` path for it.
    # The function itself, as a method: no call of a wrapper per request.
    produce_frame_at_once = answer_frame

    def start_verification(self, pid: int, epoch: int, sequences: dict,
                           supports_epoch_bump: bool) -> None:
        """Before the coordinator is asked about ``pid``'s first
        transactional writes ({(topic, partition): base sequence}): each
        led partition's log records the verification, which holds the
        producer's appends there to its sequence rules (Kafka's
        ``maybeStartTransactionVerification``; ``supports_epoch_bump``:
        transactions v2)."""
        for key, sequence in sequences.items():
            part = self.partitions.get(key)
            if part is not None and part.is_leader:
                part.log.start_transaction_verification(pid, sequence, epoch,
                                                        supports_epoch_bump)

    def _transaction_starts(self, body: dict) -> dict:
        """{producer id: (epoch, {(topic, partition): base sequence} where its
        first transactional batch in the request would open a transaction)}
        for the request's transactional producers."""
        out: dict = {}
        for topic in body.get("topic_data") or ():
            for pd in topic["partition_data"]:
                found = self.transaction_start(topic["name"], pd["index"], pd.get("records"))
                if found is not None:
                    pid, epoch, opens, sequence = found
                    entry = out.setdefault(pid, (epoch, {}))
                    if opens:
                        entry[1][(topic["name"], pd["index"])] = sequence
        return out

    def transaction_start(self, topic: str, index: int, records) -> tuple | None:
        """For records whose first batch is transactional: (producer id,
        epoch, whether it would open the producer's transaction in the
        partition -- none of its open there yet, or an older epoch's --,
        its base sequence); None for other records."""
        if records is None or len(records) < OFF_PRODUCER_ID + PRODUCER.size:
            return None
        # the transactional bit is in the attributes' low byte: most batches
        # are not, and are told by that byte alone (every partition of
        # every Produce request is asked)
        if not records[OFF_ATTRIBUTES + 1] & ATTR_TRANSACTIONAL:
            return None
        pid, epoch, sequence = PRODUCER.unpack_from(records, OFF_PRODUCER_ID)
        if pid < 0:
            return None
        part = self.partitions.get((topic, index))
        if part is None:
            return pid, epoch, False, sequence
        state = part.log.producer_state
        return (pid, epoch, pid not in state.ongoing or state.producers[pid].epoch != epoch,
                sequence)

    def _verified(self, ctx: RequestContext, body: dict, pid: int, codes: dict) -> None:
        """The coordinator's answer for ``pid``: run the request, then the
        ones that waited behind it."""
        self._answer(ctx, lambda: self._produce(ctx, body, codes))
        for later_ctx, later_body in self._verifying.pop(pid, ()):
            self._answer(later_ctx, lambda: self.produce(later_ctx, later_body))

    @staticmethod
    def _answer(ctx: RequestContext, run) -> None:
        """Run a deferred request and answer it as the dispatcher would."""
        try:
            result = run()
        except KafkaError as exc:
            ctx.respond_error(exc.code, exc.message)
            return
        except Exception as exc:  # one request must not take the process down
            log.exception("a verified produce request failed")
            ctx.respond_error(errors.UnknownServerError.code, f"{type(exc).__name__}: {exc}")
            return
        if result is NO_RESPONSE:
            ctx.no_response()
        elif result is not DEFERRED:
            ctx.respond(result)

    def _produce(self, ctx: RequestContext, body: dict, refused: dict,
                 refuse_transactional: bool = False):
        """Append every partition's batches (but those ``refused``: {(topic,
        partition): error code} from verification, and with
        ``refuse_transactional`` every transactional one) and answer by acks."""
        acks = body.get("acks", 1)
        appended: dict = {}          # key -> (Partition, offset the high watermark must reach)

        def serve(name, topic, pd, out):
            code = refused.get((name, pd["index"]))
            if code:
                raise errors.error_for_code(code)(
                    f"{name}-{pd['index']} is not in the producer's open transaction"
                    if code == errors.InvalidTxnStateError.code else
                    f"the transaction coordinator could not verify {name}-{pd['index']}")
            if refuse_transactional and self._transaction_starts(
                    {"topic_data": [{"name": name, "partition_data": [pd]}]}):
                raise errors.InvalidRecordError(
                    "transactional record batches need the produce request's transactional_id")
            part = self.partition(name, pd["index"])
            if pd["records"] is None:
                raise errors.CorruptRecordError("produce request without records")
            if acks == -1 and part.under_min_isr:
                raise errors.NotEnoughReplicasError(
                    f"{part.name} has {len(part.isr)} in-sync replica(s) {part.isr}; "
                    f"min.insync.replicas is {part.log.config.min_insync_replicas}")
            try:
                info = self.append(part, pd["records"])
            except errors.OutOfOrderSequenceNumberError as exc:
                # fatal to most clients: what the partition knew says why
                log.info("broker %d: %s: %s (log end %d, leader epoch %d)", self.broker_id,
                         part.name, exc, part.log.log_end_offset, part.leader_epoch)
                raise
            except KafkaError as exc:
                # the whole batch is refused; which records caused it, when
                # the validator knows, lets a client fail only those
                out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                        for i, m in exc.record_errors]
                raise
            out["base_offset"] = info.first_offset
            out["log_append_time_ms"] = info.log_append_time
            out["log_start_offset"] = part.log.log_start_offset
            appended[part.key] = (part, info.last_offset + 1)

        with self.gathered_wakeups():
            topics = each_partition(PRODUCE, body["topic_data"], serve, produce_blank,
                                    resolve=produce_topic_name, topic_fields=produce_topic_id)
        if acks == 0:
            return NO_RESPONSE
        response = {"responses": topics, "throttle_time_ms": 0}
        if acks == 1:
            return response
        return self._await_high_watermark(
            ctx, body.get("timeout_ms", 0), appended, response,
            lambda failed: _with_errors(response, failed))

    def _await_high_watermark(self, ctx: RequestContext, timeout_ms: int, appended: dict,
                              response: dict, on_failed):
        """Answer ``response`` once the high watermark of every partition in
        ``appended`` (key -> (Partition, offset it must reach)) got there;
        ``on_failed({key: KafkaError})`` for those that did not in
        ``timeout_ms``, whose leadership moved away meanwhile, or whose ISR
        fell below ``min.insync.replicas``."""
        if all(part.high_watermark >= end and part.is_leader and not part.log.closed
               for part, end in appended.values()):
            # committed as it was appended (the leader alone in the ISR, the
            # common case): answered without a DelayedProduce, which would
            # find it satisfied with no failure
            return response
        produce = DelayedProduce(
            ctx, time.monotonic() + max(timeout_ms, 0) / 1000.0,
            {k: p for k, (p, _) in appended.items()},
            {k: end for k, (_, end) in appended.items()},
            lambda failed: ctx.respond(on_failed(failed) if failed else response))
        if produce.satisfied():
            failed = produce.failures()
            return on_failed(failed) if failed else response
        self.purgatory.watch(produce)
        return DEFERRED

    def write_txn_markers(self, ctx: RequestContext, body: dict):
        """Append each marker's control batch to each of its partitions; the
        answer waits until they are committed (below the high watermark),
        since a coordinator that completes a transaction on an uncommitted
        marker could lose it with a leader."""
        appended: dict = {}
        results = []
        for marker in body["markers"]:
            records = build_control_batch(bool(marker["transaction_result"]),
                                          marker["producer_id"], marker["producer_epoch"],
                                          marker["coordinator_epoch"])

            def serve(name, topic, p, out):
                part = self.partition(name, p["partition"])
                info = self.append(part, bytearray(records), AppendOrigin.COORDINATOR)
                end = info.last_offset + 1
                previous = appended.get(part.key)
                appended[part.key] = (part, max(end, previous[1] if previous else end))

            topics = each_partition(WRITE_TXN_MARKERS,
                                    _indexed(marker["topics"], "name", "partition_indexes"),
                                    serve, lambda: {"error_code": 0})
            results.append({"producer_id": marker["producer_id"], "topics": topics})
        response = {"markers": results}

        def failed(keys: dict) -> dict:
            for marker in results:
                for topic in marker["topics"]:
                    for p in topic["partitions"]:
                        exc = keys.get((topic["name"], p["partition_index"]))
                        if exc is not None and not p["error_code"]:
                            p["error_code"] = exc.code
            return response

        return self._await_high_watermark(ctx, 30_000, appended, response, failed)

    def describe_producers(self, ctx: RequestContext, body: dict):
        def serve(name, topic, p, out):
            out["active_producers"] = self.partition(name, p["partition"]).active_producers()

        return {"throttle_time_ms": 0, "topics": each_partition(
            DESCRIBE_PRODUCERS, _indexed(body["topics"], "name", "partition_indexes"), serve,
            lambda: {"error_code": 0, "error_message": None, "active_producers": []})}

    def describe_log_dirs(self, ctx: RequestContext, body: dict):
        """Size on disk of each partition log this broker hosts (leader or
        follower), in its one log dir, the data dir; ``topics`` null: all
        of them. ``offset_lag`` is Kafka's for a current (not future)
        replica: how far its log end is behind the high watermark."""
        wanted = None if body["topics"] is None else {
            (t["topic"], p) for t in body["topics"] for p in t["partitions"]}
        by_topic: dict[str, list] = {}
        for (name, index), part in sorted(self.partitions.items()):
            if wanted is not None and (name, index) not in wanted:
                continue
            by_topic.setdefault(name, []).append({
                "partition_index": index, "partition_size": part.log.size_in_bytes,
                "offset_lag": max(part.high_watermark - part.log_end_offset, 0),
                "is_future_key": False})
        disk = shutil.disk_usage(self.data_dir)
        return {"throttle_time_ms": 0, "error_code": 0, "results": [{
            "error_code": 0, "log_dir": os.path.abspath(self.data_dir),
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
            "total_bytes": disk.total, "usable_bytes": disk.free}]}

    def alter_replica_log_dirs(self, ctx: RequestContext, body: dict):
        """Move replicas to another of this broker's log dirs (KIP-113), as
        Kafka's ReplicaManager answers it. This broker has one, the data
        dir (DescribeLogDirs names it), so nothing ever moves: a replica
        named with that dir is where it is asked to be (NONE); a path that
        is not it, exactly as given, is LOG_DIR_NOT_FOUND (Kafka compares
        absolute paths); a replica whose log could not be opened,
        KAFKA_STORAGE_ERROR; a partition this broker has no replica of,
        REPLICA_NOT_AVAILABLE (Kafka answers UNKNOWN_TOPIC_OR_PARTITION
        when its metadata has no such topic either; a worker keeps no
        metadata of the topics it does not host)."""
        log_dir = os.path.abspath(self.data_dir)
        codes: dict[tuple[str, int], int] = {}   # a partition named twice: the last dir, as Kafka
        for d in body["dirs"]:
            for t in d["topics"]:
                for index in t["partitions"]:
                    key = (t["name"], index)
                    if d["path"] != log_dir:
                        codes[key] = errors.LogDirNotFoundError.code
                    elif key in self.offline:
                        codes[key] = errors.KafkaStorageError.code
                    elif key not in self.partitions:
                        codes[key] = errors.ReplicaNotAvailableError.code
                    else:
                        codes[key] = 0
        return alter_replica_log_dirs_response(codes)

    def delete_records(self, ctx: RequestContext, body: dict):
        """Move each partition's log start offset (-1: to the high
        watermark); answer with the low watermark once the in-sync
        followers took it (they learn it from their next fetch's answer,
        which is sent at once), or at ``timeout_ms``. Internal topics are
        refused INVALID_TOPIC_EXCEPTION, as Kafka refuses them."""
        waiting: dict = {}              # key -> (Partition, offset the low watermark must reach)

        def serve(name, topic, p, out):
            if name in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(f"cannot delete records of internal topic {name}")
            part = self.partition(name, p["partition_index"])
            try:
                required, out["low_watermark"] = part.delete_records(p["offset"])
            finally:
                self._publish(part)
            if out["low_watermark"] < required:
                waiting[part.key] = (part, required)
                # followers waiting in a fetch learn the new log start now,
                # not at the end of their wait
                self.purgatory.check(replica_key(part.key), None)

        topics = each_partition(DELETE_RECORDS, body["topics"], serve, delete_records_blank)
        response = {"throttle_time_ms": 0, "topics": topics}
        if not waiting:
            return response

        def respond(results: dict) -> None:
            for topic in topics:
                for p in topic["partitions"]:
                    got = results.get((topic["name"], p["partition_index"]))
                    if got is not None:
                        p["low_watermark"], p["error_code"] = got
            ctx.respond(response)

        op = DelayedDeleteRecords(
            ctx, time.monotonic() + max(body.get("timeout_ms", 0), 0) / 1000.0,
            [delete_records_key(k) for k in waiting],
            {k: p for k, (p, _) in waiting.items()}, {k: r for k, (_, r) in waiting.items()},
            respond)
        self.purgatory.watch(op)
        return DEFERRED

    # ---- reads -------------------------------------------------------------------------------

    def read_remote_in_background(self, part: Partition, read):
        """``read()``, with what it needs from a tiered log's remote store
        downloaded on the remote reader's threads (RemoteReadPending meanwhile)."""
        remote = part.log.remote
        if remote is None or self.remote_reader is None:
            return read()
        with remote.reading_in_background(self.remote_reader):
            return read()

    def remote_reads_completed(self) -> None:
        """The worker's loop saw the remote reader's wakeup: the fetches
        waiting on the downloads that ended read again."""
        for key in self.remote_reader.completed():
            self.purgatory.check(key, None)

    def fetch(self, ctx: RequestContext, body: dict):
        return self.fetches.fetch(ctx, body)

    def share_fetch(self, ctx: RequestContext, body: dict):
        return self.shares.share_fetch(ctx, body)

    def share_acknowledge(self, ctx: RequestContext, body: dict):
        return self.shares.share_acknowledge(ctx, body)

    def list_offsets(self, ctx: RequestContext, body: dict):
        """The offset of each partition's timestamp or timestamp spec. A
        lookup by timestamp that needs a remote segment not in the cache
        does not download it on this thread: as Kafka's
        DelayedRemoteListOffsets (KIP-1075), the remote reader's threads
        download it while the request waits in the purgatory, up to v10's
        ``timeout_ms`` (``remote.list.offsets.request.timeout.ms`` when 0 or
        older); then the partitions still waiting are answered
        REQUEST_TIMED_OUT, the others with their offsets."""
        topics, downloads, waiting = self._look_up_offsets(body, ctx.api_version)
        response = {"throttle_time_ms": 0, "topics": topics}
        if not downloads:
            return response
        timeout_ms = body.get("timeout_ms") or 0
        if timeout_ms <= 0:
            timeout_ms = self.remote_list_offsets_request_timeout_ms
        self._await_remote_lookups(ctx, body, response, time.monotonic() + timeout_ms / 1000.0,
                                   downloads, waiting)
        return DEFERRED

    def _look_up_offsets(self, body: dict, version: int,
                         only: dict | None = None) -> tuple[list, list, dict]:
        """Look up each partition of a ListOffsets (of ``only``'s keys, when
        given: {(topic, partition): its response entry}, which the lookups
        fill): (response topics, the purgatory keys of the remote downloads
        the lookups wait for, {(topic, partition): response entry} of the
        partitions waiting for them)."""
        read_committed = body.get("isolation_level", 0) == IsolationLevel.READ_COMMITTED
        downloads: list = []
        waiting: dict = {}

        def serve(name, topic, lp, out):
            timestamp = lp["timestamp"]
            if timestamp < 0:
                since = LIST_OFFSETS_SPEC_VERSIONS.get(timestamp)
                if since is None or version < since:
                    raise errors.UnsupportedVersionError(
                        f"ListOffsets v{version} does not take the timestamp {timestamp}")
            part = self.partition(name, lp["partition_index"])
            part.check_leader_epoch(lp.get("current_leader_epoch", -1))
            try:
                found = self.read_remote_in_background(
                    part, lambda: part.offset_for_timestamp(timestamp, read_committed))
            except RemoteReadPending as pending:
                downloads.append(pending.key)
                waiting[(name, lp["partition_index"])] = out
                return
            if found is not None:
                out["offset"], out["timestamp"] = found
                out["leader_epoch"] = part.listed_offset_epoch(timestamp, found[0])

        topics = body["topics"]
        if only is not None:
            topics = [{"name": t["name"], "partitions": [
                lp for lp in t["partitions"] if (t["name"], lp["partition_index"]) in only]}
                for t in topics]
        return (each_partition(LIST_OFFSETS, topics, serve, _list_offsets_blank),
                downloads, waiting)

    def _await_remote_lookups(self, ctx: RequestContext, body: dict, response: dict,
                              deadline: float, downloads: list, waiting: dict) -> None:
        """Park a ListOffsets until the downloads its ``waiting`` partitions
        need end, then look those up again (a lookup may need the next
        remote segment: it parks again until ``deadline``) and answer; at the
        deadline, the partitions still waiting are REQUEST_TIMED_OUT."""
        def complete(downloaded: bool) -> None:
            topics, more, still = self._look_up_offsets(body, ctx.api_version, waiting)
            for topic in topics:
                for out in topic["partitions"]:
                    entry = waiting[(topic["name"], out["partition_index"])]
                    entry.clear()
                    entry.update(out)
            if more and downloaded and time.monotonic() < deadline:
                self._await_remote_lookups(ctx, body, response, deadline, more,
                                           {k: waiting[k] for k in still})
                return
            for key in still:
                entry = waiting[key]
                entry.update(_list_offsets_blank(), partition_index=key[1],
                             error_code=errors.RequestTimedOutError.code)
            ctx.respond(response)
        self.purgatory.watch(DelayedRemoteListOffsets(ctx, deadline, downloads, complete))

    def offset_for_leader_epoch(self, ctx: RequestContext, body: dict):
        def serve(name, topic, p, out):
            part = self.partition(name, p["partition"])
            part.check_leader_epoch(p.get("current_leader_epoch", -1))
            out["leader_epoch"], out["end_offset"] = part.end_offset_for_epoch(p["leader_epoch"])

        return {"throttle_time_ms": 0,
                "topics": each_partition(OFFSET_FOR_LEADER_EPOCH, body["topics"], serve,
                                         _offset_for_epoch_blank)}

    # ---- time --------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        due, shared = self.purgatory.next_deadline(), self.shares.next_deadline()  # no list
        return due if shared is None else shared if due is None else min(due, shared)

    def expire(self) -> None:
        self.purgatory.expire()
        self.shares.expire()

    def housekeeping(self, interval_s: float = 1.0) -> None:
        """One tick (every ``interval_s``) of the logs' own periodic work
        (retention, flushing, compaction: decided by each log), for the
        partitions that need it (see the module docstring)."""
        seen = self._seen_end
        for key, part in self.partitions.items():
            end = part.log.log_end_offset
            if seen.get(key) != end:
                seen[key] = end
                self._active[key] = ACTIVE_TICKS
        if not self._sweep:
            self._sweep = list(self.partitions)
        per_tick = max(1, int(len(self.partitions) * interval_s / SWEEP_S) + 1)
        due = self._sweep[-per_tick:]
        del self._sweep[-per_tick:]
        # what this tick looks at: partitions that changed lately and the
        # sweep's share (the worker's metrics snapshot reads only these)
        self.visited = list(self._active) + due
        for key in self.visited:
            part = self.partitions.get(key)
            ticks = self._active.pop(key, 0) - 1
            if part is None:
                continue
            if ticks > 0:
                self._active[key] = ticks
            self._dirty.add(key)
            try:
                remote = part.log.remote
                if remote is not None and (part.is_leader or remote.copy_in_flight
                                           or remote.following):
                    # KIP-405: the leader copies, on the copier thread; the
                    # partition is looked at each tick until the copies are
                    # done (finished by a former leader too, none started);
                    # a follower takes the shared remote log metadata from there
                    part.log.copy_to_remote(wait=False, start=part.is_leader)
                    if remote.copy_in_flight:
                        self._active[key] = max(self._active.get(key, 0), 2)
                if part.is_leader and part.log.config.iceberg_mode != ICEBERG_OFF:
                    # the leader commits to the topic's table, on the Iceberg thread;
                    # looked at each tick while records are not in the table yet
                    # (what it reads below a tiered log's local start is
                    # downloaded on the remote reader's threads meanwhile)
                    if self.read_remote_in_background(part, lambda: self.iceberg.maybe_commit(
                            key, part.log, part.log.config.iceberg_target_lag_ms,
                            part.log.config.iceberg_mode)):
                        self._active[key] = max(self._active.get(key, 0), 2)
                elif self._iceberg is not None:
                    self._iceberg.forget(key)
                part.log.housekeeping()
            except KafkaError as exc:
                log.error("broker %d: housekeeping of %s failed: %s", self.broker_id, part.name, exc)
            self._publish(part)       # retention may have moved its log start

    @property
    def iceberg(self) -> IcebergTopicWriter:
        """The Iceberg topics' writer: as the worker's config says
        (``iceberg_tables``): the catalog under the data directory or, on a
        cluster, in its PostgreSQL, the tables' files in the warehouse
        (iceberg_warehouse_dir, the tiered store's directory or bucket), so
        that on a cluster a partition's leader on any node keeps one table;
        without it, the remote store's directory where tiered storage keeps
        one, else the data directory."""
        if self._iceberg is None:
            root = os.path.join(self.data_dir, ICEBERG_DIR)
            if self.iceberg_tables is not None:
                uri, warehouse, refused, file_io = self.iceberg_tables
                self._iceberg = IcebergTopicWriter(root, warehouse, uri, refused, file_io)
            else:
                remote = getattr(self.remote_storage, "root", None)
                self._iceberg = IcebergTopicWriter(
                    root, os.path.join(remote, ICEBERG_DIR) if remote else None)
        return self._iceberg

    def checkpoint(self) -> None:
        """Checkpoint the logs whose checkpoint may have changed (each takes
        a line in the CheckpointFile only if it did), then have the file
        written in the background."""
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            part = self.partitions.get(key)
            if part is None:
                continue
            try:
                part.log.maybe_checkpoint()
            except KafkaError as exc:
                log.error("broker %d: checkpoint of %s failed: %s", self.broker_id, part.name, exc)
        self.checkpoints.flush(wait=False)

    def shutdown(self) -> None:
        """Close every log (flush, snapshot, checkpoint, clean-shutdown
        marker), on a thread pool: each mostly waits for its own fsyncs."""
        self.purgatory.complete_all()

        def close(part: Partition) -> None:
            try:
                part.log.close()
            except KafkaError as exc:
                log.error("broker %d: closing %s: %s", self.broker_id, part.name, exc)
        parts = list(self.partitions.values())
        if parts:
            with ThreadPoolExecutor(min(IO_THREADS, len(parts)),
                                    thread_name_prefix="kafkalite-close") as pool:
                list(pool.map(close, parts))
        self.partitions.clear()
        self.checkpoints.close()
        if self.remote_reader is not None:
            self.remote_reader.close()


class _GatheredWakeups:
    """``ReplicaManager.gathered_wakeups``: a class, not a generator, since
    every Produce request (and every poll of the worker) enters it."""

    __slots__ = ("_rm", "_depth")

    def __init__(self, rm: ReplicaManager):
        self._rm = rm
        self._depth = 0

    def __enter__(self) -> None:
        if not self._depth:
            self._rm._woken = {}
        self._depth += 1

    def __exit__(self, *exc) -> bool:
        self._depth -= 1
        if not self._depth:
            rm = self._rm
            woken, rm._woken = rm._woken, None
            for key, appended in woken.items():
                rm._wake_now(key, appended)
        return False


def _with_errors(response: dict, failed: dict) -> dict:
    """An acks=all answer with the partitions in ``failed`` ({key:
    KafkaError}: not replicated in time, leadership lost, ISR too small)
    answered with their error, as Kafka."""
    for topic in response["responses"]:
        for p in topic["partition_responses"]:
            exc = failed.get((topic["name"], p["index"]))
            if exc is not None and p["error_code"] == 0:
                p["error_code"] = exc.code
                p["error_message"] = exc.message
    return response


class _NoFetcher:
    """The replica fetcher of a replica manager that follows nothing."""

    def follow(self, part) -> None:
        raise errors.NotLeaderOrFollowerError(
            f"{part.name}: this broker cannot follow (no replica fetcher)")

    def stop_following(self, key) -> None:
        pass
