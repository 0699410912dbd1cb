"""Confluent's schema-registry converters: a record's key or value between
Connect's (schema, value) and Confluent's wire format, the schema kept in a
schema registry (kafkalite's own, or any with Confluent's REST API).

- AvroConverter (``io.confluent.connect.avro.AvroConverter``): Avro binary,
  the Connect schema mapped to Avro as Confluent's AvroData maps it
  (avro_data.py).
- ProtobufConverter (``io.confluent.connect.protobuf.ProtobufConverter``):
  a Protobuf message of a descriptor made from the Connect schema (as
  Confluent's ProtobufData, protobuf_data.py), registered as a base64
  ``FileDescriptorProto``.
- JsonSchemaConverter (``io.confluent.connect.json.JsonSchemaConverter``):
  JSON text, the Connect schema mapped to a JSON Schema (Confluent's
  JsonSchemaData, json_schema_data.py).

Wire format (Confluent's, the same for all three)::

    magic byte 0 | schema id: int32 big-endian | payload
    payload (Protobuf) = message indexes | the message
    message indexes    = zig-zag varint count, then that many zig-zag varint
                         indexes (the message's path in its file); [0], the
                         file's first message, is written as the count 0 alone

Settings (after ``key.converter.`` / ``value.converter.``), as Confluent
documents them: ``schema.registry.url`` (required; the first of a comma
list), ``basic.auth.credentials.source`` (``URL``: user info in the URL,
``USER_INFO``: ``basic.auth.user.info`` = ``user:password``),
``schema.registry.ssl.*`` (confluent-kafka's client's ``ssl.*``, e.g.
``schema.registry.ssl.ca.location`` for an https registry),
``auto.register.schemas`` (default true: a new schema is registered under
the subject), ``use.latest.version`` (with auto.register.schemas=false:
write with the subject's latest schema and its id). The subject is the
topic's (Confluent's TopicNameStrategy): ``<topic>-key`` or
``<topic>-value``.

A null value is a tombstone both ways. Bytes that do not start with the
magic byte, a schema id the registry does not know, a value its schema
cannot encode: DataException (the worker's error tolerance decides what
follows, a dead-letter queue included).

The registry is reached with confluent-kafka's SchemaRegistryClient, which
caches schemas by id and ids by schema; the converters cache, on top, what
they made of each schema (its Connect schema and its reader, or its
registry form and its writer), so a record costs no registry call once its
schema has been seen.

Who calls: the worker's task thread (one converter per task and side).
"""
from __future__ import annotations

import base64
import decimal
import io
import json

from kafkalite.connect.avro_data import (avro_schema_to_connect, connect_schema_to_avro,
                                         from_avro_value, needs_conversion, to_avro_value)
from kafkalite.connect.batch_readers import AvroBatchReader
from kafkalite.connect.config import BOOLEAN, STRING, ConfigDef, one_of
from kafkalite.connect.converters import ColumnarValues, Converter
from kafkalite.connect.data import Schema
from kafkalite.connect.errors import DataException
from kafkalite.connect.json_schema_data import (connect_schema_to_json_schema,
                                                from_json_payload, json_schema_to_connect,
                                                to_json_payload)
from kafkalite.connect.protobuf_data import (connect_schema_to_proto, message_schema,
                                             message_value, proto_pool, read_message_indexes,
                                             set_message)

MAGIC_BYTE = 0
HEADER_SIZE = 5                   # the magic byte and the 4-byte schema id



def _bool(v) -> bool:
    return str(v).strip().lower() == "true"


class RegistryConverter(Converter):
    """What the three converters share: the registry client, the subject,
    the wire format's header and the caches. A format supplies SCHEMA_TYPE
    and the four methods at the bottom."""

    SCHEMA_TYPE = ""
    FETCH_FORMAT = None          # the registry's ?format= for the schemas a converter reads
    CONFIG = (ConfigDef()
              .define("schema.registry.url", STRING, doc="the schema registry's URL (the "
                                                         "first of a comma-separated list)")
              .define("basic.auth.credentials.source", STRING, "URL",
                      one_of("URL", "USER_INFO"), doc="URL: the user info in the URL; "
                      "USER_INFO: basic.auth.user.info")
              .define("basic.auth.user.info", STRING, "", doc="user:password")
              .define("auto.register.schemas", BOOLEAN, True,
                      doc="register a new schema under the subject")
              .define("use.latest.version", BOOLEAN, False,
                      doc="write with the subject's latest schema (with "
                          "auto.register.schemas=false)"))

    def configure(self, configs, is_key):
        from confluent_kafka.schema_registry import SchemaRegistryClient
        super().configure(configs, is_key)
        url = configs.get("schema.registry.url")
        if not url:
            from kafkalite.connect.config import ConfigException
            raise ConfigException("schema.registry.url", "Missing required configuration "
                                  "\"schema.registry.url\" which has no default value.")
        conf = {"url": str(url).split(",")[0].strip()}
        if str(configs.get("basic.auth.credentials.source", "URL")).upper() == "USER_INFO":
            conf["basic.auth.user.info"] = configs.get("basic.auth.user.info", "")
        # schema.registry.ssl.ca.location and the like: the client's ssl.* settings
        conf.update({k[len("schema.registry."):]: v for k, v in configs.items()
                     if k.startswith("schema.registry.ssl.")})
        self.registry = SchemaRegistryClient(conf)
        self.auto_register = _bool(configs.get("auto.register.schemas", True))
        self.use_latest = _bool(configs.get("use.latest.version", False))
        self.suffix = "-key" if is_key else "-value"
        self._readers: dict = {}      # schema id -> reader: payload -> (Schema, value)
        self._writers: dict = {}      # (id(Schema), topic) -> (Schema, header, writer)

    # ---- Connect -> bytes ------------------------------------------------------------------

    def from_connect_data(self, topic, schema, value):
        if value is None:
            return None
        if schema is None:
            raise DataException(f"{type(self).__name__}: a value without a schema cannot be "
                                f"written with a schema registry")
        hit = self._writers.get((id(schema), topic))
        if hit is None or hit[0] is not schema:
            if len(self._writers) > 1000:
                self._writers.clear()
            hit = self._writers[(id(schema), topic)] = (schema, *self._writer_for(topic, schema))
        try:
            return hit[1] + hit[2](value)
        except DataException:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
                decimal.InvalidOperation) as e:
            raise DataException(f"{type(self).__name__}: cannot serialize a value of "
                                f"{schema.name or schema.type} for topic {topic}: {e}") from None

    def _writer_for(self, topic, schema):
        """(the wire header, value -> payload bytes) of ``schema`` under the
        topic's subject: its id registered, looked up, or the latest's."""
        from confluent_kafka.schema_registry import Schema as RegistrySchema
        subject = topic + self.suffix
        try:
            registry_schema = RegistrySchema(self._registry_form(schema), self.SCHEMA_TYPE)
            if self.use_latest and not self.auto_register:
                latest = self.registry.get_latest_version(subject, fmt=self.FETCH_FORMAT)
                schema_id, registry_schema = latest.schema_id, latest.schema
            elif self.auto_register:
                schema_id = self.registry.register_schema(subject, registry_schema)
            else:
                schema_id = self.registry.lookup_schema(subject, registry_schema).schema_id
        except DataException:
            raise
        except Exception as e:      # noqa: BLE001 -- the registry's refusal or its absence
            raise DataException(f"{type(self).__name__}: cannot get the schema id of "
                                f"subject {subject}: {e}") from None
        header = bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big")
        return header, self._writer(schema, registry_schema)

    # ---- bytes -> Connect ------------------------------------------------------------------

    def to_connect_data(self, topic, data):
        if data is None:
            return None, None
        data = bytes(data)
        if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
            raise DataException(f"{type(self).__name__}: Unknown magic byte! (topic {topic}: "
                                f"not Confluent's wire format)")
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        reader = self._readers.get(schema_id)
        if reader is None:
            try:
                registry_schema = self._fetch(schema_id)
            except Exception as e:  # noqa: BLE001 -- unknown id (40403) or no registry
                raise DataException(f"{type(self).__name__}: Error retrieving {self.SCHEMA_TYPE} "
                                    f"schema for id {schema_id} (topic {topic}): {e}") from None
            schema_type = registry_schema.schema_type or "AVRO"    # the API's default
            if schema_type != self.SCHEMA_TYPE:
                raise DataException(f"{type(self).__name__}: schema id {schema_id} is a "
                                    f"{schema_type} schema, not {self.SCHEMA_TYPE}")
            if len(self._readers) > 1000:
                self._readers.clear()
            reader = self._readers[schema_id] = self._reader(registry_schema)
        try:
            return reader(data[HEADER_SIZE:])
        except DataException:
            raise
        except Exception as e:      # noqa: BLE001 -- bytes the writer's schema cannot read
            raise DataException(f"{type(self).__name__}: Converting byte[] to Kafka Connect "
                                f"data failed due to serialization error of topic {topic} "
                                f"(schema id {schema_id}): {e}") from None

    def _fetch(self, schema_id):
        return self.registry.get_schema(schema_id, fmt=self.FETCH_FORMAT)

    # ---- what a format supplies --------------------------------------------------------------

    def _registry_form(self, schema: Schema) -> str:
        """The registry's text of the format's schema for ``schema``."""
        raise NotImplementedError

    def _writer(self, schema: Schema, registry_schema):
        """value -> payload bytes, encoding under ``registry_schema``."""
        raise NotImplementedError

    def _reader(self, registry_schema):
        """payload bytes -> (Connect schema, value), of the writer's schema."""
        raise NotImplementedError


class AvroConverter(RegistryConverter):
    SCHEMA_TYPE = "AVRO"

    def configure(self, configs, is_key):
        super().configure(configs, is_key)
        self._batch_readers: dict = {}   # schema id -> AvroBatchReader, or None: not taken
        self._columns_read = True        # whether batches are read as Arrow columns too

    def to_connect_batch(self, topic, column):
        """A batch of one schema id of flat fields read into Arrow columns at
        once (batch_readers.AvroBatchReader), handed on as ColumnarValues
        whose dicts the per-record decoder makes only when one is read; any
        other batch record by record."""
        reader, table = self._batch_reader(column) if self._columns_read else (None, None)
        if table is None:
            return super().to_connect_batch(topic, column)

        def values():
            return super(AvroConverter, self).to_connect_batch(topic, column)[1]
        return reader.schema, ColumnarValues(table, values, self._columns_unused)

    def _columns_unused(self) -> None:
        self._columns_read = False

    def _batch_reader(self, column):
        """(the reader, the Table) of a batch of one schema id it takes, else
        (None, None)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not len(column) or column.null_count or not pa.types.is_binary(column.type) or \
                pc.min(pc.binary_length(column)).as_py() < HEADER_SIZE:
            return None, None
        heads = pc.unique(pc.binary_slice(column, 0, HEADER_SIZE))
        head = heads[0].as_py()
        if len(heads) != 1 or head[0] != MAGIC_BYTE:
            return None, None
        schema_id = int.from_bytes(head[1:], "big")
        if schema_id not in self._batch_readers:
            try:
                registry_schema = self._fetch(schema_id)
            except Exception:   # noqa: BLE001 -- the per-record path names the error
                return None, None
            reader = None
            if (registry_schema.schema_type or "AVRO") == "AVRO" and \
                    not registry_schema.references:
                doc = json.loads(registry_schema.schema_str)
                reader = AvroBatchReader.of(doc, avro_schema_to_connect(doc, {}))
            if len(self._batch_readers) > 1000:
                self._batch_readers.clear()
            self._batch_readers[schema_id] = reader
        reader = self._batch_readers[schema_id]
        if reader is None:
            return None, None
        try:
            # (binary_slice without a stop fails: "Negative buffer resize")
            return reader, reader.read(pc.binary_slice(column, HEADER_SIZE, 1 << 31))
        except pa.ArrowException:
            return None, None

    def _registry_form(self, schema):
        return json.dumps(connect_schema_to_avro(schema), separators=(",", ":"))

    def _writer(self, schema, registry_schema):
        import fastavro
        parsed = fastavro.parse_schema(json.loads(registry_schema.schema_str),
                                       _write_hint=False)
        write = fastavro.schemaless_writer
        convert = needs_conversion(schema, writing=True)

        def encode(value):
            out = io.BytesIO()
            write(out, parsed, to_avro_value(schema, value) if convert else value)
            return out.getvalue()
        return encode

    def _reader(self, registry_schema):
        import fastavro
        doc = json.loads(registry_schema.schema_str)
        named: dict = {}
        for ref in registry_schema.references or ():
            # a referenced schema: its named types, as the registry resolves them
            ref_schema = self.registry.get_version(ref.subject, ref.version).schema
            avro_schema_to_connect(json.loads(ref_schema.schema_str), named)
        schema = avro_schema_to_connect(doc, named)
        named_avro: dict = {}
        for ref in registry_schema.references or ():
            fastavro.parse_schema(json.loads(
                self.registry.get_version(ref.subject, ref.version).schema.schema_str),
                named_schemas=named_avro)
        parsed = fastavro.parse_schema(doc, named_schemas=named_avro)
        read = fastavro.schemaless_reader
        convert = needs_conversion(schema)

        def decode(payload):
            value = read(io.BytesIO(payload), parsed, None)
            return schema, (from_avro_value(schema, value) if convert else value)
        return decode


class JsonSchemaConverter(RegistryConverter):
    SCHEMA_TYPE = "JSON"

    def _registry_form(self, schema):
        return json.dumps(connect_schema_to_json_schema(schema), separators=(",", ":"))

    def _writer(self, schema, registry_schema):
        encoder = json.JSONEncoder(separators=(",", ":"))

        def encode(value):
            return encoder.encode(to_json_payload(schema, value)).encode()
        return encode

    def _reader(self, registry_schema):
        if registry_schema.references:
            raise DataException("JsonSchemaConverter: schemas with references are not "
                                "supported")
        schema = json_schema_to_connect(json.loads(registry_schema.schema_str))

        def decode(payload):
            try:
                doc = json.loads(payload)
            except (ValueError, UnicodeDecodeError) as e:
                raise DataException(f"JsonSchemaConverter: not JSON: {e}") from None
            return schema, from_json_payload(schema, doc)
        return decode


class ProtobufConverter(RegistryConverter):
    SCHEMA_TYPE = "PROTOBUF"
    FETCH_FORMAT = "serialized"      # a base64 FileDescriptorProto, not .proto text

    def _registry_form(self, schema):
        return base64.b64encode(connect_schema_to_proto(schema).SerializeToString()).decode()

    def _writer(self, schema, registry_schema):
        from google.protobuf import descriptor_pb2, message_factory
        file_proto = descriptor_pb2.FileDescriptorProto()
        file_proto.ParseFromString(base64.b64decode(self._serialized(registry_schema)))
        pool = self._pool_with_references(registry_schema)
        fd = pool.Add(file_proto)
        if not fd.message_types_by_name:
            raise DataException("ProtobufConverter: the schema has no message")
        desc = next(iter(fd.message_types_by_name.values()))
        cls = message_factory.GetMessageClass(desc)

        def encode(value):
            msg = cls()
            set_message(msg, schema, value)
            return b"\x00" + msg.SerializeToString()      # message indexes [0]
        return encode

    def _serialized(self, registry_schema) -> str:
        """The base64 FileDescriptorProto of a registry schema (a latest
        version fetched as .proto text is fetched again, serialized)."""
        text = registry_schema.schema_str
        try:
            base64.b64decode(text, validate=True)
            return text
        except ValueError:
            raise DataException("ProtobufConverter: the registry answered .proto text "
                                "where a serialized descriptor was asked") from None

    def _pool_with_references(self, registry_schema):
        from google.protobuf import descriptor_pb2
        pool = proto_pool()
        seen: set = set()

        def add(refs):
            for ref in refs or ():
                if ref.name in seen:
                    continue
                seen.add(ref.name)
                sub = self.registry.get_version(ref.subject, ref.version, fmt="serialized")
                add(sub.schema.references)
                fp = descriptor_pb2.FileDescriptorProto()
                fp.ParseFromString(base64.b64decode(sub.schema.schema_str))
                fp.name = ref.name
                pool.Add(fp)
        add(registry_schema.references)
        return pool

    def _reader(self, registry_schema):
        from google.protobuf import descriptor_pb2, message_factory
        file_proto = descriptor_pb2.FileDescriptorProto()
        file_proto.ParseFromString(base64.b64decode(registry_schema.schema_str))
        pool = self._pool_with_references(registry_schema)
        fd = pool.Add(file_proto)
        by_path: dict = {}

        def message(indexes):
            key = tuple(indexes)
            hit = by_path.get(key)
            if hit is None:
                desc = fd.message_types_by_name[file_proto.message_type[indexes[0]].name]
                for i in indexes[1:]:
                    desc = desc.nested_types[i]
                hit = by_path[key] = (message_factory.GetMessageClass(desc),
                                      message_schema(desc))
            return hit

        def decode(payload):
            indexes, start = read_message_indexes(payload)
            try:
                cls, schema = message(indexes)
            except (IndexError, KeyError):
                raise DataException(f"ProtobufConverter: no message at indexes {indexes} "
                                    f"in the writer's schema") from None
            msg = cls()
            msg.ParseFromString(payload[start:])
            return schema, message_value(msg, schema)
        return decode
