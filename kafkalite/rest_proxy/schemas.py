"""The embedded formats that go through the schema registry: Avro, Protobuf, JSON Schema.

v2's ``application/vnd.kafka.{avro,protobuf,jsonschema}.v2+json`` produce
(``value_schema`` text or ``value_schema_id``, and ``key_*``) and consumer
instances made with ``"format": "avro"|"protobuf"|"jsonschema"``; v3's
records whose key or value names a schema (records.py). The bytes are
Confluent's wire format (magic byte 0, the 4-byte schema id, the
payload; Protobuf's message indexes before its message) because they are
made and read by confluent-kafka's own AvroSerializer, ProtobufSerializer,
JSONSerializer and their deserializers, with its SchemaRegistryClient on
the node's own registry.

Subjects as Confluent's proxy names them (TopicNameStrategy):
``<topic>-value`` and ``<topic>-key``. A schema given as text is
registered there (the registry answers the id it already has for the
same schema); a schema given by id is fetched by id and used as it is.

Whose rights: the registry is asked with the caller's own credentials
(the HTTP Basic login the proxy's own login checked, forwarded as the
registry client's ``basic.auth.user.info``), so registering a schema, or
reading one by id, needs what the registry's ACLs give that user
(registry/authorization.py: Write on ``subject:<topic>-value`` to
register), never the server's rights. Security off: no credentials, as
any client of the registry. Registering is asked of the proxy's own
authorizer too (Write on ``subject:<subject>``, the same decision): the
client answers a schema it registered before from its cache, and an ACL
removed since must still refuse it. A schema read by id is the client's
cache's once fetched (per caller's credentials).

Where the registry is: the node's ``schema_registry`` endpoint, asked of
the node once through the proxy's admin client (the proxy is a client of
the node, and the supervisor serves both). No registry (turned off): a
schema-based request is 40801.

Errors, Confluent REST Proxy's: a schema missing where a key or value is
42201/42202, a schema the registry calls invalid 42205, data that does not
fit its schema 42203, a registration or lookup the registry refused or
could not answer 40801 (a 403 of the registry is the proxy's 40301).

Who may call: the proxy's request threads, any number at once; the
clients and serializers cached here are shared (confluent-kafka's are
thread-safe for this use: each call's state is its own).
"""
from __future__ import annotations

import datetime
import decimal
import io
import json
import threading
import uuid

from kafkalite.client.serialization import (protobuf_message_indexes,
                                            protobuf_schema_classes)
from kafkalite.http_access import basic_credentials
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.errors import (AUTHORIZATION_FAILED, BAD_REQUEST, ProxyError)

# Confluent REST Proxy's codes for the schema-based formats
KEY_SCHEMA_MISSING = 42201
VALUE_SCHEMA_MISSING = 42202
JSON_CONVERSION = 42203
INVALID_SCHEMA = 42205
SCHEMA_REGISTRY_ERROR = 40801       # "Schema registration or lookup failed"

# embedded format -> the registry's schemaType
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "jsonschema": "JSON"}
SUBJECT_PREFIX = "subject:"        # a subject's ACL resource (registry/authorization.py)
CACHED_CLIENTS = 64                 # registry clients kept, one per caller's credentials


def subject_of(topic: str, is_key: bool) -> str:
    """TopicNameStrategy, Confluent's proxy's default."""
    return f"{topic}-{'key' if is_key else 'value'}"


def _registry_error(exc) -> ProxyError:
    code = getattr(exc, "error_code", None)
    status = getattr(exc, "http_status_code", None)
    message = getattr(exc, "error_message", None) or str(exc)
    if code == 40301 or status == 403:
        return ProxyError(AUTHORIZATION_FAILED, message)
    if code in (42201, 42202) or status == 422:
        return ProxyError(INVALID_SCHEMA, f"Invalid schema: {message}")
    return ProxyError(SCHEMA_REGISTRY_ERROR, f"Schema registration or lookup failed: "
                                             f"{message}")


def from_avro_json(data, parsed_schema):
    """A value given in Avro's JSON encoding (the Avro specification's
    "JSON Encoding", which Confluent's proxy reads with Avro's JsonDecoder):
    a union's non-null value as ``{"<branch type>": value}`` (a named
    type's full name), bytes and fixed as strings of code points 0-255,
    as the Python object the serializer writes; 42203 when it is not."""
    # fastavro's json_reader without its wrapper, for return_record_name: a
    # union's record branch comes back as (name, value), so the serializer
    # writes the branch named, not the first whose fields fit
    from fastavro._read_py import reader
    from fastavro.io.json_decoder import AvroJSONDecoder
    try:
        return next(reader(AvroJSONDecoder(io.StringIO(json.dumps(data))), parsed_schema,
                           return_record_name=True))
    except (ValueError, TypeError, KeyError, AttributeError, IndexError,
            StopIteration) as exc:
        raise ProxyError(JSON_CONVERSION, f"Conversion of JSON to Avro failed: "
                                          f"{type(exc).__name__}: {exc} (Avro's JSON "
                                          f"encoding is expected: a union's value as "
                                          f'{{"<type>": value}} or null)') from None


def to_avro_json(value, parsed_schema):
    """A deserialized Avro value in Avro's JSON encoding, as Confluent's
    proxy renders it (Avro's JsonEncoder over the writer's schema): a
    union's non-null value as ``{"<branch type>": value}``, bytes and
    fixed as strings of code points, logical types as their underlying
    type's (a decimal's bytes, a timestamp's long)."""
    import fastavro
    out = io.StringIO()
    fastavro.json_writer(out, parsed_schema, [value])
    return json.loads(out.getvalue())


def jsonable(value):
    """A deserialized JSON Schema value as JSON: bytes as one char per
    byte, decimals as text, dates and times in ISO 8601, UUIDs as text."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _protobuf_class(client, registered, indexes=(0,)):
    """A registry Protobuf schema's message as a class (the first one by
    default: Confluent's proxy writes the schema's first message), its
    imports resolved through the registry (references) or protobuf's own
    well-known types."""
    def fetch(subject, version):
        sub = client.get_version(subject, version, fmt="serialized")
        return sub.schema.schema_str, _triples(sub.schema.references)
    try:
        classes = protobuf_schema_classes(registered.schema_str,
                                          _triples(registered.references), fetch,
                                          "proxy.proto")
    except ValueError as exc:
        if "no message" in str(exc):
            raise ProxyError(INVALID_SCHEMA, f"Invalid schema: {exc}") from None
        raise ProxyError(SCHEMA_REGISTRY_ERROR,
                         f"Schema registration or lookup failed: {exc}") from None
    return classes(indexes)


def _triples(references) -> list:
    return [(ref.name, ref.subject, ref.version) for ref in references or ()]


class SchemaFormats:
    """The proxy's way to the registry: its address, a client per caller's
    credentials, the serializers made for each schema."""

    def __init__(self, admin, client_config: dict, registry_url: str | None = None):
        self.admin = admin
        self.client_config = client_config
        self._url = registry_url
        self._lock = threading.Lock()
        self._clients: dict[tuple, object] = {}
        self._writers: dict[tuple, tuple] = {}
        self._readers: dict[tuple, object] = {}

    # ---- the registry -------------------------------------------------------------------------

    def url(self) -> str:
        if self._url is None:
            try:
                endpoints = self.admin.server_endpoints()
            except Exception as exc:
                raise ProxyError(SCHEMA_REGISTRY_ERROR, f"Schema registration or lookup "
                                                        f"failed: the node's endpoints: "
                                                        f"{exc}") from None
            url = endpoints.get("schema_registry")
            if not url:
                raise ProxyError(SCHEMA_REGISTRY_ERROR, "Schema registration or lookup "
                                                        "failed: this node serves no schema "
                                                        "registry (schema_registry_port -1)")
            self._url = url
        return self._url

    def client(self, req, serialized: bool = False):
        """The registry client that acts as the caller: their HTTP Basic
        credentials when they logged in with them, none otherwise.
        ``serialized``: the one that fetches Protobuf schemas as
        descriptors; a client caches a schema by id whatever form it was
        fetched (or registered) in, so the forms never share one."""
        from confluent_kafka.schema_registry import SchemaRegistryClient
        credentials = basic_credentials(req.environ)
        with self._lock:
            client = self._clients.get((credentials, serialized))
            if client is None:
                conf = {"url": self.url()}
                if credentials is not None:
                    conf["basic.auth.user.info"] = credentials
                ca = self.client_config.get("ssl.ca.location")
                if ca and conf["url"].startswith("https"):
                    conf["ssl.ca.location"] = ca
                if len(self._clients) >= CACHED_CLIENTS:
                    # the serializers are keyed by their client's id(): they
                    # go with it, so that no id is reused while one is kept
                    self._clients.clear()
                    self._writers.clear()
                    self._readers.clear()
                client = self._clients[(credentials, serialized)] = SchemaRegistryClient(conf)
            return client

    # ---- producing ----------------------------------------------------------------------------

    def schema_id(self, req, fmt: str, topic: str, is_key: bool, schema=None,
                  schema_id=None, subject: str | None = None, version=None) -> int:
        """The id of the schema a produce names: text registered under the
        subject (TopicNameStrategy unless named), an id as it is, or a
        subject's version (``latest`` or a number) looked up."""
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        client = self.client(req)
        subject = subject or subject_of(topic, is_key)
        try:
            if schema_id is not None:
                if not isinstance(schema_id, int) or isinstance(schema_id, bool):
                    raise ProxyError(BAD_REQUEST, "a schema id is an integer")
                return schema_id
            if schema is not None:
                if not isinstance(schema, str):
                    raise ProxyError(INVALID_SCHEMA, "Invalid schema: a schema is text")
                # asked here too: the client answers a schema it registered
                # before from its cache, without asking the registry again
                req.access.require(Op.WRITE, Res.TOPIC, SUBJECT_PREFIX + subject)
                return client.register_schema(subject, Schema(schema, SCHEMA_TYPES[fmt]))
            if version is None or version == "latest" or version == -1:
                return client.get_latest_version(subject).schema_id
            return client.get_version(subject, int(version)).schema_id
        except SchemaRegistryError as exc:
            raise _registry_error(exc) from None
        except ProxyError:
            raise
        except (ValueError, TypeError) as exc:
            raise ProxyError(BAD_REQUEST, str(exc)) from None
        except Exception as exc:        # the registry unreachable
            raise ProxyError(SCHEMA_REGISTRY_ERROR, f"Schema registration or lookup failed: "
                                                    f"{type(exc).__name__}: {exc}") from None

    def encode_v3(self, req, topic: str, is_key: bool, spec: dict):
        """A v3 key or value with a schema: (bytes, its answer's info)."""
        kind = str(spec.get("type") or "").upper() or None
        fmt = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSONSCHEMA": "jsonschema"}.get(kind)
        if kind is not None and fmt is None:
            raise ProxyError(BAD_REQUEST, f"type {kind} does not go with a schema")
        schema = spec.get("schema")
        if schema is not None and fmt is None:
            raise ProxyError(BAD_REQUEST, "a schema needs its type: AVRO, PROTOBUF or "
                                          "JSONSCHEMA")
        subject = spec.get("subject") or self._subject(spec.get("subject_name_strategy"),
                                                       topic, is_key, fmt, schema)
        schema_id = self.schema_id(req, fmt or "avro", topic, is_key, schema=schema,
                                   schema_id=spec.get("schema_id"), subject=subject,
                                   version=spec.get("schema_version"))
        encode, fmt = self.writer(req, fmt, schema_id, subject, with_format=True)
        raw = encode(spec.get("data"), topic, is_key)
        return raw, {"type": {"avro": "AVRO", "protobuf": "PROTOBUF",
                              "jsonschema": "JSONSCHEMA"}[fmt], "size": len(raw),
                     "subject": None if spec.get("schema_id") is not None else subject,
                     "schema_id": schema_id}

    @staticmethod
    def _subject(strategy, topic: str, is_key: bool, fmt, schema) -> str:
        """Confluent's subject name strategies: TOPIC_NAME (the default);
        RECORD_NAME and TOPIC_RECORD_NAME from an Avro schema's full name."""
        strategy = str(strategy or "TOPIC_NAME").upper()
        if strategy == "TOPIC_NAME":
            return subject_of(topic, is_key)
        if strategy in ("RECORD_NAME", "TOPIC_RECORD_NAME") and fmt == "avro" and schema:
            try:
                parsed = json.loads(schema)
                name = parsed["name"]
            except (ValueError, KeyError, TypeError):
                raise ProxyError(INVALID_SCHEMA, "Invalid schema: an Avro record schema "
                                                 "with a name is expected") from None
            if "." not in name and parsed.get("namespace"):
                name = f"{parsed['namespace']}.{name}"
            return name if strategy == "RECORD_NAME" else f"{topic}-{name}"
        raise ProxyError(BAD_REQUEST, f"subject_name_strategy {strategy} is served for "
                                      f"TOPIC_NAME, and for RECORD_NAME and "
                                      f"TOPIC_RECORD_NAME with an Avro schema's text")

    def writer(self, req, fmt: str | None, schema_id: int, subject: str,
               with_format: bool = False):
        """``encode(data, topic, is_key) -> bytes`` for data in the schema
        of ``schema_id``, by confluent-kafka's serializer of ``fmt`` (None:
        the schema's own type; ``with_format``: (encode, the format)).
        The serializer finds the id under a subject: ``subject`` when the
        schema is one of its versions, else the first subject the registry
        names for the id (an id is usable on any topic, as Confluent's
        proxy has it)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import (MessageField, SerializationContext,
                                                   SerializationError)
        client = self.client(req)
        key = (id(client), fmt, schema_id, subject)
        hit = self._writers.get(key)
        if hit is None:
            try:
                registered = client.get_schema(schema_id)
                found = {v: k for k, v in SCHEMA_TYPES.items()}.get(
                    registered.schema_type or "AVRO")
                if fmt is not None and found != fmt:
                    raise ProxyError(SCHEMA_REGISTRY_ERROR, f"Schema registration or lookup "
                                                            f"failed: schema {schema_id} is "
                                                            f"{registered.schema_type}, not "
                                                            f"{SCHEMA_TYPES[fmt]}")
                if found == "protobuf":
                    registered = self.client(req, serialized=True).get_schema(
                        schema_id, fmt="serialized")
                subjects = client.get_subjects_by_schema_id(schema_id)
                if not subjects:
                    raise ProxyError(SCHEMA_REGISTRY_ERROR, f"Schema registration or lookup "
                                                            f"failed: schema {schema_id} is "
                                                            f"under no subject")
                chosen = subject if subject in subjects else subjects[0]
            except SchemaRegistryError as exc:
                raise _registry_error(exc) from None
            except ProxyError:
                raise
            except Exception as exc:    # the registry unreachable
                raise ProxyError(SCHEMA_REGISTRY_ERROR, f"Schema registration or lookup "
                                                        f"failed: {type(exc).__name__}: "
                                                        f"{exc}") from None
            hit = self._writers[key] = (self._serializer(
                self.client(req, serialized=True) if found == "protobuf" else client,
                found, schema_id, registered, chosen), found)
        encode, fmt = hit

        def encode_checked(data, topic: str, is_key: bool) -> bytes:
            ctx = SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)
            try:
                return encode(data, ctx)
            except SchemaRegistryError as exc:
                raise _registry_error(exc) from None
            except ProxyError:
                raise
            except (SerializationError, ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ProxyError(JSON_CONVERSION, f"Conversion of JSON to Object failed: "
                                                  f"{exc}") from None
        return (encode_checked, fmt) if with_format else encode_checked

    @staticmethod
    def _serializer(client, fmt: str, schema_id: int, registered, subject: str):
        conf = {"auto.register.schemas": False, "use.schema.id": schema_id,
                "subject.name.strategy": lambda ctx, record_name: subject}
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer
            serializer = AvroSerializer(client, registered, conf=conf)
            # the schema the serializer writes with, its references resolved
            parsed = serializer._get_parsed_schema(registered)

            def encode_avro(data, ctx):
                return serializer(from_avro_json(data, parsed), ctx)
            return encode_avro
        if fmt == "jsonschema":
            from confluent_kafka.schema_registry.json_schema import JSONSerializer
            return JSONSerializer(registered, client, conf=conf)
        from google.protobuf import json_format
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        cls = _protobuf_class(client, registered)
        serializer = ProtobufSerializer(cls, client, conf={**conf, "skip.known.types": True})

        def encode(data, ctx):
            try:
                msg = json_format.ParseDict(data, cls())
            except json_format.ParseError as exc:
                raise ProxyError(JSON_CONVERSION, f"Conversion of JSON to Protobuf failed: "
                                                  f"{exc}") from None
            return serializer(msg, ctx)
        return encode

    # ---- consuming ----------------------------------------------------------------------------

    def reader(self, req, fmt: str):
        """``decode(payload, topic, is_key) -> JSON`` of a record written in
        Confluent's wire format with ``fmt``, its writer's schema fetched by
        the id it carries (as the caller)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import (MessageField, SerializationContext,
                                                   SerializationError)
        client = self.client(req, serialized=fmt == "protobuf")

        def decode(payload: bytes, topic: str, is_key: bool):
            if len(payload) < 5 or payload[0] != 0:
                raise SerializationError("not Confluent's wire format (magic byte 0, "
                                         "schema id)")
            ctx = SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)
            try:
                return self._deserialized(client, fmt, payload, ctx)
            except SchemaRegistryError as exc:
                raise _registry_error(exc) from None
        return decode

    def _deserialized(self, client, fmt: str, payload: bytes, ctx):
        if fmt == "avro":
            hit = self._readers.get((id(client), fmt))
            if hit is None:
                from confluent_kafka.schema_registry.avro import AvroDeserializer
                # union branches of named types come back as (name, value),
                # so that the JSON names the branch written, not a guess
                hit = self._readers[(id(client), fmt)] = AvroDeserializer(
                    client, return_record_name=True)
            writer = hit._get_parsed_schema(client.get_schema(int.from_bytes(payload[1:5],
                                                                             "big")))
            return to_avro_json(hit(payload, ctx), writer)
        if fmt == "jsonschema":
            hit = self._readers.get((id(client), fmt))
            if hit is None:
                from confluent_kafka.schema_registry.json_schema import JSONDeserializer
                hit = self._readers[(id(client), fmt)] = JSONDeserializer(
                    None, schema_registry_client=client)
            return jsonable(hit(payload, ctx))
        return self._protobuf(client, payload, ctx)

    def _protobuf(self, client, payload: bytes, ctx):
        """The writer's message (by the id and message indexes the payload
        carries) as JSON, as Confluent's proxy prints it (protobuf's JSON
        mapping, fields at their defaults included)."""
        from google.protobuf import json_format
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        schema_id = int.from_bytes(payload[1:5], "big")
        indexes = tuple(protobuf_message_indexes(payload, 5)[0])
        key = (id(client), "protobuf", schema_id, indexes)
        hit = self._readers.get(key)
        if hit is None:
            registered = client.get_schema(schema_id, fmt="serialized")
            cls = _protobuf_class(client, registered, indexes)
            hit = self._readers[key] = ProtobufDeserializer(
                cls, {"use.deprecated.format": False}, schema_registry_client=client)
        msg = hit(payload, ctx)
        return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)
