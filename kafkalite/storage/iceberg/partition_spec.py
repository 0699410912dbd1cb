"""An Iceberg topic's partition spec: the ``iceberg.partition.spec`` topic
config (Redpanda's ``redpanda.iceberg.partition.spec``), its check, and
pyiceberg's PartitionSpec for the table made for the topic.

    spec      = "(" [ term { "," term } ] ")"
    term      = column | transform "(" column ")"
              | ("bucket" | "truncate") "(" N "," column ")"
    transform = identity | year | month | day | hour | void
    column    = redpanda.partition | redpanda.offset | redpanda.timestamp
              | redpanda.key | value (key_value only)

Redpanda's default, ``(hour(redpanda.timestamp))``, is the spec kafkalite's
tables always had; ``()`` is an unpartitioned table. The columns are those
a table has when it is created: a decoded table (value_schema_id_prefix,
value_schema_latest) starts with ``redpanda`` alone, its value columns
coming with the records, so only ``redpanda.*`` columns partition it. A
table takes the spec when it is created; a later change of the config
leaves an existing table's spec as it is.

The text is checked without pyiceberg (the config check runs wherever a
topic config is); ``partition_spec`` imports it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_PARTITION_SPEC = "(hour(redpanda.timestamp))"
_TIME_TRANSFORMS = ("year", "month", "day", "hour")
_TRANSFORMS = ("identity", "void", *_TIME_TRANSFORMS)
_WIDTH_TRANSFORMS = ("bucket", "truncate")
# the columns a table has at its creation: (Iceberg field id, type)
_COLUMNS = {"redpanda.partition": (3, "int"), "redpanda.offset": (4, "long"),
            "redpanda.timestamp": (5, "timestamptz"), "redpanda.key": (7, "binary")}
_KEY_VALUE_COLUMNS = {**_COLUMNS, "value": (2, "binary")}
_FIRST_FIELD_ID = 1000          # Iceberg's first partition field id
_TERM = re.compile(r"\s*(?:(?P<fn>[a-z]+)\s*\(\s*(?:(?P<n>\d+)\s*,\s*)?(?P<col>[\w.]+)\s*\)"
                   r"|(?P<bare>[\w.]+))\s*")


@dataclass(frozen=True)
class PartitionTerm:
    transform: str              # identity, void, year, month, day, hour, bucket, truncate
    column: str
    width: int | None = None    # bucket's N, truncate's W

    @property
    def name(self) -> str:
        """The partition field's name, as Iceberg names it (redpanda_timestamp_hour)."""
        column = self.column.replace(".", "_")
        suffix = {"identity": "", "void": "_null", "truncate": "_trunc"}.get(
            self.transform, "_" + self.transform)
        return column + suffix


def parse_partition_spec(text: str, key_value: bool = True) -> tuple[PartitionTerm, ...]:
    """The terms of ``text``; ValueError saying what is wrong with it.
    ``key_value``: the table is key_value's (``value`` is a column)."""
    text = text.strip()
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError("a partition spec is a list in parentheses, e.g. "
                         "(hour(redpanda.timestamp)), or () for none")
    body = text[1:-1].strip()
    if not body:
        return ()
    columns = _KEY_VALUE_COLUMNS if key_value else _COLUMNS
    terms = []
    for part in _split(body):
        m = _TERM.fullmatch(part)
        if m is None:
            raise ValueError(f"{part.strip()!r} is not a column or transform(column)")
        fn = m["fn"] or "identity"
        column = m["col"] or m["bare"]
        width = int(m["n"]) if m["n"] is not None else None
        if fn in _WIDTH_TRANSFORMS:
            if not width:
                raise ValueError(f"{fn} takes a positive width first: {fn}(N, column)")
        elif fn not in _TRANSFORMS:
            raise ValueError(f"unknown transform {fn!r} (identity, year, month, day, hour, "
                             f"bucket, truncate, void)")
        elif width is not None:
            raise ValueError(f"{fn} takes one column, no width")
        if column not in columns:
            raise ValueError(f"no column {column!r} in the table as it is created "
                             f"({', '.join(columns)})")
        kind = columns[column][1]
        if fn in _TIME_TRANSFORMS and kind != "timestamptz":
            raise ValueError(f"{fn}({column}): {column} is not a timestamp")
        if fn == "truncate" and kind not in ("int", "long", "binary"):
            raise ValueError(f"truncate({width}, {column}): {column} cannot be truncated")
        terms.append(PartitionTerm(fn, column, width))
    names = [t.name for t in terms]
    if len(set(names)) != len(names):
        raise ValueError("a partition field is given twice")
    return tuple(terms)


def _split(body: str) -> list[str]:
    """``body``'s terms: commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts


def partition_spec(text: str, key_value: bool = True):
    """pyiceberg's PartitionSpec of ``text`` over the table's columns at
    creation (topic_table.iceberg_schema's field ids)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import (BucketTransform, DayTransform, HourTransform,
                                      IdentityTransform, MonthTransform, TruncateTransform,
                                      VoidTransform, YearTransform)
    made = {"identity": IdentityTransform, "void": VoidTransform, "year": YearTransform,
            "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
    fields = []
    for i, term in enumerate(parse_partition_spec(text, key_value)):
        if term.transform == "bucket":
            transform = BucketTransform(term.width)
        elif term.transform == "truncate":
            transform = TruncateTransform(term.width)
        else:
            transform = made[term.transform]()
        fields.append(PartitionField(source_id=_KEY_VALUE_COLUMNS[term.column][0],
                                     field_id=_FIRST_FIELD_ID + i, transform=transform,
                                     name=term.name))
    return PartitionSpec(*fields)
