"""Confluent's ProtobufData: Connect's schemas and values <-> Protobuf
descriptors and messages, as Confluent's ProtobufConverter maps them, for
the ProtobufConverter (registry_converters.py). Messages are protobuf's.

A struct is one message; the logical types are the well-known messages
(google.protobuf.Timestamp, google.type.Date, google.type.TimeOfDay,
confluent.type.Decimal). What Protobuf cannot say comes back changed:
int8/int16 read back int32, every message-typed, repeated or map field
optional, a nested struct named in its parent's scope.

Message indexes (after the schema id in Confluent's wire format): a
zig-zag varint count, then that many zig-zag varint indexes (the
message's path in its file); [0], the file's first message, is written
as the count 0 alone.
"""
from __future__ import annotations

import datetime as _dt
import decimal

from kafkalite.connect.data import DATE, DECIMAL, EPOCH, TIME, TIMESTAMP, Field, Schema
from kafkalite.connect.errors import DataException

PROTOBUF_DEFAULT_MESSAGE = "ConnectDefault1"
PROTOBUF_TAG = "io.confluent.connect.protobuf.Tag"      # a field's number, as a parameter


def _split_name(full: str) -> tuple[str | None, str]:
    ns, _, name = full.rpartition(".")
    return (ns or None), name


# Connect's logical types as the well-known messages Confluent's ProtobufData uses
_PROTO_LOGICAL = {TIMESTAMP: (".google.protobuf.Timestamp", "google/protobuf/timestamp.proto"),
                  DATE: (".google.type.Date", "google/type/date.proto"),
                  TIME: (".google.type.TimeOfDay", "google/type/timeofday.proto"),
                  DECIMAL: (".confluent.type.Decimal", "confluent/type/decimal.proto")}


def _decimal_pb2():
    """confluent.type.Decimal's module: confluent/type/decimal.proto, the
    path Confluent's serializers and registry use, in confluent-kafka 2.13
    and later; confluent/types/decimal.proto before (the same message)."""
    try:
        from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    except ImportError:
        from confluent_kafka.schema_registry.confluent.types import decimal_pb2
        _PROTO_LOGICAL[DECIMAL] = (".confluent.type.Decimal", decimal_pb2.DESCRIPTOR.name)
    return decimal_pb2


def proto_pool():
    """A descriptor pool holding the well-known files a converted schema may
    import."""
    decimal_pb2 = _decimal_pb2()
    from google.protobuf import descriptor_pool, timestamp_pb2
    from google.type import date_pb2, timeofday_pb2
    pool = descriptor_pool.DescriptorPool()
    for mod in (timestamp_pb2, date_pb2, timeofday_pb2, decimal_pb2):
        pool.AddSerializedFile(mod.DESCRIPTOR.serialized_pb)
    return pool


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p) or "X"


def connect_schema_to_proto(schema: Schema):
    """The FileDescriptorProto Confluent's ProtobufData makes of a struct
    schema: one message named by the schema's name (its last part; the rest
    the package; ``ConnectDefault1`` for a nameless one), field numbers in
    field order (or the ``io.confluent.connect.protobuf.Tag`` parameter),
    int8/int16/int32 int32, an optional scalar a proto3 ``optional`` field,
    an array a repeated field, a map a map field, a nested struct a nested
    message, the logical types well-known messages."""
    from google.protobuf import descriptor_pb2 as d
    if schema.type != "struct":
        raise DataException(f"ProtobufConverter: a {schema.type} schema is not a struct "
                            f"(only structs map to a Protobuf message)")
    f = d.FileDescriptorProto(syntax="proto3")
    package, name = _split_name(schema.name) if schema.name else (None, PROTOBUF_DEFAULT_MESSAGE)
    f.name = (schema.name or PROTOBUF_DEFAULT_MESSAGE).replace(".", "/") + ".proto"
    if package:
        f.package = package
    scope = "." + package if package else ""
    deps: set = set()
    scalars = {"int8": d.FieldDescriptorProto.TYPE_INT32,
               "int16": d.FieldDescriptorProto.TYPE_INT32,
               "int32": d.FieldDescriptorProto.TYPE_INT32,
               "int64": d.FieldDescriptorProto.TYPE_INT64,
               "float32": d.FieldDescriptorProto.TYPE_FLOAT,
               "float64": d.FieldDescriptorProto.TYPE_DOUBLE,
               "boolean": d.FieldDescriptorProto.TYPE_BOOL,
               "string": d.FieldDescriptorProto.TYPE_STRING,
               "bytes": d.FieldDescriptorProto.TYPE_BYTES}

    def set_type(fd, s: Schema, msg, msg_scope: str, field_name: str):
        if s.name in _PROTO_LOGICAL:
            type_name, dep = _PROTO_LOGICAL[s.name]
            fd.type, fd.type_name = d.FieldDescriptorProto.TYPE_MESSAGE, type_name
            deps.add(dep)
        elif s.type == "struct":
            nested = msg.nested_type.add()
            nested.name = _split_name(s.name)[1] if s.name else _camel(field_name)
            fill(nested, s, f"{msg_scope}.{nested.name}")
            fd.type, fd.type_name = d.FieldDescriptorProto.TYPE_MESSAGE, \
                f"{msg_scope}.{nested.name}"
        elif s.type in ("array", "map"):
            raise DataException(f"ProtobufConverter: field {field_name}: an array or map "
                                f"of arrays or maps has no Protobuf form")
        else:
            fd.type = scalars[s.type]

    def fill(msg, s: Schema, msg_scope: str):
        for i, field in enumerate(s.fields):
            fs = field.schema
            fd = msg.field.add()
            fd.name = field.name
            fd.number = int((fs.parameters or {}).get(PROTOBUF_TAG, i + 1))
            fd.label = d.FieldDescriptorProto.LABEL_OPTIONAL
            if fs.type == "array":
                fd.label = d.FieldDescriptorProto.LABEL_REPEATED
                set_type(fd, fs.value_schema, msg, msg_scope, field.name)
            elif fs.type == "map":
                entry = msg.nested_type.add()
                entry.name = _camel(field.name) + "Entry"
                entry.options.map_entry = True
                for n, (part, sub) in enumerate((("key", fs.key_schema),
                                                 ("value", fs.value_schema)), 1):
                    ef = entry.field.add(name=part, number=n,
                                         label=d.FieldDescriptorProto.LABEL_OPTIONAL)
                    set_type(ef, sub, msg, msg_scope, field.name + "_" + part)
                fd.label = d.FieldDescriptorProto.LABEL_REPEATED
                fd.type = d.FieldDescriptorProto.TYPE_MESSAGE
                fd.type_name = f"{msg_scope}.{entry.name}"
            else:
                set_type(fd, fs, msg, msg_scope, field.name)
                if fs.optional and fd.type != d.FieldDescriptorProto.TYPE_MESSAGE:
                    # proto3 optional: presence kept, so a null reads back null
                    fd.proto3_optional = True
                    fd.oneof_index = len(msg.oneof_decl)
                    msg.oneof_decl.add(name="_" + field.name)

    msg = f.message_type.add()
    msg.name = name
    fill(msg, schema, f"{scope}.{name}")
    f.dependency.extend(sorted(deps))
    return f


def message_schema(desc, optional: bool = False) -> Schema:
    """The Connect schema of a message descriptor (as ProtobufData reads
    one): a field with presence (proto3 ``optional``, a message, a oneof
    member) optional, repeated an array, a map a map, an enum a string,
    the well-known logical messages Connect's logical types."""
    from google.protobuf.descriptor import FieldDescriptor as FD
    logical = {v[0][1:]: k for k, v in _PROTO_LOGICAL.items()}
    if desc.full_name in logical:
        name = logical[desc.full_name]
        s = {TIMESTAMP: Schema.TIMESTAMP, DATE: Schema.DATE, TIME: Schema.TIME}.get(name) or \
            Schema("bytes", name=DECIMAL, version=1, parameters={"scale": "0"})
        return s.as_optional() if optional else s

    def field_schema(fd) -> Schema:
        if fd.type == FD.TYPE_MESSAGE:
            return message_schema(fd.message_type, True)
        if fd.type == FD.TYPE_ENUM:
            return Schema.STRING
        t = {FD.TYPE_INT32: "int32", FD.TYPE_SINT32: "int32", FD.TYPE_SFIXED32: "int32",
             FD.TYPE_UINT32: "int64", FD.TYPE_FIXED32: "int64", FD.TYPE_INT64: "int64",
             FD.TYPE_SINT64: "int64", FD.TYPE_SFIXED64: "int64", FD.TYPE_UINT64: "int64",
             FD.TYPE_FIXED64: "int64", FD.TYPE_FLOAT: "float32", FD.TYPE_DOUBLE: "float64",
             FD.TYPE_BOOL: "boolean", FD.TYPE_STRING: "string", FD.TYPE_BYTES: "bytes"}[fd.type]
        return Schema(t)

    fields = []
    for fd in desc.fields:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            k, v = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
            fs = Schema("map", optional=True, key_schema=field_schema(k),
                        value_schema=field_schema(v))
        elif fd.is_repeated:
            fs = Schema("array", optional=True, value_schema=field_schema(fd))
        else:
            fs = field_schema(fd)
            if fd.containing_oneof is not None:
                fs = fs.as_optional()
        fields.append(Field(fd.name, fs))
    name = None if desc.full_name == PROTOBUF_DEFAULT_MESSAGE else desc.full_name
    return Schema("struct", optional=optional, name=name, fields=tuple(fields))


_NANOS_PER_MS = 1_000_000


def _decimal_to_proto(msg, v, scale: int):
    v = decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-scale))
    unscaled = int(v.scaleb(scale))
    msg.value = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    msg.precision, msg.scale = len(str(abs(unscaled))), scale


def set_message(msg, s: Schema, value) -> None:
    """Fill ``msg`` (of connect_schema_to_proto(s)'s message) from a Connect value."""
    if s.name == TIMESTAMP:
        ms = (value - EPOCH) // _dt.timedelta(milliseconds=1) if isinstance(
            value, _dt.datetime) else int(value)
        msg.seconds, msg.nanos = ms // 1000, ms % 1000 * _NANOS_PER_MS
        return
    if s.name == DATE:
        if not isinstance(value, _dt.date):
            value = EPOCH.date() + _dt.timedelta(days=int(value))
        msg.year, msg.month, msg.day = value.year, value.month, value.day
        return
    if s.name == TIME:
        if not isinstance(value, _dt.time):
            value = (_dt.datetime.min + _dt.timedelta(milliseconds=int(value))).time()
        msg.hours, msg.minutes, msg.seconds = value.hour, value.minute, value.second
        msg.nanos = value.microsecond // 1000 * _NANOS_PER_MS
        return
    if s.name == DECIMAL:
        _decimal_to_proto(msg, value, int((s.parameters or {}).get("scale", 0)))
        return
    for field in s.fields:
        v = value.get(field.name)
        if v is None:
            continue
        fs = field.schema
        if fs.type == "array":
            target = getattr(msg, field.name)
            if fs.value_schema.type == "struct" or fs.value_schema.name in _PROTO_LOGICAL:
                for x in v:
                    set_message(target.add(), fs.value_schema, x)
            else:
                target.extend(v)
        elif fs.type == "map":
            target = getattr(msg, field.name)
            for k, x in v.items():
                if fs.value_schema.type == "struct" or fs.value_schema.name in _PROTO_LOGICAL:
                    set_message(target[k], fs.value_schema, x)
                else:
                    target[k] = x
        elif fs.type == "struct" or fs.name in _PROTO_LOGICAL:
            set_message(getattr(msg, field.name), fs, v)
        else:
            setattr(msg, field.name, v)


def message_value(msg, s: Schema):
    """A message read with the writer's descriptor, as the Connect value of
    message_schema(its descriptor)."""
    if s.name == TIMESTAMP:
        return EPOCH + _dt.timedelta(seconds=msg.seconds, microseconds=msg.nanos // 1000)
    if s.name == DATE:
        return _dt.date(msg.year, msg.month, msg.day)
    if s.name == TIME:
        return _dt.time(msg.hours, msg.minutes, msg.seconds, msg.nanos // 1000)
    if s.name == DECIMAL:
        unscaled = int.from_bytes(msg.value, "big", signed=True) if msg.value else 0
        return decimal.Decimal(unscaled).scaleb(-msg.scale)
    out = {}
    desc = msg.DESCRIPTOR
    for field in s.fields:
        fd, fs = desc.fields_by_name[field.name], field.schema
        v = getattr(msg, field.name)
        if fs.type == "array":
            sub = fs.value_schema
            out[field.name] = [message_value(x, sub) if sub.type == "struct" or
                               sub.name in _PROTO_LOGICAL else _proto_scalar(fd, x) for x in v]
        elif fs.type == "map":
            sub = fs.value_schema
            vfd = fd.message_type.fields_by_name["value"]
            out[field.name] = {k: message_value(x, sub) if sub.type == "struct" or
                               sub.name in _PROTO_LOGICAL else _proto_scalar(vfd, x)
                               for k, x in v.items()}
        elif fd.has_presence and not msg.HasField(field.name):
            out[field.name] = None
        elif fs.type == "struct" or fs.name in _PROTO_LOGICAL:
            out[field.name] = message_value(v, fs)
        else:
            out[field.name] = _proto_scalar(fd, v)
    return out


def _proto_scalar(fd, v):
    if fd.enum_type is not None:
        hit = fd.enum_type.values_by_number.get(v)
        return hit.name if hit is not None else str(v)
    return v


def read_message_indexes(payload: bytes) -> tuple[list, int]:
    """(the message indexes, where the message starts) of a Protobuf payload."""
    from kafkalite.client.serialization import protobuf_message_indexes
    try:
        return protobuf_message_indexes(payload)
    except ValueError as exc:
        raise DataException(f"ProtobufConverter: {exc}") from None
