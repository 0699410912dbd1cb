"""The CDC source's records as a batch's keys and values (cdc.py): each
change held as pgoutput's column texts, not decoded, in a
JsonStructValues sequence. The JsonConverter -- Debezium's usual
configuration -- has them written as its bytes by one C loop
(kafkalite._ext.cdc_envelope: the column texts straight to JSON, the
schema part of the envelope the converter's, the constant parts of
``source`` made here once per relation); anything else that reads them (a
transform, another converter, the per-record path) gets the dicts the
Python path decodes (cdc.py's _ValueLoader and ``source_block``), made
then. Both are the same records: the tests compare their bytes.

A change (kafkalite._ext.cdc_envelope.CHANGE): ``(op, before,
before_key_only, after, ts_ms, snapshot, txId, lsn, lsn_commit, change)``,
``before``/``after`` a row's texts (bytes, None, or UNCHANGED) or None.

Who calls: the task's poll builds them, the worker's thread converts them.
"""
from __future__ import annotations

import json

from kafkalite.connect.converters import JsonStructValues, struct_writer
from kafkalite.connect.data import Field, Schema

# pgoutput's marker of an unchanged TOASTed value (sends no text for it)
UNCHANGED = object()

# The source block of Debezium's PostgreSQL connector, field for field in its
# order (PostgresSourceInfoStructMaker over the common SourceInfo of Debezium
# 2.7): consumers of Debezium's events read ``sequence`` to order and dedupe
# changes, ``version`` to know the format, ``ts_us``/``ts_ns`` for the commit
# time. ``xmin`` is null, as Debezium's with xmin.fetch.interval.ms at its
# default 0. Then kafkalite's two of its own, which its offsets are made of:
# ``lsn_commit`` (the commit LSN of the change's transaction) and ``change``
# (the change's index in it).
SOURCE_SCHEMA = Schema("struct", False, "io.debezium.connector.postgresql.Source", fields=(
    Field("version", Schema.STRING), Field("connector", Schema.STRING),
    Field("name", Schema.STRING), Field("ts_ms", Schema.INT64),
    Field("snapshot", Schema.OPTIONAL_STRING), Field("db", Schema.STRING),
    Field("sequence", Schema.OPTIONAL_STRING), Field("ts_us", Schema.OPTIONAL_INT64),
    Field("ts_ns", Schema.OPTIONAL_INT64), Field("schema", Schema.STRING),
    Field("table", Schema.STRING), Field("txId", Schema.OPTIONAL_INT64),
    Field("lsn", Schema.OPTIONAL_INT64), Field("xmin", Schema.OPTIONAL_INT64),
    Field("lsn_commit", Schema.OPTIONAL_INT64), Field("change", Schema.OPTIONAL_INT32)))
# the Debezium release whose event format the records follow, in ``source.version``
# (Debezium puts its own version there; a consumer checking it reads a release
# whose fields these are)
DEBEZIUM_FORMAT_VERSION = "2.7.4.Final"
# the source fields of each change, in SOURCE_SCHEMA's order: the C writer puts each
# between the constant parts (source_pieces)
_VARIABLE = ("ts_ms", "snapshot", "sequence", "ts_us", "ts_ns", "txId", "lsn", "lsn_commit",
             "change")


def _json_lsn(lsn) -> str:
    return "null" if lsn is None else f'"{lsn}"'


def source_block(name: str, ts_ms: int, snapshot: str, db: str, schema: str, table: str,
                 tx_id, lsn, lsn_commit, change) -> dict:
    """A record's ``source`` (SOURCE_SCHEMA). ``sequence`` is Debezium's JSON
    array of two LSNs as strings, [the last commit's, the change's]: here the
    change's own transaction's commit LSN, which orders changes as Debezium's
    does (a snapshot row's is null, as Debezium's before its first commit)."""
    # json.dumps of the two, written out: this runs once per change
    sequence = f"[{_json_lsn(lsn_commit)},{_json_lsn(lsn)}]"
    return {"version": DEBEZIUM_FORMAT_VERSION, "connector": "postgresql", "name": name,
            "ts_ms": ts_ms, "snapshot": snapshot, "db": db, "sequence": sequence,
            "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000, "schema": schema,
            "table": table, "txId": tx_id, "lsn": lsn, "xmin": None,
            "lsn_commit": lsn_commit, "change": change}


def source_pieces(name: str, db: str, schema: str, table: str) -> list[bytes]:
    """The JSON of a relation's source block around its changes' own fields
    (_VARIABLE): ten pieces, the C writer's ``source_pieces``."""
    esc = json.encoder.encode_basestring_ascii
    const = {"version": DEBEZIUM_FORMAT_VERSION, "connector": "postgresql", "name": name,
             "db": db, "schema": schema, "table": table, "xmin": None}
    pieces, cur = [], ""
    for i, f in enumerate(SOURCE_SCHEMA.fields):
        cur += ("{" if i == 0 else ",") + esc(f.name) + ":"
        if f.name in _VARIABLE:
            pieces.append(cur.encode())
            cur = ""
        else:
            cur += "null" if const[f.name] is None else esc(const[f.name])
    pieces.append((cur + "}").encode())
    if [f.name for f in SOURCE_SCHEMA.fields if f.name in _VARIABLE] != list(_VARIABLE):
        raise AssertionError("SOURCE_SCHEMA's variable fields out of the writer's order")
    return pieces


class ChangeSource:
    """What a task's changes share: the source's name (``topic.prefix``),
    the database, the value loader (cdc._ValueLoader) and the JSON writer
    of each relation, made at its first JSON batch. ``fault``
    ``envelope-float-as-text`` (tests only, KAFKALITE_CDC_FAULT) plants the
    fault the writer's differential test must catch: float columns written
    as JSON strings."""

    def __init__(self, name: str, db: str, loader, fault: str = ""):
        self.name, self.db, self.loader, self.fault = name, db, loader, fault
        self._writers: dict = {}        # id(relation) -> (relation, EnvelopeWriter)

    def writer(self, rel):
        hit = self._writers.get(id(rel))
        if hit is None or hit[0] is not rel:
            if len(self._writers) > 1000:
                self._writers.clear()
            hit = self._writers[id(rel)] = (rel, self._make_writer(rel))
        return hit[1]

    def _make_writer(self, rel):
        from kafkalite._ext.cdc_envelope import KIND_FLOAT, KIND_TEXT, EnvelopeWriter
        esc = json.encoder.encode_basestring_ascii
        names, loaders = self.loader.plan(rel)
        fallbacks, unchanged = [], []
        for (name, oid), schema, load in zip(rel.columns, rel.field_schemas, loaders):
            # a struct of the one field, written by the converter's own writer: the
            # field's text is what it writes of the value between '{"name":' and '}'
            write = struct_writer(Schema("struct", True, None, fields=(Field(name, schema),)))
            cut = len(esc(name)) + 2
            fallbacks.append(lambda raw, w=write, c=cut, n=name, ld=load: w({n: ld(raw)})[c:-1])
            unchanged.append(write({name: self.loader.load(oid, schema, UNCHANGED)})[cut:-1]
                             .encode())
        index = {n: i for i, n in enumerate(names)}
        kinds = rel.kinds
        if self.fault == "envelope-float-as-text":
            kinds = [KIND_TEXT if k == KIND_FLOAT else k for k in kinds]
        return EnvelopeWriter(
            kinds, [f"{esc(n)}:".encode() for n in names],
            fallbacks, unchanged, [index[n] for n in rel.key_names],
            source_pieces(self.name, self.db, rel.schema, rel.table), UNCHANGED)

    def value(self, rel, change) -> dict | None:
        """The Python path's value of a change (None: a delete's tombstone)."""
        if change is None:
            return None
        op, before, key_only, after, ts_ms, snapshot, xid, lsn, lsn_commit, i = change
        row = self.loader.row
        return {"before": None if before is None else
                row(rel, before, only=rel.key_names if key_only else None),
                "after": None if after is None else row(rel, after),
                "source": source_block(self.name, ts_ms, snapshot, self.db, rel.schema,
                                       rel.table, xid, lsn, lsn_commit, i),
                "op": op, "ts_ms": ts_ms}

    def key(self, rel, change) -> dict:
        """The Python path's key of a change: its key columns of the new row
        (the old of a delete)."""
        row = self.loader.row(rel, change[1] if change[0] == "d" else change[3],
                              only=rel.key_names)
        return {n: row[n] for n in rel.key_names}


class ChangeValues(JsonStructValues):
    """A batch's values (rel.envelope): one change, or None (a delete's
    tombstone), each."""

    def __init__(self, source: ChangeSource, rel, changes: list):
        self.source, self.rel, self.changes = source, rel, changes
        self.schema = rel.envelope
        self._dicts = None

    def json_payloads(self, head: bytes, tail: bytes) -> list:
        return self.source.writer(self.rel).envelopes(self.changes, head, tail)

    def without(self, indexes: set) -> "ChangeValues":
        return type(self)(self.source, self.rel,
                          [c for i, c in enumerate(self.changes) if i not in indexes])

    def _convert(self):
        return self.source.value        # (rel, change) -> the change's envelope dict

    def _list(self) -> list:
        if self._dicts is None:
            convert, rel = self._convert(), self.rel
            self._dicts = [convert(rel, c) for c in self.changes]
        return self._dicts

    def __len__(self):
        return len(self.changes)

    def __getitem__(self, i):
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())


class ChangeKeys(ChangeValues):
    """A batch's keys (rel.key_schema): the key of each change (a
    tombstone's: its delete's)."""

    def __init__(self, source: ChangeSource, rel, changes: list):
        super().__init__(source, rel, changes)
        self.schema = rel.key_schema

    def json_payloads(self, head: bytes, tail: bytes) -> list:
        return self.source.writer(self.rel).keys(self.changes, head, tail)

    def _convert(self):
        return self.source.key
