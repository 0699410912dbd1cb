"""Serializers and deserializers on kafkalite's Producer and Consumer, with
confluent-kafka's calling convention (its SerializingProducer and
DeserializingConsumer), so confluent-kafka's AvroSerializer,
ProtobufSerializer, JSONSerializer (and their deserializers, and
StringSerializer & co.) work unchanged against kafkalite and its schema
registry.

A serializer is any callable ``serializer(obj, ctx) -> bytes | None``, a
deserializer ``deserializer(data, ctx) -> object``, where ``ctx`` is a
SerializationContext: ``topic``, ``field`` (MessageField.KEY or .VALUE;
equal to confluent-kafka's, which are the strings "key" and "value") and
``headers`` (the record's, which a serializer may append to). They are
given as the settings ``key.serializer`` / ``value.serializer`` (Producer)
and ``key.deserializer`` / ``value.deserializer`` (Consumer), as
confluent-kafka names them, or as the keyword arguments ``key_serializer=``
& co.; a producer or consumer without them runs no per-record Python code
for them (its produce and poll are the plain ones).

Errors: a serializer's exception is raised from produce() as
KeySerializationError / ValueSerializationError (nothing queued); a
deserializer's from poll() / consume() as KeyDeserializationError /
ValueDeserializationError with ``kafka_message`` (the raw message, its
offset consumed, as confluent-kafka's DeserializingConsumer does).
"""
from __future__ import annotations

from enum import Enum

from kafkalite.errors import KafkaError

SERIALIZERS = ("key.serializer", "value.serializer")
DESERIALIZERS = ("key.deserializer", "value.deserializer")


class MessageField(str, Enum):
    NONE = "none"
    KEY = "key"
    VALUE = "value"


class SerializationContext:
    """What a serializer is told about the record (confluent-kafka's)."""

    __slots__ = ("topic", "field", "headers")

    def __init__(self, topic: str, field: MessageField, headers=None):
        self.topic, self.field, self.headers = topic, field, headers


class SerializationError(KafkaError):
    """A serializer or deserializer refused a record (``__cause__`` is its
    exception)."""

    def __init__(self, exception: BaseException | None = None, kafka_message=None):
        super().__init__(f"{type(exception).__name__}: {exception}" if exception else "")
        self.exception, self.kafka_message = exception, kafka_message


class KeySerializationError(SerializationError):
    pass


class ValueSerializationError(SerializationError):
    pass


class KeyDeserializationError(SerializationError):
    pass


class ValueDeserializationError(SerializationError):
    pass


def take(given: dict, names: tuple) -> tuple:
    """The (key, value) objects named ``names`` (or their ``key_serializer``
    spelling) in a client's ``given`` settings, taken out of them (the
    settings proper hold no objects)."""
    out = []
    for name in names:
        obj = given.pop(name, None)
        alias = given.pop(name.replace(".", "_"), None)
        obj = obj if obj is not None else alias
        if obj is not None and not callable(obj):
            raise ValueError(f"{name} must be callable (confluent-kafka's calling convention: "
                             f"obj, SerializationContext)")
        out.append(obj)
    return tuple(out)


def serializing_produce(produce, key_serializer, value_serializer):
    """A Producer's produce() that runs the serializers first, then ``produce``
    (the plain one), as confluent-kafka's SerializingProducer does."""

    def produce_serialized(topic, value=None, key=None, partition=-1, on_delivery=None,
                           timestamp=0, headers=None, callback=None):
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if key_serializer is not None:
            try:
                key = key_serializer(key, ctx)
            except Exception as e:      # noqa: BLE001 -- any serializer's failure is the record's
                raise KeySerializationError(e) from e
        ctx.field = MessageField.VALUE
        if value_serializer is not None:
            try:
                value = value_serializer(value, ctx)
            except Exception as e:      # noqa: BLE001 -- as above
                raise ValueSerializationError(e) from e
        produce(topic, value, key, partition, on_delivery, timestamp, ctx.headers, callback)
    return produce_serialized


def deserialize(msg, key_deserializer, value_deserializer):
    """``msg`` with its key and value replaced by the deserializers'
    (confluent-kafka's DeserializingConsumer order: the value first); a
    message that carries an error is left as it is."""
    if msg.error() is not None:
        return msg
    ctx = SerializationContext(msg.topic(), MessageField.VALUE, msg.headers())
    if value_deserializer is not None:
        try:
            value = value_deserializer(msg.value(), ctx)
        except Exception as e:          # noqa: BLE001 -- any deserializer's failure is the record's
            raise ValueDeserializationError(e, msg) from e
    else:
        value = msg.value()
    if key_deserializer is not None:
        ctx.field = MessageField.KEY
        try:
            key = key_deserializer(msg.key(), ctx)
        except Exception as e:          # noqa: BLE001 -- as above
            raise KeyDeserializationError(e, msg) from e
        msg.set_key(key)
    msg.set_value(value)
    return msg


def protobuf_message_indexes(buf: bytes, pos: int = 0) -> tuple[list[int], int]:
    """(message indexes, where the message starts) of Confluent's Protobuf
    wire format from ``pos`` (after the magic byte and the schema id): a
    count, then each index, zigzag varints; a count of 0 stands for the
    first message, [0]. ValueError for bytes that are not that: read by
    Connect's ProtobufConverter and the REST proxy alike."""
    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(buf):
                raise ValueError("the message indexes end early")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise ValueError("a message index is not a varint")
    count = varint()
    if count == 0:
        return [0], pos
    if not 0 < count <= 100:
        raise ValueError(f"{count} message indexes")
    return [varint() for _ in range(count)], pos


def protobuf_schema_classes(schema: str, references, fetch, file_name: str = "schema.proto"):
    """The message classes of a registered Protobuf schema, given in the
    registry's ``serialized`` format (a base64 FileDescriptorProto): a
    function of the message indexes (protobuf_message_indexes) giving that
    message's class. ``references`` are (name, subject, version) triples,
    resolved through ``fetch(subject, version) -> (schema, references)``
    in the same format, or protobuf's own well-known types for
    ``google/protobuf/...``. ValueError for a schema that is not a
    serialized descriptor or has no message. Shared by the REST proxy and
    the web console."""
    import base64
    import binascii
    import importlib

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    pool = descriptor_pool.DescriptorPool()
    added: set = set()

    def parse(text: str):
        fdp = descriptor_pb2.FileDescriptorProto()
        try:
            fdp.ParseFromString(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            raise ValueError("the registry answered .proto text where a serialized "
                             "descriptor was asked") from None
        return fdp

    def add_file(name: str, fdp) -> None:
        for dep in fdp.dependency:
            if dep.startswith("google/protobuf/") and dep not in added:
                add_builtin(dep)
        fdp.name = name
        added.add(name)
        pool.Add(fdp)

    def add_builtin(dep: str) -> None:
        added.add(dep)
        module = importlib.import_module(
            "google.protobuf." + dep[len("google/protobuf/"):-len(".proto")] + "_pb2")
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        add_file(dep, fdp)

    def add_references(refs) -> None:
        for name, subject, version in refs:
            if name in added:
                continue
            if name.startswith("google/protobuf/"):
                add_builtin(name)
                continue
            added.add(name)         # before its own references: a cycle ends here
            text, sub_references = fetch(subject, version)
            add_references(sub_references)
            add_file(name, parse(text))

    add_references(references)
    fdp = parse(schema)
    if not fdp.message_type:
        raise ValueError("the Protobuf schema has no message")
    add_file(fdp.name or file_name, fdp)
    prefix = fdp.package + "." if fdp.package else ""
    classes: dict = {}

    def message_class(indexes=(0,)):
        indexes = tuple(indexes) or (0,)
        cls = classes.get(indexes)
        if cls is None:
            desc = pool.FindMessageTypeByName(prefix + fdp.message_type[indexes[0]].name)
            for i in indexes[1:]:
                desc = desc.nested_types[i]
            cls = classes[indexes] = message_factory.GetMessageClass(desc)
        return cls
    return message_class
