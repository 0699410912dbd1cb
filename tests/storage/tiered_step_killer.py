"""Child process for the offload's kill-at-each-step test: open a filled
tiered partition log, copy its rolled segments to a local-directory store
and delete the local copies, killing itself (SIGKILL, as kill -9) at the
``<kill at>``-th call of a step that writes to disk or makes a write
durable (a byte copy, a write, an fsync, a rename, a link, an unlink), on
whichever thread makes it. Without a kill (a negative number) it prints
how many steps the whole offload took.

usage: tiered_step_killer.py <partition dir> <store dir> <kill at>
"""
import os
import signal
import sys
import threading

from kafkalite.storage import PartitionLog
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage

from tiered_copier import CONFIG

STEPS = ("copy_file_range", "write", "fsync", "rename", "replace", "link", "unlink")


def main():
    directory, store, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    plog = PartitionLog.open(directory, CONFIG, remote_storage=LocalDirectoryRemoteStorage(store))
    lock = threading.Lock()
    count = [0]

    def planted(name, real):
        def step(*args, **kwargs):
            with lock:
                count[0] += 1
                if count[0] - 1 == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return step

    for name in STEPS:
        setattr(os, name, planted(name, getattr(os, name)))
    plog.copy_to_remote()
    plog.delete_old_segments()
    plog.close()
    sys.stdout.buffer.write(b"steps %d\n" % count[0])


if __name__ == "__main__":
    main()
