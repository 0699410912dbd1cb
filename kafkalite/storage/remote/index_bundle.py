"""A remote segment's indexes in one object: the S3 store's ``indexes``.

One PUT for what were five (offset, time and transaction indexes, producer
snapshot, leader epochs; s3_storage.py says why). The layout, big-endian:

    b"KLIB" | version (1 byte, 1) | count (1 byte)
    count x [ name length (1 byte) | name (ASCII: Kafka's IndexType) |
              start (8 bytes) | length (8 bytes) ]
    the parts, where their starts say (from the object's first byte)

The table comes first, so one ranged GET of the object's head reads it (and
with it, for segments of ordinary size, every part).

Who may call: the remote stores, on any thread (pure functions).
"""
from __future__ import annotations

import struct

MAGIC = b"KLIB"
VERSION = 1
_ENTRY = struct.Struct(">QQ")


def build(parts: list[tuple[str, bytes]]) -> bytes:
    """The object holding ``parts`` ((name, bytes), at most 255)."""
    if len(parts) > 255:
        raise ValueError(f"{len(parts)} parts: an index bundle holds at most 255")
    names = [name.encode("ascii") for name, _ in parts]
    header = 4 + 2 + sum(1 + len(n) + _ENTRY.size for n in names)
    table, start = [MAGIC, bytes((VERSION, len(parts)))], header
    for name, (_, data) in zip(names, parts):
        table += [bytes((len(name),)), name, _ENTRY.pack(start, len(data))]
        start += len(data)
    return b"".join(table + [bytes(data) for _, data in parts])


def table(head: bytes) -> dict[str, tuple[int, int]]:
    """name -> (start, length) from the first bytes of a bundle (its table
    whole); ValueError for anything else."""
    if head[:4] != MAGIC:
        raise ValueError("not an index bundle (no KLIB magic)")
    if len(head) < 6 or head[4] != VERSION:
        raise ValueError(f"index bundle version {head[4] if len(head) > 4 else '?'} "
                         f"is not {VERSION}")
    out, at = {}, 6
    for _ in range(head[5]):
        if at >= len(head):
            raise ValueError("index bundle table cut short")
        size = head[at]
        end = at + 1 + size + _ENTRY.size
        if end > len(head):
            raise ValueError("index bundle table cut short")
        name = head[at + 1:at + 1 + size].decode("ascii", "replace")
        out[name] = _ENTRY.unpack_from(head, at + 1 + size)
        at = end
    return out
