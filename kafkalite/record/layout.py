"""The RecordBatch v2 header layout, for Python that reads headers itself.

Every offset and size comes from the one definition, ``ext/wire.h``,
through the compiled ``kafkalite._ext.layout``. ``HEADER`` unpacks the
fixed part of a batch header up to the producer fields (baseOffset,
batchLength, partitionLeaderEpoch, magic, crc, attributes,
lastOffsetDelta, baseTimestamp, maxTimestamp); ``PRODUCER`` the producer
id, epoch and base sequence at ``OFF_PRODUCER_ID``. Both formats are
checked against the offsets when this module is imported.
"""
from __future__ import annotations

import struct

from kafkalite._ext.layout import *  # noqa: F401,F403  (the offsets, sizes and bits)
from kafkalite._ext.layout import (OFF_BASE_OFFSET, OFF_BASE_TIMESTAMP, OFF_CRC, OFF_LEADER_EPOCH,
                                   OFF_LENGTH, OFF_MAGIC, OFF_MAX_TIMESTAMP,
                                   OFF_LAST_OFFSET_DELTA, OFF_ATTRIBUTES, OFF_PRODUCER_ID,
                                   OFF_PRODUCER_EPOCH, OFF_BASE_SEQUENCE, OFF_RECORDS_COUNT,
                                   BATCH_HEADER_SIZE)

HEADER = struct.Struct(">qiibIhiqq")
PRODUCER = struct.Struct(">qhi")


def _check() -> None:
    at = 0
    for offset, code in ((OFF_BASE_OFFSET, "q"), (OFF_LENGTH, "i"), (OFF_LEADER_EPOCH, "i"),
                         (OFF_MAGIC, "b"), (OFF_CRC, "I"), (OFF_ATTRIBUTES, "h"),
                         (OFF_LAST_OFFSET_DELTA, "i"), (OFF_BASE_TIMESTAMP, "q"),
                         (OFF_MAX_TIMESTAMP, "q")):
        assert at == offset, f"HEADER has a field at byte {at}; wire.h says {offset}"
        at += struct.calcsize(">" + code)
    assert HEADER.size == OFF_PRODUCER_ID
    assert (OFF_PRODUCER_EPOCH - OFF_PRODUCER_ID, OFF_BASE_SEQUENCE - OFF_PRODUCER_ID) == (8, 10)
    assert PRODUCER.size == OFF_RECORDS_COUNT - OFF_PRODUCER_ID
    assert OFF_RECORDS_COUNT + 4 == BATCH_HEADER_SIZE


_check()
