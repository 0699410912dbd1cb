"""The on-disk partition log: segments, indexes, recovery, retention, compaction.

Main interfaces: ``PartitionLog.open(directory, LogConfig)``, then
``append`` (write) and ``read`` (a FileRegion for sendfile). See log.py for
the directory layout and the concurrency contract.

The names below load on first use (kafkalite/_lazy.py): every process that
reads a server config imports ``kafkalite.storage.config``, and that must
not load the log (its Cython scanner imports numpy).
"""
from kafkalite._lazy import lazy_exports

__all__ = ["LogConfig", "PartitionLog", "LogAppendInfo", "FetchDataInfo", "FileRegion",
           "LogSegment", "AppendOrigin", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP",
           "MAX_TIMESTAMP"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "kafkalite.storage.config": ("LogConfig",),
    "kafkalite.storage.log": ("EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP",
                              "FetchDataInfo", "LogAppendInfo", "PartitionLog"),
    "kafkalite.storage.producer_state": ("AppendOrigin",),
    "kafkalite.storage.segment": ("FileRegion", "LogSegment"),
})
