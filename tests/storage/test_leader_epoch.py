"""storage/leader_epoch.py: the epoch an offset was written in (what a
ListOffsets answer gives beside an offset)."""
from kafkalite.storage.leader_epoch import LeaderEpochFileCache


def test_the_epoch_of_an_offset_is_the_latest_starting_at_or_before_it(tmp_path):
    cache = LeaderEpochFileCache(str(tmp_path))
    assert cache.epoch_for(0) == -1                     # no epoch yet
    cache.assign_all([(2, 10), (3, 25), (7, 40)])
    assert [cache.epoch_for(o) for o in (0, 9, 10, 24, 25, 39, 40, 10**9)] == \
        [-1, -1, 2, 2, 3, 3, 7, 7]
    # read back from its checkpoint, and after the log start moved up
    reopened = LeaderEpochFileCache(str(tmp_path))
    reopened.truncate_from_start(30)
    assert [reopened.epoch_for(o) for o in (29, 30, 39, 40)] == [-1, 3, 3, 7]
