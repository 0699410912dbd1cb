"""A broker's CheckpointFile: many partitions' checkpoints in one file.

Real logs in a temporary directory: a log opened with a CheckpointFile keeps
its checkpoint there (its own partition.checkpoint only at close), and at
the next open the newer of the two wins; a line of another topic with the
same name (deleted and created again) is ignored; a damaged file costs only
recovery.
"""
import os

from storage_helpers import batch

from kafkalite.storage import PartitionLog
from kafkalite.storage.checkpoint import PARTITION_CHECKPOINT, CheckpointFile, PartitionCheckpoint


def fill(plog, batches: int) -> None:
    for i in range(batches):
        plog.append(batch([b"v%d" % j for j in range(10)]))
        plog.high_watermark = plog.log_end_offset


def open_log(tmp_path, name, store, topic_id="5f6a3b2c-0000-4000-8000-000000000001"):
    directory = str(tmp_path / name)
    store.bind(directory, topic_id)
    return PartitionLog.open(directory, checkpoints=store)


def test_checkpoints_go_to_the_broker_file_and_survive_a_crash(tmp_path):
    path = str(tmp_path / "broker-0.partition-checkpoints")
    store = CheckpointFile(path)
    logs = [open_log(tmp_path, f"t-{i}", store) for i in range(50)]
    fill(logs[7], 3)
    logs[7].delete_records(12)
    for plog in logs:
        plog.maybe_checkpoint()
    store.flush()                         # in the background ...
    store.close()                         # ... and done
    # routine checkpoints go to the broker file; a DeleteRecords makes its
    # new log start durable at once in the partition's own file as well
    # (records it hides may still be in a segment: a crash must not bring
    # them back before the broker file's next write)
    own = [i for i, p in enumerate(logs)
           if os.path.exists(os.path.join(p.directory, PARTITION_CHECKPOINT))]
    assert own == [7]
    assert PartitionCheckpoint.read(logs[7].directory).log_start_offset == 12
    with open(path) as f:
        assert len(f.read().splitlines()) == 51
    # a crash: the logs are never closed; a new broker process reads the file
    again = CheckpointFile(path)
    plog = open_log(tmp_path, "t-7", again)
    assert (plog.log_start_offset, plog.high_watermark, plog.log_end_offset) == (12, 30, 30)
    plog.close()
    again.close()


def test_the_newer_of_the_line_and_the_partition_file_wins(tmp_path):
    path = str(tmp_path / "broker-0.partition-checkpoints")
    store = CheckpointFile(path)
    plog = open_log(tmp_path, "t-0", store)
    fill(plog, 2)
    plog.close()                          # partition.checkpoint: high watermark 20
    store.close()
    store = CheckpointFile(path)
    plog = open_log(tmp_path, "t-0", store)
    assert plog.high_watermark == 20
    fill(plog, 1)
    plog.maybe_checkpoint()
    store.close()                         # the line (30) is newer than the file (20)
    plog = open_log(tmp_path, "t-0", CheckpointFile(path))
    assert plog.high_watermark == 30
    assert PartitionCheckpoint.read(plog.directory).high_watermark == 20


def test_a_line_of_another_topic_id_or_a_damaged_file_is_ignored(tmp_path):
    path = str(tmp_path / "broker-0.partition-checkpoints")
    store = CheckpointFile(path)
    plog = open_log(tmp_path, "t-0", store)
    fill(plog, 2)
    plog.delete_records(15)
    plog.maybe_checkpoint()
    store.close()
    # the topic is deleted and created again: same directory name, new id
    plog.delete()
    fresh = open_log(tmp_path, "t-0", CheckpointFile(path),
                     topic_id="5f6a3b2c-0000-4000-8000-000000000002")
    fill(fresh, 1)
    assert fresh.log_start_offset == 0
    fresh.close()
    with open(path, "w") as f:
        f.write("kafkalite-partition-checkpoints 1\nt-0 garbage\n")
    damaged = CheckpointFile(path)
    plog = open_log(tmp_path, "t-0", damaged, topic_id="5f6a3b2c-0000-4000-8000-000000000002")
    assert (plog.log_start_offset, plog.high_watermark) == (0, 10)
    plog.close()
