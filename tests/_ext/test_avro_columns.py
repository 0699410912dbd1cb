"""kafkalite._ext.avro_columns: flat Avro records read into columns, here
with ``skip``: each payload read past its slot's first bytes (Confluent's
5-byte wire header), as SQL over a topic reads its value column in place
(kafkalite/sql/values.py), checked against fastavro's reading."""
import io

import fastavro
import numpy as np

from kafkalite._ext.avro_columns import decode_flat

SCHEMA = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
    {"name": "n", "type": "long"}, {"name": "s", "type": ["null", "string"]}]})


def slots(records, header: bytes):
    """(data, offsets) of ``header`` + each record's encoding, back to back."""
    parts = []
    for r in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, SCHEMA, r)
        parts.append(header + out.getvalue())
    offsets = np.cumsum([0] + [len(p) for p in parts]).astype(np.int32)
    return np.frombuffer(b"".join(parts), np.uint8), offsets


def test_payloads_past_a_wire_header_read_as_fastavro_reads_them():
    records = [{"n": i * -7919, "s": None if i % 3 == 0 else "é" * (i % 5)} for i in range(200)]
    data, offsets = slots(records, b"\0\0\0\0\x2a")
    (ints, _), ((text_at, text), valid) = decode_flat(data, offsets, [0, 4], [-1, 0], 5)
    assert ints.tolist() == [r["n"] for r in records]
    got = [None if not v else bytes(text[text_at[i]:text_at[i + 1]]).decode()
           for i, v in enumerate(valid)]
    assert got == [r["s"] for r in records]


def test_a_slot_shorter_than_the_skip_or_a_payload_cut_short_is_refused():
    data, offsets = slots([{"n": 1, "s": "a"}, {"n": 2, "s": "b"}], b"\0\0\0\0\x2a")
    assert decode_flat(data, offsets, [0, 4], [-1, 0], 5) is not None
    # read from the slot's start, the header's bytes are read as the record's
    assert decode_flat(data, offsets, [0, 4], [-1, 0]) is None
    short = np.array([0, 3, len(data)], np.int32)          # a 3-byte slot, a 5-byte skip
    assert decode_flat(data, short, [0, 4], [-1, 0], 5) is None
    cut = offsets.copy()
    cut[1] -= 1                                            # the first payload a byte short
    assert decode_flat(data, cut, [0, 4], [-1, 0], 5) is None
