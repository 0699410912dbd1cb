"""Parsing a registered schema, and its stored and canonical forms, per type.

A schema arrives as Confluent's clients send it: ``schema`` (a string),
``schemaType`` (``AVRO`` when absent, ``PROTOBUF`` or ``JSON``) and
``references`` (``[{"name", "subject", "version"}]``: for Avro the named
types another subject defines, for Protobuf the imports, for JSON Schema
the ``$ref`` targets). ``parse`` checks it with the type's own library and
answers a ``ParsedSchema``:

- ``text``: what is stored and served back. Avro: as Avro Java writes
  it, Confluent's ``canonicalString`` (avro_schemas.py); with
  ``normalize``, names fully qualified and keys in one order. JSON Schema:
  the JSON, compacted (Confluent's ``canonicalString``); with
  ``normalize``, keys sorted. Protobuf: as sent,
  ``.proto`` text (Java clients) or a base64 ``FileDescriptorProto``
  (confluent-kafka's Python serializer).
- ``identity``: equal for two registrations that are the same schema, the
  key that gives a schema its one global id. Protobuf's is the resolved
  descriptor, so a ``.proto`` text and its descriptor are one schema.
- ``formatted("serialized")``: a Protobuf schema as a base64 descriptor,
  what confluent-kafka's deserializer asks for.

A reference's own references are followed, as Confluent's
``AbstractSchemaProvider.resolveReferences`` follows them: ``references``
names the schema's own, and each parse takes their whole closure
(``closure``), dependencies first.

Libraries: fastavro parses and checks Avro (defaults, references as named
types), avro's parser its names for a new schema (avro_schemas.py), and
avro's ``Schema`` is built for compatibility.py; proto-schema-parser reads
``.proto`` text, protobuf's ``DescriptorPool`` resolves and checks it;
jsonschema checks a JSON Schema against its draft's metaschema, draft-07
when it names none (``$schema``), as Confluent's JSON Schema provider
does.

Who may call: store.py and compatibility.py, on any thread (nothing here
keeps state).
"""
from __future__ import annotations

import base64
import binascii
import json

from kafkalite.registry.errors import INVALID_SCHEMA, RegistryError

AVRO, PROTOBUF, JSON = "AVRO", "PROTOBUF", "JSON"
# GET /schemas/types answers Confluent's order
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)


def invalid(message: str) -> RegistryError:
    return RegistryError(INVALID_SCHEMA, f"Invalid schema: {message}")


class ParsedSchema:
    """One schema, checked; ``references``: ParsedSchema of each reference,
    by reference name (its imports / named types)."""

    def __init__(self, schema_type: str, text: str, identity: str, parsed, references: dict):
        self.schema_type = schema_type
        self.text = text
        self.identity = identity
        self.parsed = parsed          # the library's object: a dict, or a FileDescriptorProto
        self.references = references
        # Protobuf: the .proto text served by default (Confluent's answer),
        # as sent, or rendered from a descriptor sent in base64
        self.proto_text = text if schema_type == PROTOBUF and not _is_base64(text) else None

    def formatted(self, fmt: str | None) -> str:
        if self.schema_type == PROTOBUF:
            if fmt == "serialized":
                return base64.standard_b64encode(self.parsed.SerializeToString()).decode("ascii")
            if self.proto_text is None:
                self.proto_text = proto_text(self.parsed)
            return self.proto_text
        return self.text


def parse(schema_type: str | None, text, references: dict | None = None,
          normalize: bool = False, new: bool = False) -> ParsedSchema:
    """``references``: reference name -> its ParsedSchema (store.py
    resolves them). ``new``: a schema registered (or checked) anew, which
    Confluent checks more strictly than one already stored (Avro's names
    and union defaults: avro_schemas.py). Raises RegistryError 42201
    naming what is wrong."""
    schema_type = schema_type or AVRO
    if not isinstance(text, str) or not text.strip():
        raise invalid("'schema' must be a non-empty string")
    references = references or {}
    try:
        if schema_type == AVRO:
            return _parse_avro(text, references, normalize, new)
        if schema_type == PROTOBUF:
            return _parse_protobuf(text, references)
        if schema_type == JSON:
            return _parse_json_schema(text, references, normalize)
    except RecursionError:
        raise invalid("nested too deeply") from None
    raise RegistryError(INVALID_SCHEMA, f"Invalid schema type {schema_type!r}: "
                                        f"one of {', '.join(SCHEMA_TYPES)}")


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def closure(references: dict) -> dict:
    """Reference name -> ParsedSchema of ``references`` and of their own
    references, all the way down, each after what it references (the
    order a parser must see them in); a name met twice is taken once."""
    out: dict = {}

    def visit(refs: dict) -> None:
        for name, ref in refs.items():
            if name not in out:
                visit(ref.references)
                out.setdefault(name, ref)
    visit(references)
    return out


# ---- Avro ---------------------------------------------------------------------------------

def _parse_avro(text: str, references: dict, normalize: bool, new: bool) -> ParsedSchema:
    from fastavro.schema import SchemaParseException, UnknownType

    from kafkalite.registry import avro_schemas
    try:
        obj = json.loads(text)
    except ValueError:
        obj = text.strip()          # a bare primitive name: "string"
        if obj.startswith(("{", "[", '"')):
            raise invalid("not JSON")
    every = list(closure(references).values())
    try:
        named = avro_schemas.parse(obj, every)
        if new:
            avro_schemas.check_new(obj, every, named)
    except UnknownType as exc:
        raise invalid(f"unknown type {exc.name!r}") from None
    except (SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise invalid(str(exc) or type(exc).__name__) from None
    form = avro_schemas.canonical(obj, every)
    obj = _normalized_avro(obj, None) if normalize else form
    # the identity is the canonical form's, whichever text is stored (a
    # normalized one is the same schema), and ignores the order of a
    # property's keys too (Avro Java keeps that order in its text)
    return ParsedSchema(AVRO, _compact(obj),
                        json.dumps(form, sort_keys=True, separators=(",", ":")), obj, references)


# The order of Avro's Parsing Canonical Form, with the attributes it drops
# but a reader needs (default, aliases, doc, logicalType ...) after it.
_AVRO_KEY_ORDER = ("type", "name", "namespace", "fields", "symbols", "items", "values", "size",
                   "default", "aliases", "doc", "order", "logicalType", "precision", "scale")


def _normalized_avro(obj, namespace):
    """Confluent's ``normalize=true`` for Avro: full names, one key order."""
    if isinstance(obj, list):
        return [_normalized_avro(o, namespace) for o in obj]
    if not isinstance(obj, dict):
        return obj
    if set(obj) == {"type"} and isinstance(obj["type"], str):
        return obj["type"]            # {"type": "string"} is "string"
    out = dict(obj)
    if out.get("type") in ("record", "error", "enum", "fixed") and "name" in out:
        name = out["name"]
        ns = out.pop("namespace", namespace)
        if "." not in name and ns:
            name = f"{ns}.{name}"
        out["name"] = name
        namespace = name.rpartition(".")[0] or None
    if "fields" in out:
        out["fields"] = [{**f, "type": _normalized_avro(f["type"], namespace)}
                         for f in out["fields"]]
        out["fields"] = [_ordered(f) for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _normalized_avro(out[key], namespace)
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _normalized_avro(out["type"], namespace)
    return _ordered(out)


def _ordered(d: dict) -> dict:
    rank = {k: i for i, k in enumerate(_AVRO_KEY_ORDER)}
    return dict(sorted(d.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def avro_schema(parsed: ParsedSchema):
    """avro's Schema of ``parsed`` (named types of its references known),
    for avro.compatibility."""
    import avro.schema
    names = avro.schema.Names()
    for ref in closure(parsed.references).values():
        avro.schema.make_avsc_object(ref.parsed, names)
    return avro.schema.make_avsc_object(parsed.parsed, names)


# ---- Protobuf -----------------------------------------------------------------------------

_SCALARS = {"double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6,
            "fixed32": 7, "bool": 8, "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15,
            "sfixed64": 16, "sint32": 17, "sint64": 18}
LABEL_OPTIONAL, LABEL_REQUIRED, LABEL_REPEATED = 1, 2, 3
TYPE_MESSAGE, TYPE_ENUM = 11, 14


def _is_base64(text: str) -> bool:
    """A descriptor in base64, not .proto text (which always has ';' or '{')."""
    return "{" not in text and ";" not in text


def _parse_protobuf(text: str, references: dict) -> ParsedSchema:
    from google.protobuf import descriptor_pb2
    proto = None
    stripped = text.strip()
    if _is_base64(stripped):
        # a base64 FileDescriptorProto (confluent-kafka's Python serializer)
        try:
            proto = descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(stripped.encode("ascii"), validate=True))
        except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
            raise invalid(f"neither .proto text nor a base64 FileDescriptorProto: {exc}") \
                from None
        except Exception as exc:           # protobuf's DecodeError
            raise invalid(f"not a FileDescriptorProto: {exc}") from None
    else:
        proto = _proto_from_text(text)
    resolved = _resolve_proto(proto, references)
    identity = descriptor_pb2.FileDescriptorProto()
    identity.CopyFrom(resolved)
    identity.ClearField("name")
    return ParsedSchema(PROTOBUF, text, base64.standard_b64encode(
        identity.SerializeToString(deterministic=True)).decode("ascii"), resolved, references)


def _resolve_proto(proto, references: dict):
    """``proto`` resolved by protobuf's DescriptorPool (type names fully
    qualified, each named type's kind known); raises 42201 on an unknown
    type, a field number used twice, a missing import ..."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    pool = descriptor_pool.DescriptorPool()
    added: set = set()
    references = closure(references)        # an import's own imports too

    def add(name: str, fdp) -> None:
        if name in added:
            return
        for dep in fdp.dependency:
            if dep in references:
                add(dep, references[dep].parsed)
            elif _is_builtin(dep):
                add_builtin(dep)
        copy = descriptor_pb2.FileDescriptorProto()
        copy.CopyFrom(fdp)
        copy.name = name
        pool.Add(copy)
        added.add(name)

    def add_builtin(dep: str) -> None:
        if dep in added:
            return
        from google.protobuf import descriptor_pool as dp
        try:
            fd = dp.Default().FindFileByName(dep)
        except KeyError:
            _import_well_known(dep)
            fd = dp.Default().FindFileByName(dep)
        builtin = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(builtin)
        add(dep, builtin)

    main = proto.name or "schema.proto"
    try:
        add(main, proto)
        fd = pool.FindFileByName(main)
    except Exception as exc:            # protobuf raises TypeError / its own errors
        raise invalid(str(exc)) from None
    out = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(out)
    out.name = proto.name
    return out


def _is_builtin(name: str) -> bool:
    return name.startswith(("google/protobuf/", "google/type/", "confluent/"))


def _import_well_known(dep: str) -> None:
    import importlib
    module = dep[:-len(".proto")].replace("/", ".") + "_pb2"
    if dep.startswith("confluent/"):
        # Confluent's own (confluent/types/decimal.proto, confluent/meta.proto) ship with
        # confluent-kafka's Python package
        module = "confluent_kafka.schema_registry." + module
    try:
        importlib.import_module(module)
    except ImportError:
        raise invalid(f"import {dep!r} is neither a reference nor a well-known type") from None


def _proto_from_text(text: str):
    """A ``.proto`` text as an unresolved FileDescriptorProto (type names as
    written: the pool resolves them by protobuf's scoping rules)."""
    from google.protobuf import descriptor_pb2
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser
    from antlr4.error.ErrorListener import ErrorListener

    class _Refuse(ErrorListener):
        """ANTLR's default listener prints a syntax error and recovers: refuse it."""

        def syntaxError(self, recognizer, offending, line, column, msg, e):
            raise invalid(f".proto text line {line}:{column}: {msg}")

    def quiet(recognizer) -> None:
        recognizer.removeErrorListeners()
        recognizer.addErrorListener(_Refuse())
    try:
        tree = Parser(setup_lexer=quiet, setup_parser=quiet).parse(text)
    except RegistryError:
        raise
    except Exception as exc:            # the AST builder's errors have no common type
        raise invalid(f".proto text: {exc}") from None
    fdp = descriptor_pb2.FileDescriptorProto(syntax=tree.syntax or "proto2")
    proto3 = fdp.syntax == "proto3"
    for element in tree.file_elements:
        if isinstance(element, ast.Package):
            fdp.package = element.name
        elif isinstance(element, ast.Import):
            fdp.dependency.append(element.name)
        elif isinstance(element, ast.Message):
            _message(fdp.message_type.add(), element, proto3)
        elif isinstance(element, ast.Enum):
            _enum(fdp.enum_type.add(), element)
    return fdp


def _message(out, message, proto3: bool) -> None:
    from proto_schema_parser import ast
    out.name = message.name
    synthetic = []          # proto3 'optional' fields: their oneofs go after the real ones
    for element in message.elements:
        if isinstance(element, ast.Field):
            f = _field(out, element)
            if proto3 and element.cardinality == ast.FieldCardinality.OPTIONAL:
                synthetic.append(f)
        elif isinstance(element, ast.MapField):
            entry = out.nested_type.add(name=_camel(element.name) + "Entry")
            entry.options.map_entry = True
            _typed(entry.field.add(name="key", number=1, label=LABEL_OPTIONAL), element.key_type)
            _typed(entry.field.add(name="value", number=2, label=LABEL_OPTIONAL),
                   element.value_type)
            out.field.add(name=element.name, number=element.number, label=LABEL_REPEATED,
                          type=TYPE_MESSAGE, type_name=entry.name)
        elif isinstance(element, ast.OneOf):
            index = len(out.oneof_decl)
            out.oneof_decl.add(name=element.name)
            for field in element.elements:
                if isinstance(field, ast.Field):
                    _field(out, field).oneof_index = index
        elif isinstance(element, ast.Message):
            _message(out.nested_type.add(), element, proto3)
        elif isinstance(element, ast.Enum):
            _enum(out.enum_type.add(), element)
        elif isinstance(element, ast.Reserved):
            out.reserved_name.extend(n for n in element.names if isinstance(n, str))
    for f in synthetic:
        # as protoc writes proto3 'optional': a one-field oneof, after the real ones
        f.proto3_optional = True
        f.oneof_index = len(out.oneof_decl)
        out.oneof_decl.add(name="_" + f.name)


def _field(out, field):
    from proto_schema_parser import ast
    label = {ast.FieldCardinality.REPEATED: LABEL_REPEATED,
             ast.FieldCardinality.REQUIRED: LABEL_REQUIRED}.get(field.cardinality, LABEL_OPTIONAL)
    f = out.field.add(name=field.name, number=field.number, label=label)
    _typed(f, field.type)
    return f


def _typed(f, type_name: str) -> None:
    if type_name in _SCALARS:
        f.type = _SCALARS[type_name]
    else:
        f.type_name = type_name     # message or enum: the pool decides which


def _enum(out, enum) -> None:
    from proto_schema_parser import ast
    out.name = enum.name
    for value in enum.elements:
        if isinstance(value, ast.EnumValue):
            out.value.add(name=value.name, number=value.number)


_SCALAR_NAMES = {number: name for name, number in _SCALARS.items()}


def proto_text(fdp) -> str:
    """A resolved FileDescriptorProto as .proto text (proto-schema-parser's
    generator): messages, fields, maps, oneofs, enums, imports and the
    package; options are not rendered."""
    from proto_schema_parser import ast
    from proto_schema_parser.generator import Generator
    proto3 = fdp.syntax == "proto3"

    def type_of(f) -> str:
        return _SCALAR_NAMES.get(f.type) or f.type_name

    def message(m):
        entries = {f"{e.name}": e for e in m.nested_type if e.options.map_entry}
        elements, oneofs = [], {}
        for f in m.field:
            entry = entries.get(f.type_name.rpartition(".")[2]) if f.type == TYPE_MESSAGE \
                else None
            if entry is not None and f.label == LABEL_REPEATED:
                key, value = entry.field
                elements.append(ast.MapField(f.name, f.number, type_of(key), type_of(value)))
                continue
            cardinality = {LABEL_REPEATED: ast.FieldCardinality.REPEATED,
                           LABEL_REQUIRED: ast.FieldCardinality.REQUIRED}.get(f.label)
            if f.proto3_optional or (not proto3 and f.label == LABEL_OPTIONAL
                                     and not f.HasField("oneof_index")):
                cardinality = ast.FieldCardinality.OPTIONAL
            field = ast.Field(f.name, f.number, type_of(f), cardinality)
            if f.HasField("oneof_index") and not f.proto3_optional:
                if f.oneof_index not in oneofs:
                    oneofs[f.oneof_index] = ast.OneOf(m.oneof_decl[f.oneof_index].name)
                    elements.append(oneofs[f.oneof_index])
                oneofs[f.oneof_index].elements.append(
                    ast.Field(f.name, f.number, type_of(f)))
            else:
                elements.append(field)
        elements += [message(n) for n in m.nested_type if not n.options.map_entry]
        elements += [enum(e) for e in m.enum_type]
        if m.reserved_name:
            elements.append(ast.Reserved(names=list(m.reserved_name)))
        return ast.Message(m.name, elements)

    def enum(e):
        return ast.Enum(e.name, [ast.EnumValue(v.name, v.number) for v in e.value])

    elements = []
    if fdp.package:
        elements.append(ast.Package(fdp.package))
    elements += [ast.Import(d) for d in fdp.dependency]
    elements += [message(m) for m in fdp.message_type]
    elements += [enum(e) for e in fdp.enum_type]
    return Generator().generate(ast.File(syntax=fdp.syntax or "proto2",
                                         file_elements=elements))


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


# ---- JSON Schema --------------------------------------------------------------------------

def _parse_json_schema(text: str, references: dict, normalize: bool) -> ParsedSchema:
    import jsonschema
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise invalid(f"not JSON: {exc}") from None
    if not isinstance(obj, (dict, bool)):
        raise invalid("a JSON Schema is an object or a boolean")
    try:
        # no $schema: draft-07, Confluent's default (JsonSchema's
        # DEFAULT_SPEC_VERSION), so draft-07's tuple "items" is valid
        jsonschema.validators.validator_for(
            obj, default=jsonschema.Draft7Validator).check_schema(obj)
    except jsonschema.SchemaError as exc:
        raise invalid(exc.message) from None
    if normalize:
        obj = json.loads(json.dumps(obj, sort_keys=True))
    stored = _compact(obj)
    return ParsedSchema(JSON, stored, stored, obj, references)
