"""Tiered storage (KIP-405) under faults, at the server level: real
``kafkalite server`` processes copying a tiered partition to moto's S3
server (tests/moto_s3.py), confluent-kafka producing with acks=all the
whole time.

- The worker leading the partition is killed -9 while its copies are under
  way (``KAFKALITE_TIERED_KILL_ROUNDS`` rounds, tests/soak.py; the moment
  in each round from ``KAFKALITE_TIERED_KILL_SEED``, printed) and the
  supervisor restarts it. Afterwards every acknowledged record reads back
  from offset 0 once, in order, byte for byte; the remote log metadata
  lists no segment twice and no two offset ranges overlap; and no copy in
  the bucket is one the metadata does not name (a killed copy's objects are
  deleted).
- The S3 server stops for a while (its listener and open connections
  closed, started again on the same port with its objects), the outage
  beginning as a copy has put all of its objects but ``segment.log``:
  acknowledgements keep coming; copies fail and wait
  (RemoteCopyErrorsPerSec counts them) while the local disk grows by the
  rolled segments not copied, which RemoteCopyLagBytes/Segments show on
  the metrics port; once the store is back the copies resume, the lag
  goes to 0, the local disk shrinks back, the half copy's objects are
  deleted, and every record reads back from offset 0.
- The S3 server stops for OUTAGE_S and comes back: the worker answers
  Metadata throughout and is never fenced (its loop never waits on the
  store, neither while it is down nor as it answers again), and the
  outage is a dozen lines of log at most, not a line per retry.

Each run's checkers (``check_read_back``, ``check_remote_listing``) are
first shown to catch faults planted in that run's own data."""
from __future__ import annotations

import glob
import json
import os
import random
import signal
import threading
import time
import urllib.request

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.error import KafkaException

from harness import (ServerProcess, kafka_read_from_zero, local_segments, run_cli,
                     stop_server, wait_until)
from moto_s3 import moto_s3_server
from soak import setting
from kafkalite.storage.remote.copier import COPIER_THREADS

KILL_ROUNDS = setting("KAFKALITE_TIERED_KILL_ROUNDS")
SEED = int(os.environ.get("KAFKALITE_TIERED_KILL_SEED", random.randrange(1 << 30)))
BUCKET = "tiered-faults"
SEGMENT_BYTES = 16384
LOCAL_RETENTION_BYTES = 32768
SEGMENT_FILE = "segment.log"
ACK_STALL_S = 10.0      # the longest the acknowledgements may stop while the store is down
RETENTION_STALL_S = 5.0  # ... while remote deletes wait on it (no store call on the worker's loop)
# the outage of the store that comes back: 20 s by default, past five failed
# tries of the copies' backoff (1 s doubling to 16 s) and 20 housekeepings,
# each of which handed the old code 16 new copies to fail (hundreds of lines,
# OUTAGE_LINES allows 12); KAFKALITE_TIERED_OUTAGE_SECONDS sets it (tests/soak.py)
OUTAGE_S = setting("KAFKALITE_TIERED_OUTAGE_SECONDS")
# the longest the return may take: the copies' next try (the backoff is 30 s at
# most), the abandoned copies' deletes confirmed and the copies caught up
RETURN_S = 75.0
# the longest a Metadata request may wait, outage and return alike: under the
# 6 s without a heartbeat that fences a worker, above what a 2-core machine
# shared with other runs holds a process up now and then
METADATA_STALL_S = 4.0
OUTAGE_LINES = 12       # the warnings and errors one outage and its end may log, at most


# ---- checkers -----------------------------------------------------------------------------

def check_read_back(acked: dict[int, bytes], read: list[tuple[int, bytes]]) -> list[str]:
    """What is wrong with ``read`` ((offset, value) from offset 0 to the
    end) given ``acked`` (offset -> value of each acknowledged record,
    values unique and starting with their produce sequence number):
    offsets not 0, 1, 2, ...; a value read twice; an acknowledged record
    missing or different at its offset; values out of produce order."""
    problems = []
    offsets = [o for o, _ in read]
    if offsets != list(range(len(read))):
        gap = next((i for i, o in enumerate(offsets) if o != i), len(offsets))
        problems.append(f"offsets are not 0..{len(read) - 1}: at index {gap} "
                        f"{offsets[gap:gap + 3]}")
    seen: dict[bytes, int] = {}
    for offset, value in read:
        if value in seen:
            problems.append(f"{value[:12]!r} read twice, at {seen[value]} and {offset}")
        seen[value] = offset
    by_offset = dict(read)
    for offset, value in sorted(acked.items()):
        if by_offset.get(offset) != value:
            problems.append(f"acknowledged offset {offset} ({value[:12]!r}) reads back as "
                            f"{by_offset.get(offset, b'nothing')[:12]!r}")
    sequence = [int(v.split(b":", 1)[0]) for _, v in read]
    if any(b <= a for a, b in zip(sequence, sequence[1:])):
        problems.append("values out of produce order")
    return problems[:20]


def check_remote_listing(entries: list[dict], copies: dict[str, set[str]]) -> list[str]:
    """What is wrong with a partition's remote log metadata ``entries``
    (its file's segments) and the ``copies`` in the bucket (copy name
    ``<base offset>-<id>`` -> its objects' names): an id listed twice; two
    readable (COPY_SEGMENT_FINISHED) segments whose offset ranges overlap;
    a readable segment without its ``segment.log`` in the bucket; a copy in
    the bucket that no entry names (an orphan)."""
    problems = []
    ids = [e["id"] for e in entries]
    problems += [f"segment {i} listed twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    finished = sorted((e for e in entries if e["state"] == "COPY_SEGMENT_FINISHED"),
                      key=lambda e: e["base_offset"])
    for before, after in zip(finished, finished[1:]):
        if after["base_offset"] <= before["end_offset"]:
            problems.append(f"segments {before['base_offset']}..{before['end_offset']} and "
                            f"{after['base_offset']}..{after['end_offset']} overlap")
    names = {"%020d-%s" % (e["base_offset"], e["id"]) for e in entries}
    for e in finished:
        name = "%020d-%s" % (e["base_offset"], e["id"])
        if SEGMENT_FILE not in copies.get(name, ()):
            problems.append(f"readable segment {name} has no {SEGMENT_FILE} in the bucket")
    problems += [f"orphaned copy {name} in the bucket: {sorted(files)}"
                 for name, files in sorted(copies.items()) if name not in names]
    return problems


def _checkers_catch_planted_faults(acked, read, entries, copies) -> None:
    """Each checker flags a fault planted in this run's data, before its
    clean verdict on the data counts."""
    assert check_read_back(acked, read[:5] + read[6:]), "a dropped record"
    assert check_read_back(acked, read[:6] + read[5:]), "a record read twice"
    assert check_read_back(acked, read[:5] + [(5, read[6][1]), (6, read[5][1])] + read[7:]), \
        "two records swapped"
    assert check_remote_listing(entries + [entries[0]], copies), "an entry listed twice"
    shifted = dict(entries[1], id="planted", base_offset=entries[0]["end_offset"])
    planted = {**copies, "%020d-planted" % shifted["base_offset"]: {SEGMENT_FILE}}
    assert check_remote_listing(entries + [shifted], planted), "overlapping ranges"
    assert check_remote_listing(entries, {**copies, "%020d-orphan" % 0: {"offset.index"}}), \
        "an orphaned copy"
    assert check_remote_listing(entries, {n: f - {SEGMENT_FILE} for n, f in copies.items()}), \
        "segments missing from the bucket"


# ---- what the tests look at ---------------------------------------------------------------

def _partition_dir(srv, topic) -> str:
    [directory] = glob.glob(os.path.join(srv.data_dir, "**", f"{topic}-0"), recursive=True)
    return directory


def _metadata(directory) -> list[dict]:
    """The partition's remote log metadata entries (an atomically replaced file)."""
    try:
        with open(os.path.join(directory, "remote-log-metadata")) as f:
            return json.load(f)["segments"]
    except FileNotFoundError:
        return []


def _wait_copied(directory: str, count: int, what: str) -> None:
    """Until ``count`` segments of the partition in ``directory`` are copied."""
    wait_until(lambda: len([e for e in _metadata(directory)
                            if e["state"] == "COPY_SEGMENT_FINISHED"]) >= count, 60, what)


def _highest_remote(entries) -> int:
    return max((e["end_offset"] for e in entries if e["state"] == "COPY_SEGMENT_FINISHED"),
               default=-1)


def _bucket_copies(s3, partition) -> dict[str, set[str]]:
    """copy name -> the names of its objects, for every object of ``partition``."""
    copies: dict[str, set[str]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                             Prefix=partition + "/"):
        for o in page.get("Contents", ()):
            _, name, file = o["Key"].split("/", 2)
            copies.setdefault(name, set()).add(file)
    return copies


def _stored_copies(partition) -> dict[str, set[str]]:
    """_bucket_copies, read from moto's memory in this process (the store's
    contents while its endpoint is down)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    copies: dict[str, set[str]] = {}
    for key in list(s3_backends[DEFAULT_ACCOUNT_ID]["global"].buckets[BUCKET].keys):
        if key.startswith(partition + "/"):
            _, name, file = key.split("/", 2)
            copies.setdefault(name, set()).add(file)
    return copies




def _scrape(srv, topic) -> dict:
    """{metric name: value} of ``topic``'s tiered-storage metrics on /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(srv.info["metrics"], timeout=5).read().decode()
    prefix = "kafka_server_brokertopicmetrics_remote"
    return {s.name[len(prefix):]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith(prefix) and s.labels.get("topic") == topic}


def _s3_client(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint,
                        config=Config(retries={"max_attempts": 2}, connect_timeout=5))


def _server(root, endpoint, workers) -> ServerProcess:
    config = root / "tiered.toml"
    config.write_text('"remote.log.storage.system.enable" = true\n'
                      f'remote_log_storage_s3_bucket = "{BUCKET}"\n'
                      f'remote_log_storage_s3_endpoint = "{endpoint}"\n')
    return ServerProcess(str(root / "data"), workers=workers,
                         extra_args=["--config", str(config)]).start()


def _create(srv, topic, **configs) -> int:
    """The tiered topic, one partition (``configs`` added to its topic
    configs); returns its leader's worker index."""
    admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(LOCAL_RETENTION_BYTES), **configs})])[topic].result(30)
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


class Producer(threading.Thread):
    """confluent-kafka, idempotent, acks=all: a steady stream of unique
    values (``<sequence>:<random bytes>``) until ``stop``; ``acked`` maps
    each acknowledged offset to its value, ``ack_times`` when each came.
    ``paused`` holds the stream (what is in flight still completes)."""

    def __init__(self, bootstrap, topic, rng: random.Random):
        super().__init__(daemon=True)
        self.topic = topic
        self.rng = rng
        self.stopping = threading.Event()
        self.paused = threading.Event()
        self.acked: dict[int, bytes] = {}
        self.ack_times: list[float] = []
        self.errors: list = []
        self.sent = 0
        self.producer = ck.Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "batch.size": 4096, "message.timeout.ms": 120_000})

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[msg.offset()] = msg.value()
            self.ack_times.append(time.monotonic())

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                if self.paused.is_set():
                    self.producer.poll(0.05)
                    continue
                for _ in range(5):
                    value = b"%08d:" % self.sent + self.rng.randbytes(48)
                    try:
                        self.producer.produce(self.topic, value, partition=0,
                                              on_delivery=self._delivered)
                        self.sent += 1
                    except BufferError:
                        self.producer.poll(0.1)
                self.producer.poll(0.02)     # a stream over the faults, not one burst
        except Exception as exc:
            self.errors.append(repr(exc))

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)
        left = self.producer.flush(120)
        assert not left and not self.errors, f"{left} undelivered, errors {self.errors[:3]}"
        assert len(self.acked) == self.sent

    def acks_since(self, moment: float) -> int:
        return sum(1 for t in list(self.ack_times) if t >= moment)

    def stalled(self, since: float, longest: float) -> bool:
        """Whether the acknowledgements stopped for more than ``longest``
        seconds after ``since`` (the stream not paused meanwhile)."""
        times = [since] + [t for t in list(self.ack_times) if t >= since] + [time.monotonic()]
        return any(b - a > longest for a, b in zip(times, times[1:]))




def _copies_done(directory) -> bool:
    """Every rolled local segment is copied and no copy is under way."""
    entries = _metadata(directory)
    local = local_segments(directory)
    return (all(e["state"] == "COPY_SEGMENT_FINISHED" for e in entries)
            and len(local) >= 1 and _highest_remote(entries) == local[-1][0] - 1)


def _check_whole(srv, topic, producer, s3) -> None:
    """After the producer finished: every copy made, then the checkers,
    shown to catch planted faults first, find nothing wrong."""
    directory = _partition_dir(srv, topic)
    wait_until(lambda: _copies_done(directory), 60, "every rolled segment copied")
    partition = os.path.basename(directory)
    copies = wait_until(lambda: (c := _bucket_copies(s3, partition)) and
                        not check_remote_listing(_metadata(directory), c) and c, 30,
                        lambda: f"a clean remote listing: "
                                f"{check_remote_listing(_metadata(directory), _bucket_copies(s3, partition))} (seed {SEED})")
    entries = _metadata(directory)
    read = kafka_read_from_zero({"bootstrap.servers": srv.kafka_bootstrap}, topic,
                                len(producer.acked))
    _checkers_catch_planted_faults(producer.acked, read, entries, copies)
    assert check_read_back(producer.acked, read) == [], f"seed {SEED}"
    assert check_remote_listing(entries, copies) == [], f"seed {SEED}"
    bases = [e["base_offset"] for e in sorted(entries, key=lambda e: e["base_offset"])]
    assert bases[0] == 0 and local_segments(directory)[0][0] > 0, \
        "the read from offset 0 started in the remote part"


def _gone(pid: int) -> bool:
    """The process ``pid`` exited (a zombie, or reaped: its /proc entry gone,
    which it may be between a look for it and the read of its stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:         # FileNotFoundError, or ProcessLookupError mid-read
        return True


# ---- the tests ----------------------------------------------------------------------------

@pytest.mark.processes
def test_kill_9_of_the_copying_worker_loses_no_segment_and_leaves_no_orphan(tmp_path):
    """KAFKALITE_TIERED_KILL_ROUNDS kills -9 of the leader's worker, each at
    a random moment up to 0.3 s after a copy's COPY_SEGMENT_STARTED was
    written: while its objects are being put (each PUT held 30 ms, so a
    copy takes a while) or after, before COPY_SEGMENT_FINISHED. After each
    restart the killed copies' objects are deleted; at the end the checkers
    find every record and a clean listing."""
    print(f"KAFKALITE_TIERED_KILL_SEED={SEED}")
    rng = random.Random(SEED)
    with moto_s3_server(BUCKET) as s3_server:
        s3_server.put_delay = 0.03
        s3 = _s3_client(s3_server.endpoint)
        srv = _server(tmp_path, s3_server.endpoint, workers=2)
        producer = None
        try:
            topic = "tiered-kills"
            leader = _create(srv, topic)
            producer = Producer(srv.kafka_bootstrap, topic, rng)
            producer.start()
            directory = _partition_dir(srv, topic)
            partition = os.path.basename(directory)
            landed = {"queued": 0, "partly put": 0, "put": 0}  # unfinished copies a kill found
            for kill in range(KILL_ROUNDS):
                started = wait_until(
                    lambda: [e for e in _metadata(directory)
                             if e["state"] == "COPY_SEGMENT_STARTED"], 60,
                    f"a copy under way before kill {kill + 1} (seed {SEED})", interval=0.01)
                time.sleep(rng.uniform(0, 0.3))     # the random point, not a wait for a state
                pid = srv.worker_pid(leader)
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda: _gone(pid), 10, "the killed worker gone")
                # what the kill interrupted, before the restarted worker cleans it up
                unfinished = [e for e in _metadata(directory)
                              if e["state"] == "COPY_SEGMENT_STARTED"]
                copies = _bucket_copies(s3, partition)
                for e in unfinished:
                    name = "%020d-%s" % (e["base_offset"], e["id"])
                    files = copies.get(name, set())
                    landed["put" if SEGMENT_FILE in files else "partly put" if files
                           else "queued"] += 1
                srv.wait_for_worker_restart(leader, pid, 30)
                gone = {e["id"] for e in unfinished} | {e["id"] for e in started}
                wait_until(lambda: not any(
                    e["id"] in gone and e["state"] != "COPY_SEGMENT_FINISHED"
                    for e in _metadata(directory)) and not any(
                    name.split("-", 1)[1] in gone and name.split("-", 1)[1] not in
                    {e["id"] for e in _metadata(directory)}
                    for name in _bucket_copies(s3, partition)), 30,
                    f"the copies kill {kill + 1} interrupted cleaned up (seed {SEED})")
            print(f"{KILL_ROUNDS} kills found unfinished copies: {landed['partly put']} "
                  f"partly put (objects in the bucket, not segment.log), {landed['queued']} "
                  f"queued (nothing put), {landed['put']} put but not yet "
                  f"COPY_SEGMENT_FINISHED (seed {SEED})")
            producer.finish()
            _check_whole(srv, topic, producer, s3)
        finally:
            if producer is not None and producer.is_alive():
                producer.stopping.set()
            stop_server(srv)


@pytest.mark.processes
def test_an_s3_outage_holds_the_copies_and_produce_goes_on(tmp_path, monkeypatch):
    """The store down from the moment a copy is about to put its
    segment.log until the lag shows 5 segments waiting and a failed copy
    is counted (botocore's own retries decide how long a copy takes to
    fail: the server is given boto3's AWS_MAX_ATTEMPTS=2, not its default
    5, so the outage lasts seconds, not half a minute), then started
    again on its port."""
    print(f"seed {SEED}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with moto_s3_server(BUCKET) as s3_server:
        s3 = _s3_client(s3_server.endpoint)
        srv = _server(tmp_path, s3_server.endpoint, workers=1)
        producer = None
        try:
            topic = "tiered-outage"
            _create(srv, topic)
            producer = Producer(srv.kafka_bootstrap, topic, random.Random(SEED))
            producer.start()
            directory = _partition_dir(srv, topic)
            partition = os.path.basename(directory)
            _wait_copied(directory, 1, "a segment copied before the outage")

            # the store goes down as a copy is about to put its segment.log
            s3_server.stop_before = lambda method, path: (method == "PUT"
                                                          and path.endswith("/" + SEGMENT_FILE))
            wait_until(lambda: not s3_server.running, 30, "the outage to begin")
            down = time.monotonic()
            highest_at_outage = _highest_remote(_metadata(directory))
            # what the store holds meanwhile (moto's memory, in this process): the
            # half copies, their objects put but segment.log (one, or a few:
            # the copier pool runs the next segments' copies beside it)
            half = [n for n, files in _stored_copies(partition).items()
                    if SEGMENT_FILE not in files]
            assert 1 <= len(half) <= COPIER_THREADS, _stored_copies(partition)
            # produce goes on: acknowledgements come while the store is down, and
            # the copies fail and wait, the local disk holding what they could not take
            def lag_grown():
                assert not producer.stalled(down, ACK_STALL_S), \
                    f"no acknowledgement for {ACK_STALL_S} s while the store is down"
                m = _scrape(srv, topic)
                return m.get("copylagsegments", 0) >= 5 and m.get("copyerrors_total", 0) >= 1 and m
            lag = wait_until(lag_grown, 60, "the upload lag to grow and the failed copies counted")
            assert producer.acks_since(down) >= 200, "acknowledgements during the outage"
            assert _highest_remote(_metadata(directory)) == highest_at_outage, "nothing copied"
            assert lag.get("copybytes_total") == sum(
                e["size"] for e in _metadata(directory) if e["state"] == "COPY_SEGMENT_FINISHED")

            # with the stream paused, the lag on the metrics port is exactly the
            # rolled local segments above the last one copied
            producer.paused.set()
            producer.producer.flush(30)

            def lag_matches():
                local = local_segments(directory)
                highest = _highest_remote(_metadata(directory))
                waiting = [size for base, size in local[:-1] if base > highest]
                m = _scrape(srv, topic)
                return (m.get("copylagbytes") == sum(waiting)
                        and m.get("copylagsegments") == len(waiting) and (m, local))
            lag, local = wait_until(lag_matches, 30, "the lag metric to match the local disk")
            local_bytes = sum(size for _, size in local)
            assert lag["copylagbytes"] >= 5 * SEGMENT_BYTES * 0.9
            assert local_bytes >= lag["copylagbytes"] > LOCAL_RETENTION_BYTES, \
                "the local disk holds what could not be uploaded, past local.retention.bytes"
            producer.paused.clear()

            s3_server.start()
            back = time.monotonic()
            wait_until(lambda: producer.acks_since(back) >= 200, 30, "acks after the outage")
            producer.finish()
            after = wait_until(lambda: (m := _scrape(srv, topic)).get("copylagsegments") == 0
                               and _copies_done(directory) and m, 60,
                               "the copies to resume and catch up")
            assert after["copylagbytes"] == 0
            wait_until(lambda: not set(half) & set(_bucket_copies(s3, partition)), 30,
                       f"the half copy {half} deleted from the bucket")
            assert after["copybytes_total"] > lag["copybytes_total"]
            # local retention deletes what was copied at the worker's next
            # housekeeping, not as the last copy finishes
            wait_until(lambda: sum(size for _, size in local_segments(directory))
                       < local_bytes, 30,
                       lambda: f"the local disk shrinking back once the copies are made "
                               f"(below {local_bytes} bytes): {local_segments(directory)}")
            _check_whole(srv, topic, producer, s3)
        finally:
            if producer is not None and producer.is_alive():
                producer.stopping.set()
            stop_server(srv)


def _not_fenced(srv, pid) -> None:
    """The worker that was ``pid`` still serves: never fenced nor restarted."""
    assert srv.worker_pid(0) == pid, "the worker was restarted"
    assert "fencing it" not in srv.output(), "the supervisor fenced the worker"


@pytest.mark.processes
def test_retention_past_remote_segments_in_an_s3_outage_holds_up_no_acknowledgement(
        tmp_path, monkeypatch):
    """Total retention (retention.bytes) deleting remote segments while the
    store does not answer (requests held, MotoS3Server.hold: a partition
    from the store, where a request waits out its timeout; a stopped one
    refuses at once): the deletes wait on the copier thread,
    DELETE_SEGMENT_STARTED meanwhile, and the worker's loop goes on:
    acknowledgements keep coming (no gap past RETENTION_STALL_S), the
    supervisor fences nothing. Once the store answers again the deletes are
    confirmed and the bucket holds exactly what the metadata lists. (Each
    delete used to run on the worker's loop, holding it for as long as the
    store's request did.)"""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with moto_s3_server(BUCKET) as s3_server:
        s3 = _s3_client(s3_server.endpoint)
        srv = _server(tmp_path, s3_server.endpoint, workers=1)
        producer = None
        try:
            topic = "tiered-retention-outage"
            _create(srv, topic, **{"retention.bytes": str(6 * SEGMENT_BYTES)})
            pid = srv.worker_pid(0)
            producer = Producer(srv.kafka_bootstrap, topic, random.Random(SEED))
            producer.start()
            directory = _partition_dir(srv, topic)
            partition = os.path.basename(directory)
            wait_until(lambda: min((e["base_offset"] for e in _metadata(directory)
                                    if e["state"] == "COPY_SEGMENT_FINISHED"), default=0) > 0,
                       60, "total retention deleting remote segments before the outage")

            s3_server.hold()
            down = time.monotonic()

            def deletes_waiting():
                assert not producer.stalled(down, RETENTION_STALL_S), \
                    f"no acknowledgement for {RETENTION_STALL_S} s while the store is down"
                return (time.monotonic() - down > 2 * RETENTION_STALL_S
                        and producer.acks_since(down) >= 200
                        and [e for e in _metadata(directory)
                             if e["state"] == "DELETE_SEGMENT_STARTED"])
            waiting = wait_until(deletes_waiting, 90, "retention deletes started in the outage")
            assert not producer.stalled(down, RETENTION_STALL_S)
            _not_fenced(srv, pid)

            s3_server.release()
            back = time.monotonic()
            producer.finish()
            wait_until(lambda: not {e["id"] for e in waiting} & {
                e["id"] for e in _metadata(directory)}, 60,
                "the deletes started in the outage confirmed")
            wait_until(lambda: _copies_done(directory), 60, "every rolled segment copied")
            problems = wait_until(
                lambda: not check_remote_listing(_metadata(directory),
                                                 _bucket_copies(s3, partition)), 30,
                lambda: "the bucket to hold what the metadata lists: "
                        f"{check_remote_listing(_metadata(directory), _bucket_copies(s3, partition))}")
            assert problems
            print(f"the outage's {len(waiting)} retention deletes confirmed "
                  f"{time.monotonic() - back:.1f} s after the store came back")
            _not_fenced(srv, pid)
        finally:
            if producer is not None and producer.is_alive():
                producer.stopping.set()
            stop_server(srv)


@pytest.mark.processes
def test_delete_topics_in_an_s3_outage_holds_up_nothing_and_leaves_no_orphan(
        tmp_path, monkeypatch):
    """A tiered topic deleted while the store is down: DeleteTopics answers,
    the partition's directory goes, and another topic's acknowledgements
    on the same worker keep coming; its remote deletes, kept by the node's
    deleter (remote-log-deletes/ in the data directory), are made once the
    store is back: the bucket keeps no object of it. (delete_all used to
    delete each segment on the worker's loop, each waiting on boto3's
    retries, and one that failed left the rest in the bucket for good.)"""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with moto_s3_server(BUCKET) as s3_server:
        s3 = _s3_client(s3_server.endpoint)
        srv = _server(tmp_path, s3_server.endpoint, workers=1)
        producer = None
        try:
            doomed, live = "tiered-doomed", "tiered-live"
            _create(srv, doomed)
            _create(srv, live)
            pid = srv.worker_pid(0)
            filler = Producer(srv.kafka_bootstrap, doomed, random.Random(SEED))
            filler.start()
            directory = _partition_dir(srv, doomed)
            partition = os.path.basename(directory)
            _wait_copied(directory, 4, "segments of the doomed topic copied")
            filler.finish()
            wait_until(lambda: _copies_done(directory), 60, "its rolled segments copied")
            assert len(_bucket_copies(s3, partition)) >= 4
            producer = Producer(srv.kafka_bootstrap, live, random.Random(SEED + 1))
            producer.start()
            wait_until(lambda: len(producer.acked) >= 100, 30, "acks on the live topic")

            s3_server.stop()
            down = time.monotonic()
            admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
            admin.delete_topics([doomed], operation_timeout=30)[doomed].result(60)
            wait_until(lambda: not os.path.exists(directory), 30,
                       "the doomed partition's directory removed")
            pending = os.path.join(srv.data_dir, "remote-log-deletes")
            assert os.listdir(pending), "its remote deletes kept on disk"

            def outage_long_enough():
                assert not producer.stalled(down, RETENTION_STALL_S), \
                    f"no acknowledgement for {RETENTION_STALL_S} s while the store is down"
                return time.monotonic() - down > 2 * RETENTION_STALL_S
            wait_until(outage_long_enough, 60, "the outage to last")
            assert producer.acks_since(down) >= 200, "acknowledgements during the outage"
            _not_fenced(srv, pid)

            s3_server.start()
            back = time.monotonic()
            wait_until(lambda: not _bucket_copies(s3, partition) and not os.listdir(pending),
                       60, lambda: f"the deleted topic's copies gone from the bucket: "
                                   f"{sorted(_bucket_copies(s3, partition))}")
            print(f"the deleted topic's remote copies deleted {time.monotonic() - back:.1f} s "
                  f"after the store came back")
            producer.finish()
            _not_fenced(srv, pid)
        finally:
            if producer is not None and producer.is_alive():
                producer.stopping.set()
            stop_server(srv)


@pytest.mark.processes
def test_a_deleted_topics_remote_deletes_survive_a_kill_9_of_the_worker(tmp_path, monkeypatch):
    """A tiered topic deleted while the store is stopped, then its worker
    killed -9 before the store is back: the restarted worker (leading no
    tiered partition) takes up the deletes kept in remote-log-deletes/ and
    makes them once the store is back; the bucket keeps nothing of the
    topic."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with moto_s3_server(BUCKET) as s3_server:
        s3 = _s3_client(s3_server.endpoint)
        srv = _server(tmp_path, s3_server.endpoint, workers=1)
        try:
            topic = "tiered-deleted-then-killed"
            _create(srv, topic)
            filler = Producer(srv.kafka_bootstrap, topic, random.Random(SEED))
            filler.start()
            directory = _partition_dir(srv, topic)
            partition = os.path.basename(directory)
            _wait_copied(directory, 3, "segments copied")
            filler.finish()
            wait_until(lambda: _copies_done(directory), 60, "its rolled segments copied")
            assert _bucket_copies(s3, partition)

            s3_server.stop()
            admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
            admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
            wait_until(lambda: not os.path.exists(directory), 30, "the partition's directory removed")
            pending = os.path.join(srv.data_dir, "remote-log-deletes")
            assert os.listdir(pending), "its remote deletes kept on disk"
            pid = srv.worker_pid(0)
            os.kill(pid, signal.SIGKILL)
            srv.wait_for_worker_restart(0, pid, 30)

            s3_server.start()
            wait_until(lambda: not _bucket_copies(s3, partition) and not os.listdir(pending),
                       60, lambda: f"the deleted topic's copies gone from the bucket: "
                                   f"{sorted(_bucket_copies(s3, partition))}")
        finally:
            stop_server(srv)


class MetadataProbe(threading.Thread):
    """A Metadata request for ``topic`` every 0.2 s until ``stop``;
    ``slowest`` is the longest one took to be answered (a worker whose loop
    stops answers none: that long, up to the probe's 30 s)."""

    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.topic = topic
        self.stopping = threading.Event()
        self.slowest = (0.0, None)      # (seconds, time.monotonic() it was asked)
        self.errors: list = []

    def run(self) -> None:
        while not self.stopping.is_set():
            asked = time.monotonic()
            try:
                self.admin.list_topics(self.topic, timeout=30)
            except KafkaException as exc:
                self.errors.append(exc)
            took = time.monotonic() - asked
            if took > self.slowest[0]:
                self.slowest = (took, asked)
            self.stopping.wait(0.2)


def _returning(directory, output: str, before: int, rolled: int) -> str:
    """What the worker still has to do after the store's return (empty:
    nothing), ``output`` the server's: the copies are to succeed again
    (logged), the copies the outage abandoned to be deleted (DELETE_SEGMENT_*
    in the metadata), and every segment rolled by the return (``rolled``: the
    last offset of the last one) to be copied. Not the lag metric while the
    producer streams on: it counts the copies the last housekeeping handed
    over, which the next one finishes, so it stays at about the segments
    rolled a second (3 to 4 at the ~900 acks a second of an unloaded 2-core
    machine, before the outage as after it) and went to 1 only when the
    stream happened to slow down."""
    if not any("succeed again" in line for line in _warnings(output)[before:]):
        return "no copy succeeded again yet"
    deleting = [e["id"] for e in _metadata(directory) if e["state"].startswith("DELETE")]
    if deleting:
        return f"{len(deleting)} abandoned copies still to delete"
    highest = _highest_remote(_metadata(directory))
    return "" if highest >= rolled else \
        f"copied up to offset {highest}, the segments rolled by the return end at {rolled}"


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line]


@pytest.mark.processes
def test_the_worker_serves_on_through_an_s3_outage_and_its_end(tmp_path, monkeypatch):
    """The store stopped for OUTAGE_S while a producer streams to a tiered
    partition, then started again: the worker's loop answers Metadata
    within METADATA_STALL_S the whole time and beats to the supervisor
    (never fenced, never restarted), and the outage logs at most
    OUTAGE_LINES lines: its failures once as they start, with their count
    once the store answers. (The old code handed the copier 16 new copies
    at every housekeeping of the outage, abandoning each batch for
    deletion and logging every failed delete at every retry: hundreds of
    lines; when the store answered, each confirmed delete rewrote the
    partition's whole metadata file on the loop: seconds without a
    heartbeat, fenced after 6 s on a slower disk.)"""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with moto_s3_server(BUCKET) as s3_server:
        s3 = _s3_client(s3_server.endpoint)
        srv = _server(tmp_path, s3_server.endpoint, workers=1)
        producer = probe = None
        try:
            topic = "tiered-outage-and-back"
            _create(srv, topic)
            pid = srv.worker_pid(0)
            producer = Producer(srv.kafka_bootstrap, topic, random.Random(SEED))
            producer.start()
            directory = _partition_dir(srv, topic)
            _wait_copied(directory, 2, "segments copied before the outage")
            probe = MetadataProbe(srv.kafka_bootstrap, topic)
            probe.start()
            before = len(_warnings(srv.output()))

            s3_server.stop()
            down = time.monotonic()
            wait_until(lambda: time.monotonic() - down > OUTAGE_S
                       and not producer.stalled(down, ACK_STALL_S), OUTAGE_S + 30,
                       f"{OUTAGE_S:.0f} s of outage, acknowledgements coming")
            s3_server.start()
            back = time.monotonic()
            rolled = local_segments(directory)[-1][0] - 1
            # the worker watched through the return's work: the copies resume
            # after their backoff, the outage's abandoned copies are deleted
            # (each confirmed delete rewrote the metadata file on the old
            # code's loop) and the copies catch up
            try:
                wait_until(lambda: not _returning(directory, srv.output(), before, rolled),
                           RETURN_S, lambda: "the return's work done: "
                           + _returning(directory, srv.output(), before, rolled), interval=0.5)
                print(f"the segments rolled by the return copied {time.monotonic() - back:.1f} s "
                      f"after it; the lag metric, streaming on: "
                      f"{_scrape(srv, topic).get('copylagsegments')} segments")
                # the lag metric says so once nothing more rolls (_returning)
                producer.paused.set()
                producer.producer.flush(30)
                wait_until(lambda: _scrape(srv, topic).get("copylagsegments") == 0, 30,
                           "the copy lag metric at 0, the stream paused", interval=0.5)
                producer.paused.clear()
                late = None
            except AssertionError as exc:
                late = exc      # after what the worker did meanwhile, which says more
            probe.stopping.set()
            probe.join(35)
            slowest, asked = probe.slowest
            print(f"the slowest Metadata: {slowest:.2f} s, asked {asked - back:+.1f} s from the "
                  f"store's return; acks since: {producer.acks_since(back)}")
            assert slowest <= METADATA_STALL_S, \
                f"a Metadata request waited {slowest:.1f} s ({asked - back:+.1f} s from the return)"
            assert not probe.errors, probe.errors[:3]
            _not_fenced(srv, pid)
            lines = _warnings(srv.output())[before:]
            assert len(lines) <= OUTAGE_LINES, \
                f"{len(lines)} lines logged over the outage, e.g.\n" + "\n".join(lines[:8])
            assert any("succeed again" in line for line in lines), lines
            assert late is None, late
            producer.finish()
            _check_whole(srv, topic, producer, s3)
        finally:
            if probe is not None:
                probe.stopping.set()
            if producer is not None and producer.is_alive():
                producer.stopping.set()
            stop_server(srv)


def _health(srv) -> tuple[int, dict]:
    import urllib.error
    try:
        with urllib.request.urlopen(srv.info["health"], timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.processes
def test_after_a_restart_with_the_store_down_the_copy_errors_metric_is_there(tmp_path,
                                                                             monkeypatch):
    """A restart while S3 is down: the tiered topic's copy-errors counter is
    on /metrics from the start (it was missing until the store answered:
    no copy is tried while the remote log metadata cannot be read), and a
    store that is down, which may come back, leaves the node healthy."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with moto_s3_server(BUCKET) as s3:
        srv = _server(tmp_path, s3.endpoint, workers=1)
        try:
            topic = "restarted-down"
            _create(srv, topic)
            srv.stop()
            s3.stop()
            srv.start()
            copy_errors = "copyerrors_total"
            wait_until(lambda: copy_errors in _scrape(srv, topic), 30,
                       "the copy-errors counter on /metrics")
            assert _scrape(srv, topic)[copy_errors] >= 0
            assert _health(srv)[0] == 200
        finally:
            stop_server(srv)


@pytest.mark.processes
def test_a_store_that_refuses_every_call_makes_the_node_unhealthy(tmp_path):
    """A bucket that does not exist (a valid name: the config takes it):
    S3 answers NoSuchBucket to every call, and /health says so (503, the
    store's error) where it said "ok" while the log filled with errors."""
    with moto_s3_server(BUCKET) as s3:
        config = tmp_path / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "no-such-bucket-here"\n'
                          f'remote_log_storage_s3_endpoint = "{s3.endpoint}"\n')
        srv = ServerProcess(str(tmp_path / "data"), workers=1,
                            extra_args=["--config", str(config)]).start()
        try:
            assert _health(srv)[0] == 200, "healthy before a tiered topic calls the store"
            _create(srv, "refused")
            code, state = wait_until(lambda: (lambda h: h if h[0] == 503 else None)(
                _health(srv)), 30, "/health saying the store refuses")
            assert state["status"] == "remote storage refused"
            assert "NoSuchBucket" in state["remote_storage_refused"][0]
            assert state["workers_up"] == 1
            answer = run_cli("health", "--url", srv.info["health"])
            assert answer.returncode == 1
            [line] = (answer.stdout + answer.stderr).decode().splitlines()
            assert "NoSuchBucket" in line, line
        finally:
            stop_server(srv)
