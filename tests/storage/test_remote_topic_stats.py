"""Tiered storage's per-topic counters (remote_log.RemoteTopicStats, which
the worker's metrics snapshot sends as Kafka's RemoteCopyBytesPerSec,
RemoteCopyErrorsPerSec, RemoteFetchBytesPerSec, RemoteFetchErrorsPerSec):
a copy the store cannot take counts one error and no bytes; the copies
made count their segments' bytes; a read counts the segment it fetched."""
import os

import pytest

from kafkalite.errors import KafkaStorageError
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.remote.remote_log import REMOTE_TOPIC_STATS, RemoteTopicStats
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage
from storage_helpers import batch

TIERED = {"remote.storage.enable": "true", "segment.bytes": "1200",
          "local.retention.bytes": "2000"}


def test_copies_failed_and_made_and_reads_are_counted_per_topic(tmp_path, clock):
    topic = "stats-%d" % os.getpid()
    root = tmp_path / "remote"
    root.mkdir()
    (root / f"{topic}-0").write_text("a file where the partition's copies would go")
    plog = PartitionLog.open(str(tmp_path / f"{topic}-0"), LogConfig.from_properties(TIERED),
                             clock=clock, remote_storage=LocalDirectoryRemoteStorage(str(root)))
    try:
        for i in range(40):
            plog.append(batch([b"record-%03d" % i * 20], timestamp=clock.now + i))
        plog.high_watermark = plog.log_end_offset
        with pytest.raises(KafkaStorageError):
            plog.copy_to_remote()
        counts = REMOTE_TOPIC_STATS.snapshot()[topic]
        assert counts[RemoteTopicStats.COPY_ERRORS] == 1
        assert counts[RemoteTopicStats.COPY_BYTES] == 0

        os.unlink(root / f"{topic}-0")
        rolled = plog.segments[:-1]
        assert plog.copy_to_remote() == len(rolled)
        counts = REMOTE_TOPIC_STATS.snapshot()[topic]
        assert counts[RemoteTopicStats.COPY_BYTES] == sum(s.size for s in rolled)
        first = rolled[0].size
        plog.delete_old_segments()
        assert plog.read(0, 100_000).region is not None
        counts = REMOTE_TOPIC_STATS.snapshot()[topic]
        assert counts[RemoteTopicStats.FETCH_BYTES] == first
        assert counts[RemoteTopicStats.FETCH_ERRORS] == 0
    finally:
        plog.close()
