"""Serdes: how a topic's key and value bytes become an Arrow column and back.

A Serde works on whole columns: ``deserialize`` takes the consumer's binary
column (null: no key / a tombstone) and returns the column the topology sees;
``serialize`` takes such a column and returns a binary one for the producer.
Nulls stay nulls both ways (Kafka's serdes map null to null).

bytes, string and long (8-byte big-endian, Kafka's LongSerde) are vectorised
(pyarrow casts and numpy views, no Python object per record). json is the
slow serde: one ``json.loads`` / ``json.dumps`` per record, values become
Arrow structs, lists or scalars by pyarrow's inference; so are avro (a given
schema, fastavro; optionally Confluent's framing with a schema id) and
protobuf (a given message class; messages as dicts). avro and protobuf
also speak Confluent's wire format through a schema registry
(``schema_registry_url=``), by confluent-kafka's own serializers.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class SerializationException(Exception):
    """Bytes that a serde cannot read (Kafka Streams' SerializationException)."""


class Serde:
    """A serializer/deserializer pair over Arrow columns. ``arrow_type`` is
    the deserialized column's type where fixed (None: inferred)."""

    name = "bytes"
    arrow_type: pa.DataType | None = pa.binary()

    def deserialize(self, data: pa.Array) -> pa.Array:
        return data

    def serialize(self, column: pa.Array) -> pa.Array:
        if column.type != pa.binary():
            raise SerializationException(
                f"the bytes serde writes binary columns, not {column.type}: give to() a serde "
                f"for this column (Produced.with_(key_serde, value_serde))")
        return column

    def to_column(self, objects: list) -> pa.Array:
        """A per-record function's results as this serde's column."""
        return pa.array(objects, self.arrow_type) if self.arrow_type is not None \
            else pa.array(objects)

    def __repr__(self):
        return f"Serdes.{self.name}()"


class _StringSerde(Serde):
    name = "string"
    arrow_type = pa.string()

    def deserialize(self, data):
        try:
            return data.cast(pa.string())
        except pa.ArrowInvalid as exc:
            raise SerializationException(f"not UTF-8: {exc}") from None

    def serialize(self, column):
        if column.type not in (pa.string(), pa.large_string(), pa.binary()):
            column = column.cast(pa.string())
        return column.cast(pa.binary())


class _LongSerde(Serde):
    name = "long"
    arrow_type = pa.int64()

    def deserialize(self, data):
        if len(data) == 0:
            return pa.array([], pa.int64())
        lengths = pc.binary_length(data)
        if pc.any(pc.not_equal(lengths, 8)).as_py():
            raise SerializationException("a long is 8 bytes; got a value of another size")
        fixed = data.cast(pa.binary(8))
        view = np.frombuffer(fixed.buffers()[1], dtype=">i8", count=len(fixed),
                             offset=fixed.offset * 8).astype(np.int64)
        return pa.array(view, pa.int64(), mask=pc.is_null(data).to_numpy(zero_copy_only=False)
                        if data.null_count else None)

    def serialize(self, column):
        column = column.cast(pa.int64())
        raw = column.fill_null(0).to_numpy().astype(">i8").tobytes()
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(column),
                                                     [None, pa.py_buffer(raw)])
        out = fixed.cast(pa.binary())
        if column.null_count:
            out = pc.if_else(pc.is_valid(column), out, pa.scalar(None, pa.binary()))
        return out


class _JsonSerde(Serde):
    name = "json"
    arrow_type = None

    def deserialize(self, data):
        try:
            return pa.array([None if v is None else json.loads(v) for v in data.to_pylist()])
        except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SerializationException(f"not JSON this serde can hold: {exc}") from None

    def serialize(self, column):
        return pa.array([None if v is None else json.dumps(v, separators=(",", ":")).encode()
                         for v in column.to_pylist()], pa.binary())


class _AvroSerde(Serde):
    """Avro binary with a given schema (fastavro), one record per value;
    with ``schema_id`` Confluent's wire format (magic byte 0, the 4-byte
    schema id, then the Avro binary), whose id is checked on read. Values
    are what fastavro reads (records as dicts: Arrow structs). Per record:
    the slow path, like JSON."""

    name = "avro"
    arrow_type = None

    def __init__(self, schema, schema_id: int | None = None):
        import fastavro
        self._fastavro = fastavro
        self.schema = fastavro.parse_schema(json.loads(schema) if isinstance(schema, str)
                                            else schema)
        self.prefix = b"" if schema_id is None else b"\0" + int(schema_id).to_bytes(4, "big")

    def deserialize(self, data):
        import io
        read, schema, prefix = self._fastavro.schemaless_reader, self.schema, self.prefix
        out = []
        for v in data.to_pylist():
            if v is None:
                out.append(None)
                continue
            if prefix and v[:5] != prefix:
                raise SerializationException(f"not Avro of schema id "
                                             f"{int.from_bytes(prefix[1:], 'big')}: {v[:5]!r}")
            try:
                out.append(read(io.BytesIO(v[len(prefix):]), schema, None))
            except Exception as exc:     # noqa: BLE001 - fastavro raises many kinds
                raise SerializationException(f"not Avro of this schema: {exc!r}") from None
        try:
            return pa.array(out)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SerializationException(f"Avro values Arrow cannot hold: {exc}") from None

    def serialize(self, column):
        import io
        write, schema, prefix = self._fastavro.schemaless_writer, self.schema, self.prefix
        out = []
        for v in column.to_pylist():
            if v is None:
                out.append(None)
                continue
            buf = io.BytesIO()
            buf.write(prefix)
            try:
                write(buf, schema, v)
            except Exception as exc:     # noqa: BLE001
                raise SerializationException(f"{v!r} does not fit the Avro schema: "
                                             f"{exc!r}") from None
            out.append(buf.getvalue())
        return pa.array(out, pa.binary())


class _ProtobufSerde(Serde):
    """Protocol Buffers with a given message class (generated by protoc, or
    built from a descriptor): values are the messages as dicts (field names
    as in the .proto; Arrow structs). Per record: the slow path."""

    name = "protobuf"
    arrow_type = None

    def __init__(self, message_class):
        from google.protobuf import json_format
        self.message_class = message_class
        self._to_dict = lambda m: json_format.MessageToDict(
            m, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        self._parse = json_format.ParseDict

    def deserialize(self, data):
        from google.protobuf.message import DecodeError
        out = []
        for v in data.to_pylist():
            if v is None:
                out.append(None)
                continue
            try:
                out.append(self._to_dict(self.message_class.FromString(v)))
            except DecodeError as exc:
                raise SerializationException(f"not a {self.message_class.__name__}: "
                                             f"{exc}") from None
        return pa.array(out)

    def serialize(self, column):
        from google.protobuf.json_format import ParseError
        out = []
        for v in column.to_pylist():
            if v is None:
                out.append(None)
                continue
            try:
                out.append(self._parse(v, self.message_class()).SerializeToString())
            except (ParseError, TypeError, AttributeError) as exc:
                raise SerializationException(f"{v!r} is not a "
                                             f"{self.message_class.__name__}: {exc}") from None
        return pa.array(out, pa.binary())


class _RegistrySerde(Serde):
    """Confluent's wire format through a schema registry (kafkalite's or
    any with Confluent's API), by confluent-kafka's own serializer and
    deserializer objects (AvroSerializer/AvroDeserializer,
    ProtobufSerializer/ProtobufDeserializer), so what a topology writes is
    what confluent-kafka and Confluent's Java serdes read, and the other way
    round. Serializing registers the schema under ``subject`` (or looks it
    up, or takes the subject's latest: Confluent's ``auto.register.schemas``
    and ``use.latest.version``); deserializing fetches each writer's schema
    by the id in the record (cached). A serde has no topic: the subject is
    given (Confluent's TopicNameStrategy names it ``<topic>-value``).
    ``to_value``/``from_value``: the serializer's objects <-> the column's
    (Protobuf messages <-> dicts). Per record: the slow path."""

    arrow_type = None

    def __init__(self, name, make_serializer, make_deserializer, url, subject,
                 registry_config, auto_register, use_latest, to_value, from_value):
        from confluent_kafka.schema_registry import SchemaRegistryClient
        self.name, self.subject = name, subject
        self.registry = SchemaRegistryClient({**(registry_config or {}), "url": url})
        conf = {"subject.name.strategy": lambda ctx, record_name: subject,
                "auto.register.schemas": bool(auto_register),
                "use.latest.version": bool(use_latest)}
        self._make_serializer = lambda: make_serializer(self.registry, conf)
        self._serializer = None         # made at the first serialize: it may need the subject
        self._deserializer = make_deserializer(self.registry, {
            "subject.name.strategy": lambda ctx, record_name: None})
        self._to_value, self._from_value = to_value, from_value

    def deserialize(self, data):
        from confluent_kafka.serialization import MessageField, SerializationContext
        ctx = SerializationContext(self.subject, MessageField.VALUE)
        out = []
        for v in data.to_pylist():
            if v is None:
                out.append(None)
                continue
            if len(v) < 5 or v[0] != 0:
                raise SerializationException(f"not Confluent's wire format (magic byte 0, a "
                                             f"schema id): {v[:5]!r}")
            try:
                out.append(self._to_value(self._deserializer(v, ctx)))
            except Exception as exc:     # noqa: BLE001 - an unknown id, bytes of another schema
                raise SerializationException(
                    f"not {self.name} of schema id {int.from_bytes(v[1:5], 'big')}: "
                    f"{exc}") from None
        try:
            return pa.array(out)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SerializationException(f"{self.name} values Arrow cannot hold: "
                                         f"{exc}") from None

    def serialize(self, column):
        from confluent_kafka.serialization import MessageField, SerializationContext
        if self.subject is None:
            raise SerializationException(f"Serdes.{self.name}(schema_registry_url=...) writes "
                                         f"under a subject: give subject=")
        if self._serializer is None:
            self._serializer = self._make_serializer()
        ctx = SerializationContext(self.subject, MessageField.VALUE)
        out = []
        for v in column.to_pylist():
            if v is None:
                out.append(None)
                continue
            try:
                out.append(self._serializer(self._from_value(v), ctx))
            except Exception as exc:     # noqa: BLE001 - a value its schema refuses, a registry's no
                raise SerializationException(f"{v!r} cannot be written as {self.name} under "
                                             f"{self.subject}: {exc}") from None
        return pa.array(out, pa.binary())


def _avro_registry_serde(schema, url, subject, registry_config, auto_register, use_latest):
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    text = None if schema is None else schema if isinstance(schema, str) else json.dumps(schema)
    return _RegistrySerde(
        "avro", lambda registry, conf: AvroSerializer(registry, text, conf=conf),
        # the given schema, if any, is the reader's (Avro's schema resolution)
        lambda registry, conf: AvroDeserializer(registry, text, conf=conf),
        url, subject, registry_config, auto_register, use_latest,
        lambda v: v, lambda v: v)


def _protobuf_registry_serde(message_class, url, subject, registry_config, auto_register,
                             use_latest):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import json_format
    return _RegistrySerde(
        "protobuf", lambda registry, conf: ProtobufSerializer(
            message_class, registry, {**conf, "use.deprecated.format": False}),
        lambda registry, conf: ProtobufDeserializer(
            message_class, {**conf, "use.deprecated.format": False}, registry),
        url, subject, registry_config, auto_register, use_latest,
        lambda m: json_format.MessageToDict(m, preserving_proto_field_name=True,
                                            always_print_fields_with_no_presence=True),
        lambda d: json_format.ParseDict(d, message_class()))


class _StructSerde(Serde):
    """Structs of ``arrow_type`` (fields int64, float64, bool or string), as
    aggregate_columns' window stores keep them: per field a presence byte
    (0: null) then 8 bytes big-endian (int64, float64), 1 byte (bool) or a
    4-byte length and UTF-8 bytes (string). Written a column at a time (a
    commit's changelog: the hot path); read back a record at a time (a
    restore)."""

    name = "struct"

    def __init__(self, arrow_type: pa.StructType):
        self.arrow_type = arrow_type
        self.fields = [(f.name, f.type) for f in arrow_type]
        bad = [t for _, t in self.fields if t not in (pa.int64(), pa.float64(), pa.bool_(),
                                                        pa.string())]
        if bad:
            raise ValueError(f"a struct serde's fields are int64, float64, bool or string, "
                             f"not {bad[0]}")

    def serialize(self, column):
        parts = []
        for name, t in self.fields:
            field = column.field(name)
            parts.append(pc.if_else(pc.is_valid(field), pa.scalar(b"\1"), pa.scalar(b"\0")))
            if t == pa.string():
                parts.append(_fixed(pc.binary_length(field.cast(pa.binary())).fill_null(0)
                                    .to_numpy().astype(">i4"), 4))
                parts.append(field.fill_null("").cast(pa.binary()))
            else:
                raw = field.fill_null(False if t == pa.bool_() else 0).to_numpy(
                    zero_copy_only=False).astype({pa.int64(): ">i8", pa.float64(): ">f8",
                                                  pa.bool_(): "u1"}[t])
                parts.append(_fixed(raw, raw.itemsize))
        out = pc.binary_join_element_wise(*parts, b"")
        if column.null_count:
            out = pc.if_else(pc.is_valid(column), out, pa.scalar(None, pa.binary()))
        return out

    def deserialize(self, data):
        return pa.array([None if v is None else self._one(v) for v in data.to_pylist()],
                        self.arrow_type)

    def _one(self, v: bytes) -> dict:
        out, at = {}, 0
        for name, t in self.fields:
            present, at = v[at], at + 1
            if t == pa.string():
                n = struct.unpack_from(">i", v, at)[0]
                value, at = v[at + 4:at + 4 + n].decode(), at + 4 + n
            else:
                fmt = {pa.int64(): ">q", pa.float64(): ">d", pa.bool_(): "?"}[t]
                value, at = struct.unpack_from(fmt, v, at)[0], at + struct.calcsize(fmt)
            out[name] = value if present else None
        return out


def _fixed(raw: np.ndarray, width: int) -> pa.Array:
    """A numpy array's rows of ``width`` bytes as a binary column."""
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(raw), [
        None, pa.py_buffer(raw.tobytes())]).cast(pa.binary())


class _TypedSerde(Serde):
    """The default serde of repartition topics when the DSL was given none:
    a one-byte tag naming the inner serde (B bytes, S string, L long, J json),
    then its bytes, so that the task reading the topic (perhaps in another
    instance) decodes what the writing task chose from its column's type.
    All records of one batch carry one tag (a column has one type)."""

    name = "typed"
    arrow_type = None
    _TAGS = {b"B": Serde(), b"S": _StringSerde(), b"L": _LongSerde(), b"J": _JsonSerde()}

    def _inner(self, arrow_type) -> tuple[bytes, Serde]:
        if arrow_type in (pa.binary(), pa.null()):
            return b"B", self._TAGS[b"B"]
        if arrow_type in (pa.string(), pa.large_string()):
            return b"S", self._TAGS[b"S"]
        if pa.types.is_integer(arrow_type):
            return b"L", self._TAGS[b"L"]
        return b"J", self._TAGS[b"J"]

    def serialize(self, column):
        tag, inner = self._inner(column.type)
        return pc.binary_join_element_wise(pa.scalar(tag), inner.serialize(column), b"")

    def deserialize(self, data):
        live = data.drop_null() if data.null_count else data
        if not len(live):
            return pa.nulls(len(data))
        tags = pc.unique(pc.binary_slice(live, 0, 1)).to_pylist()
        if len(tags) != 1 or tags[0] not in self._TAGS:
            raise SerializationException(f"records of one batch tagged {tags}: not written by "
                                         f"one repartition sink")
        return self._TAGS[tags[0]].deserialize(pc.binary_slice(data, 1, 1 << 30))


class _TimeWindowedSerde(Serde):
    """Kafka's TimeWindowedSerde: the inner key's bytes, then the window
    start (8 bytes, big-endian). Deserialized: struct<key, start>."""

    name = "time_windowed"
    arrow_type = None

    def __init__(self, inner: Serde):
        self.inner = inner

    def deserialize(self, data):
        n = len(data)
        if n == 0:
            return pa.StructArray.from_arrays([pa.array([], self.inner.arrow_type or pa.binary()),
                                               pa.array([], pa.int64())], ["key", "start"])
        lengths = pc.binary_length(data)
        if pc.any(pc.less(lengths, 8)).as_py():
            raise SerializationException("a windowed key ends with an 8-byte window start")
        keys = pc.binary_slice(data, 0, -8)
        starts = _LongSerde().deserialize(pc.binary_slice(data, -8, 1 << 30))
        return pa.StructArray.from_arrays([self.inner.deserialize(keys), starts],
                                          ["key", "start"])


class _SessionWindowedSerde(_TimeWindowedSerde):
    """Kafka's SessionWindowedSerde: key bytes + session end + session start
    (8 bytes each, big-endian), read as struct<key, start, end>."""

    name = "session_windowed"

    def deserialize(self, data):
        if len(data) and pc.any(pc.less(pc.binary_length(data), 16)).as_py():
            raise SerializationException("a session-windowed key ends with 16 bytes of times")
        ends = _LongSerde().deserialize(pc.binary_slice(data, -16, -8))
        starts = _LongSerde().deserialize(pc.binary_slice(data, -8, 1 << 30))
        keys = pc.binary_slice(data, 0, -16)
        inner = self.inner.deserialize(keys) if len(data) else \
            pa.array([], self.inner.arrow_type or pa.binary())
        return pa.StructArray.from_arrays([inner, starts, ends], ["key", "start", "end"])


class _ValueAndTimestampSerde(Serde):
    """Kafka's timestamped stores' value layout: the 8-byte timestamp (of the
    latest record an aggregate took) then the inner serde's bytes. Rows are
    struct<value, timestamp> ({"value": v, "timestamp": t} in Python)."""

    name = "value_and_timestamp"
    arrow_type = None

    def __init__(self, inner: Serde):
        self.inner = inner

    def to_column(self, objects):
        live = [o for o in objects if o is not None]
        values = self.inner.to_column([o["value"] for o in live])
        times = pa.array([o["timestamp"] for o in live], pa.int64())
        if len(live) == len(objects):
            return pa.StructArray.from_arrays([values, times], ["value", "timestamp"])
        at = np.cumsum([o is not None for o in objects]) - 1
        taken = pa.array(np.where([o is None for o in objects], 0, at), pa.int64())
        mask = pa.array([o is None for o in objects])
        if not live:
            return pa.nulls(len(objects), pa.struct([("value", values.type),
                                                    ("timestamp", pa.int64())]))
        return pa.StructArray.from_arrays([values.take(taken), times.take(taken)],
                                          ["value", "timestamp"], mask=mask)

    def serialize(self, column):
        out = pc.binary_join_element_wise(_LongSerde().serialize(column.field("timestamp")),
                                          self.inner.serialize(column.field("value")), b"")
        if column.null_count:
            out = pc.if_else(pc.is_valid(column), out, pa.scalar(None, pa.binary()))
        return out

    def deserialize(self, data):
        if len(data) and pc.any(pc.less(pc.binary_length(data), 8)).as_py():
            raise SerializationException("a timestamped value starts with an 8-byte timestamp")
        times = _LongSerde().deserialize(pc.binary_slice(data, 0, 8))
        values = self.inner.deserialize(pc.binary_slice(data, 8, 1 << 30))
        return pa.StructArray.from_arrays([values, times], ["value", "timestamp"],
                                          mask=pc.is_null(data) if data.null_count else None)


class Serdes:
    """Kafka Streams' Serdes factory."""

    @staticmethod
    def bytes() -> Serde:
        return Serde()

    @staticmethod
    def string() -> Serde:
        return _StringSerde()

    @staticmethod
    def long() -> Serde:
        return _LongSerde()

    @staticmethod
    def json() -> Serde:
        return _JsonSerde()

    @staticmethod
    def time_windowed(inner: Serde) -> Serde:
        """Keys of a windowed table's output (Kafka's TimeWindowedSerde)."""
        return _TimeWindowedSerde(inner)

    @staticmethod
    def struct(arrow_type: pa.StructType) -> Serde:
        """Structs of int64, float64, bool and string fields, written a
        column at a time (aggregate_columns' stores; see _StructSerde)."""
        return _StructSerde(arrow_type)

    @staticmethod
    def value_and_timestamp(inner: Serde) -> Serde:
        """Values of timestamped stores (sliding windows): timestamp + value."""
        return _ValueAndTimestampSerde(inner)

    @staticmethod
    def session_windowed(inner: Serde) -> Serde:
        """Keys of a session-windowed table's output (Kafka's SessionWindowedSerde)."""
        return _SessionWindowedSerde(inner)

    @staticmethod
    def avro(schema=None, schema_id: int | None = None, *, schema_registry_url: str | None = None,
             subject: str | None = None, registry_config: dict | None = None,
             auto_register_schemas: bool = True, use_latest_version: bool = False) -> Serde:
        """Avro with ``schema`` (a dict or JSON text); ``schema_id``: Confluent's
        framing (magic byte, schema id) around it. With ``schema_registry_url``:
        Confluent's wire format through the registry (_RegistrySerde): written
        with ``schema`` under ``subject``, read with each record's writer's
        schema (resolved to ``schema`` when given); ``registry_config``:
        confluent-kafka's SchemaRegistryClient settings (basic.auth.user.info,
        ssl.ca.location)."""
        if schema_registry_url is not None:
            if schema_id is not None:
                raise ValueError("schema_id or schema_registry_url, not both: the registry "
                                 "gives the id")
            return _avro_registry_serde(schema, schema_registry_url, subject, registry_config,
                                        auto_register_schemas, use_latest_version)
        if schema is None:
            raise ValueError("Serdes.avro needs a schema, or schema_registry_url")
        return _AvroSerde(schema, schema_id)

    @staticmethod
    def protobuf(message_class, *, schema_registry_url: str | None = None,
                 subject: str | None = None, registry_config: dict | None = None,
                 auto_register_schemas: bool = True, use_latest_version: bool = False) -> Serde:
        """Protocol Buffers messages of ``message_class``, as dicts. With
        ``schema_registry_url``: Confluent's wire format (the schema id, the
        message indexes) through the registry, as Serdes.avro."""
        if schema_registry_url is not None:
            return _protobuf_registry_serde(message_class, schema_registry_url, subject,
                                            registry_config, auto_register_schemas,
                                            use_latest_version)
        return _ProtobufSerde(message_class)

    @staticmethod
    def typed() -> Serde:
        """Repartition topics' default (see _TypedSerde)."""
        return _TypedSerde()

    ByteArray = bytes
    String = string
    Long = long
