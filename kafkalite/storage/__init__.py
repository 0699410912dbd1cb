"""The on-disk partition log: segments, indexes, recovery, retention, compaction.

Main interfaces: ``PartitionLog.open(directory, LogConfig)``, then
``append`` (write) and ``read`` (a FileRegion for sendfile). See log.py for
the directory layout and the concurrency contract.
"""
from kafkalite.storage.config import LogConfig
from kafkalite.storage.log import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
                                   FetchDataInfo, LogAppendInfo, PartitionLog)
from kafkalite.storage.producer_state import AppendOrigin
from kafkalite.storage.segment import FileRegion, LogSegment

__all__ = ["LogConfig", "PartitionLog", "LogAppendInfo", "FetchDataInfo", "FileRegion",
           "LogSegment", "AppendOrigin", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP",
           "MAX_TIMESTAMP"]
