"""A segment's offset lookup behind its in-memory tail (kafkalite/storage/segment.py):
what it reads from the file to find the batch holding an offset, and that an
index entry found on disk is still checked against the batch it points at."""
import os
import struct

from kafkalite.storage.segment import BATCH_HEADER_SIZE, _TAIL_BATCHES
from storage_helpers import batch, read_all

BATCHES = 200
VALUE = b"x" * 1024


def fill(plog, n=BATCHES):
    """``n`` batches of two 1 KB records: offsets 2i and 2i + 1 in batch i."""
    for i in range(n):
        plog.append(batch([VALUE, VALUE], timestamp=1_000 + i))


def counting_preads(monkeypatch) -> list:
    """The (size asked, bytes read) of every os.pread from now on."""
    calls = []
    real = os.pread

    def pread(fd, n, offset):
        data = real(fd, n, offset)
        calls.append((n, len(data)))
        return data
    monkeypatch.setattr(os, "pread", pread)
    return calls


def test_a_read_behind_the_tail_reads_one_short_header_chunk(open_log, monkeypatch):
    # A consumer behind the batches the active segment keeps in memory (a
    # lagging one in issue 72's 100-partition workload) looks its batch up
    # in the index for each partition it reads. The index entries this
    # process appended point at batches it wrote: no header read to check
    # them, and the batch is found in the first index.interval.bytes or so,
    # not a 64 KB chunk (the old code: [(61, 61), (65536, 65536)] a read).
    plog = open_log()
    fill(plog)
    interval = plog.config.index_interval_bytes
    expected = {}
    for offset in (10, 101, 250, 2 * (BATCHES - 3 * _TAIL_BATCHES)):
        expected[offset] = plog.read(offset, 1 << 20).region
    calls = counting_preads(monkeypatch)
    for offset, region in expected.items():
        del calls[:]
        found = plog.read(offset, 1 << 20).region
        assert (found.position, found.length) == (region.position, region.length)
        assert len(calls) == 1, f"offset {offset}: preads {calls}"
        assert calls[0][0] <= 2 * interval + BATCH_HEADER_SIZE, f"offset {offset}: {calls}"
    monkeypatch.undo()
    assert [r[0] for r in read_all(plog)] == list(range(2 * BATCHES))


def test_an_index_entry_found_on_disk_is_checked_against_its_batch(open_log, tmp_path):
    # An entry of the index file as a crash may leave it (in order, inside
    # the log, but pointing one batch past the batch ending at its offset)
    # is caught on the lookup that uses it, the index rebuilt, and the read
    # starts at the right batch: trusting this process's own entries must
    # not extend to those found on disk (unchecked, the read at that
    # offset would start a batch late and skip it).
    plog = open_log()
    fill(plog)
    plog.close()
    index_path = next(str(p) for p in (tmp_path / "t-0").iterdir() if p.suffix == ".index")
    with open(index_path, "r+b") as f:
        entries = f.read()
        rel1, pos1 = struct.unpack_from(">ii", entries, 8)
        rel2, pos2 = struct.unpack_from(">ii", entries, 16)
        _, pos3 = struct.unpack_from(">ii", entries, 24)
        size = (pos2 - pos1) // ((rel2 - rel1) // 2)     # every batch is the same size
        assert pos2 + size < pos3
        f.seek(16)
        f.write(struct.pack(">ii", rel2, pos2 + size))
    plog = open_log()
    assert plog.read(rel2, 1).region.position == pos2
    assert read_all(plog, start=rel2)[0][0] == rel2
    assert [r[0] for r in read_all(plog)] == list(range(2 * BATCHES))
