#!/usr/bin/env python
"""Tiered storage benchmark (KIP-405): the offload of rolled segments and
the read of a topic's remote part, each beside a plain transfer of the same
files to or from the same store, in the same run.

    python benchmarks/bench_tiered.py                     # both stores, 3 runs (2-3 minutes)
    python benchmarks/bench_tiered.py --store directory   # one store
    python benchmarks/bench_tiered.py --quick             # seconds

1. Offload: a PartitionLog with --segments rolled segments of
   --segment-bytes (1,000-byte random values, 100 to a batch) copied by
   ``PartitionLog.copy_to_remote``, the leader's copy (the copier thread,
   the remote log metadata's COPY_SEGMENT_STARTED and FINISHED writes,
   the leader-epoch text, the store's own files), against a plain copy of
   the same files (the segment's .log, .index, .timeindex, the producer
   snapshot at its end, the leader-epoch checkpoint, and its transaction
   index when it has one: what the offload copies) to the same store:
   each file copied in the kernel (``shutil.copyfile``, sendfile) and
   fsynced, into a directory per segment beside the store's (directory
   store), one ``upload_file`` each into the same bucket (S3).
2. Remote read: a kafkalite server (one worker) with the store and a
   tiered topic of --segments segments whose local copies are deleted; a
   confluent-kafka consumer reads from offset 0 to the local log start,
   every byte of it from the store (the worker's reader threads bring
   each segment into its cache: a link to the store's file for a directory
   store on the same file system, a download from S3; the cache keeps 4,
   so each run brings them all in again), against the same consumer reading the same records
   from a topic kept local, and a plain read of the same segment objects:
   open and read of the store's ``segment.log`` files (directory), one
   ``get_object`` each (S3).

The S3 store is moto's server, on a thread of this process (as the tests
run it): its CPU is this process's, on both sides of each comparison.
Each figure is measured --runs times, the two sides of a comparison
taking turns going first, the page cache synced before each; every run
is printed with the load average, then the range. A benchmark never fails
on timing: the exit status is 0 whenever the run completed.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import common  # noqa: E402
from report import quiesce, say  # noqa: E402

from kafkalite.record import RecordBatchBuilder  # noqa: E402
from kafkalite.storage import LogConfig, PartitionLog  # noqa: E402
from kafkalite.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT  # noqa: E402
from kafkalite.storage.producer_snapshot import snapshot_path  # noqa: E402
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage  # noqa: E402
from kafkalite.storage.segment import (INDEX_SUFFIX, LOG_SUFFIX,  # noqa: E402
                                       TIME_INDEX_SUFFIX, segment_path)
from kafkalite.storage.txn_index import TXN_INDEX_SUFFIX  # noqa: E402

MiB = 1 << 20
LOCAL_TOPIC = "bench-local"     # the same records, not tiered: a consumer's local read
VALUE_BYTES = 1000
BATCH_RECORDS = 100
QUICK = dict(segments=6, segment_bytes=1 * MiB)


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


# ---- the stores ------------------------------------------------------------------------

class DirectoryStore:
    name = "directory"

    def __init__(self, root: str):
        self.root = root
        self.manager = LocalDirectoryRemoteStorage(os.path.join(root, "store"))
        self.server_config = f'remote_log_storage_dir = "{self.manager.root}"\n'

    def plain_copy(self, segments: list[list[str]], run: int) -> None:
        for i, files in enumerate(segments):
            target = os.path.join(self.root, f"plain-{run}", str(i))
            os.makedirs(target)
            for path in files:
                copy = os.path.join(target, os.path.basename(path))
                shutil.copyfile(path, copy)
                fd = os.open(copy, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def plain_read(self, partition: str) -> int:
        """Read every segment.log of ``partition`` in the store; bytes read."""
        total = 0
        for path in sorted(glob.glob(os.path.join(self.manager.root, partition, "*",
                                                  "segment.log"))):
            with open(path, "rb") as f:
                while chunk := f.read(8 << 20):
                    total += len(chunk)
        return total


class S3Store:
    name = "s3"

    def __init__(self, root: str, endpoint: str, bucket: str):
        import boto3
        from kafkalite.storage.remote.s3_storage import S3RemoteStorage
        self.bucket = bucket
        self.s3 = boto3.client("s3", endpoint_url=endpoint)
        self.manager = S3RemoteStorage(bucket, endpoint_url=endpoint)
        self.server_config = (f'remote_log_storage_s3_bucket = "{bucket}"\n'
                              f'remote_log_storage_s3_endpoint = "{endpoint}"\n')

    def plain_copy(self, segments: list[list[str]], run: int) -> None:
        for i, files in enumerate(segments):
            for path in files:
                self.s3.upload_file(path, self.bucket,
                                    f"plain-{run}/{i}/{os.path.basename(path)}")

    def plain_read(self, partition: str) -> int:
        total = 0
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                   Prefix=partition + "/")
        keys = sorted(o["Key"] for page in pages for o in page.get("Contents", ())
                      if o["Key"].endswith("/segment.log"))
        for key in keys:
            total += len(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        return total


# ---- 1. offload ------------------------------------------------------------------------

def fill_log(directory: str, store, segments: int, segment_bytes: int) -> PartitionLog:
    config = LogConfig.from_properties({"remote.storage.enable": "true",
                                        "segment.bytes": str(segment_bytes)})
    plog = PartitionLog.open(directory, config, remote_storage=store.manager)
    builder = RecordBatchBuilder(0)
    values = [os.urandom(VALUE_BYTES) for _ in range(BATCH_RECORDS)]
    now = int(time.time() * 1000)
    while len(plog.segments) <= segments:
        builder.reset()
        builder.append_values(values, timestamp=now)
        plog.append(builder.build())
    plog.high_watermark = plog.log_end_offset
    plog.flush()
    return plog


def segment_files(directory: str, seg) -> list[str]:
    """The local files of a rolled segment that the offload copies."""
    files = [segment_path(directory, seg.base_offset, suffix)
             for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)]
    txn = segment_path(directory, seg.base_offset, TXN_INDEX_SUFFIX)
    if os.path.exists(txn) and os.path.getsize(txn):
        files.append(txn)
    snapshot = snapshot_path(directory, seg.next_offset)
    if os.path.exists(snapshot):
        files.append(snapshot)
    return files + [os.path.join(directory, LEADER_EPOCH_CHECKPOINT)]


def offload_run(work: str, store, args, run: int, first: str) -> dict:
    """One run of both sides, ``first`` first: {side: (seconds, bytes)}."""
    plog = fill_log(os.path.join(work, f"offload-{run}-0"), store, args.segments,
                    args.segment_bytes)
    try:
        rolled = plog.segments[:-1]
        files = [segment_files(plog.directory, s) for s in rolled]
        nbytes = sum(os.path.getsize(f) for fs in files for f in fs)
        out = {}
        for side in (("offload", "plain") if first == "offload" else ("plain", "offload")):
            quiesce()
            t0 = time.perf_counter()
            if side == "offload":
                copied = plog.copy_to_remote()
                assert copied == len(rolled), (copied, len(rolled))
            else:
                store.plain_copy(files, run)
            out[side] = (time.perf_counter() - t0, nbytes)
        return out
    finally:
        plog.close()


# ---- 2. remote read ---------------------------------------------------------------------

def list_offsets(server, topic: str, *specs: int) -> list[int]:
    from compat.compat_helpers import KafkaWire
    from kafkalite.protocol import ApiKey
    [broker] = server.info["kafka_brokers"]
    wire = KafkaWire(f"127.0.0.1:{broker['port']}")
    try:
        r = wire.request(ApiKey.LIST_OFFSETS, 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                for ts in specs]}]})
    finally:
        wire.close()
    return [p["offset"] for p in r["topics"][0]["partitions"]]


def tiered_topic(server, topic: str, args, tiered: bool = True) -> int:
    """A tiered topic of --segments segments, all but the newest only
    remote; returns its local log start offset (the remote part's end).
    Not ``tiered``: the same records in a topic kept local; returns its end."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    configs = {"segment.bytes": str(args.segment_bytes)}
    if tiered:
        configs.update({"remote.storage.enable": "true", "local.retention.bytes": "1"})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    producer = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 20,
                            "batch.size": 256 * 1024, "queue.buffering.max.kbytes": 256 * 1024})
    value = os.urandom(VALUE_BYTES)
    records = (args.segments + 1) * args.segment_bytes // (VALUE_BYTES + 70)
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("the producer could not deliver every record")
    if not tiered:
        return records
    # every rolled segment copied and deleted: the local log is the active
    # segment, less than two segments' worth of records from the end
    per_segment = args.segment_bytes // (VALUE_BYTES + 10)
    deadline = time.monotonic() + 300
    while True:
        local, tiered = list_offsets(server, topic, -4, -5)
        if local > 0 and tiered == local - 1 and local >= records - 2 * per_segment:
            return local
        if time.monotonic() > deadline:
            raise RuntimeError(f"the topic was not offloaded: local start {local}, "
                               f"latest tiered {tiered}")
        time.sleep(0.2)


def consume_remote(server, topic: str, end: int) -> tuple[float, int, int]:
    """(seconds, bytes of values, records) of a consumer reading [0, end)."""
    import confluent_kafka as ck
    consumer = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "bench",
                            "enable.auto.commit": False, "fetch.max.bytes": 64 * MiB,
                            "max.partition.fetch.bytes": 16 * MiB})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        n = nbytes = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + 300
        while n < end:
            for m in consumer.consume(min(10_000, end - n), 1):
                if m.error() is None and m.offset() < end:
                    n += 1
                    nbytes += len(m.value())
            if time.monotonic() > deadline:
                raise RuntimeError(f"the consumer read {n} of {end} records in 300 s")
        return time.perf_counter() - t0, nbytes, n
    finally:
        consumer.close()


def read_run(server, store, topic: str, partition: str, end: int, run: int) -> dict:
    """One run of the three sides, each run starting with the next one."""
    out = {}
    sides = ["remote", "local", "plain"]
    for side in sides[run % 3:] + sides[:run % 3]:
        quiesce()
        if side in ("remote", "local"):
            out[side] = consume_remote(server, topic if side == "remote" else LOCAL_TOPIC, end)
        else:
            t0 = time.perf_counter()
            nbytes = store.plain_read(partition)
            out[side] = (time.perf_counter() - t0, nbytes, end)
    return out


# ---- the run ---------------------------------------------------------------------------

def spread(values: list[float]) -> str:
    return "%.2f-%.2f (median %.2f)" % (min(values), max(values), statistics.median(values))


def bench_store(store, work: str, args) -> dict:
    from kafkalite.launcher import ServerProcess
    say(f"\n== {store.name} store ==")
    figures: dict = {"offload": [], "read": []}
    for run in range(args.runs):
        first = "offload" if run % 2 == 0 else "plain"
        say(f"  offload run {run + 1}: load {load()}")
        r = offload_run(work, store, args, run, first)
        (t_off, nbytes), (t_plain, _) = r["offload"], r["plain"]
        ratio = t_plain / t_off
        figures["offload"].append({"bytes": nbytes, "offload_s": t_off, "plain_s": t_plain,
                                   "ratio": ratio, "load": load()})
        say(f"    {nbytes / MiB:.0f} MiB: offload {nbytes / MiB / t_off:.1f} MiB/s, plain copy "
            f"{nbytes / MiB / t_plain:.1f} MiB/s: {ratio:.2f}x")
    config = os.path.join(work, f"{store.name}.toml")
    with open(config, "w") as f:
        f.write('"remote.log.storage.system.enable" = true\n' + store.server_config)
    server = ServerProcess(os.path.join(work, f"server-{store.name}"), workers=1,
                           extra_args=["--config", config]).start()
    try:
        topic = "bench-tiered"
        end = tiered_topic(server, topic, args)
        tiered_topic(server, LOCAL_TOPIC, args, tiered=False)
        for run in range(args.runs):
            say(f"  remote read run {run + 1}: load {load()}")
            r = read_run(server, store, topic, f"{topic}-0", end, run)
            (t_remote, vbytes, records), (t_plain, pbytes, _) = r["remote"], r["plain"]
            t_local = r["local"][0]
            figures["read"].append({
                "records": records, "value_bytes": vbytes, "segment_bytes": pbytes,
                "remote_s": t_remote, "local_s": t_local, "plain_s": t_plain, "load": load(),
                "ratio": t_plain / t_remote, "vs_local": t_local / t_remote})
            say(f"    {records:,} records from 0 to {end:,} ({pbytes / MiB:.0f} MiB of "
                f"segments): consumer from the store {records / t_remote:,.0f} records/s "
                f"({pbytes / MiB / t_remote:.1f} MiB/s of segments), from local segments "
                f"{records / t_local:,.0f} records/s ({t_local / t_remote:.2f}x), plain "
                f"{'read' if store.name == 'directory' else 'GET'} of the store's segments "
                f"{pbytes / MiB / t_plain:.1f} MiB/s ({t_plain / t_remote:.2f}x)")
    finally:
        server.stop()
    med = statistics.median
    off, rd = figures["offload"], figures["read"]
    plain = "plain " + ("read" if store.name == "directory" else "GET")
    common.say_table([
        common.Row(f"{store.name}: offload", med(f["bytes"] / MiB / f["offload_s"] for f in off),
                   "MiB/s", med(f["bytes"] / MiB / f["plain_s"] for f in off), "plain copy",
                   fmt=".1f"),
        common.Row(f"{store.name}: consumer from the store",
                   med(f["records"] / f["remote_s"] for f in rd), "records/s",
                   med(f["records"] / f["local_s"] for f in rd), "from local segments"),
        common.Row(f"{store.name}: consumer from the store, segments",
                   med(f["segment_bytes"] / MiB / f["remote_s"] for f in rd), "MiB/s",
                   med(f["segment_bytes"] / MiB / f["plain_s"] for f in rd),
                   f"{plain} of the store's segments", fmt=".1f")])
    say("  ratios of each run (median, min-max):")
    say(f"  offload / plain copy:       {spread([f['ratio'] for f in figures['offload']])}")
    say(f"  remote read / plain:        {spread([f['ratio'] for f in figures['read']])}")
    say(f"  remote read / local read:   {spread([f['vs_local'] for f in figures['read']])}")
    return figures


@contextlib.contextmanager
def the_store(kind: str, work: str):
    if kind == "directory":
        yield DirectoryStore(work)
        return
    from moto_s3 import moto_s3
    logging.getLogger("werkzeug").setLevel(logging.WARNING)     # moto's request log
    with moto_s3("bench") as endpoint:
        yield S3Store(work, endpoint, "bench")


def main(argv=None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--store", choices=("directory", "s3", "both"), default="both")
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--segment-bytes", type=int, default=8 * MiB)
    common.add_rounds(parser, 3, flag="--runs",
                      help="runs; ours and the plain copy take turns going first")
    common.add_quick(parser, "6 segments of 1 MiB")
    parser.add_argument("--work-dir", default=None)
    common.add_json(parser, "--output", help="write the figures as JSON here")
    args = common.parse(parser, argv, quick=QUICK)
    say(f"bench_tiered: {args.segments} segments of {args.segment_bytes / MiB:g} MiB, "
        f"{args.runs} runs; load average {load()} ({os.cpu_count()} CPUs)")
    results = {}
    work = tempfile.mkdtemp(prefix="kafkalite-bench-tiered-", dir=args.work_dir)
    try:
        for kind in (("directory", "s3") if args.store == "both" else (args.store,)):
            store_work = os.path.join(work, kind)
            os.makedirs(store_work)
            with the_store(kind, store_work) as store:
                results[kind] = bench_store(store, store_work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.output:
        common.write_json(args.output, {"settings": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
