"""Compatibility levels, and each schema type's reader/writer rules.

A level says which earlier versions a new schema is checked against and
in which direction (Confluent's "Schema Evolution and Compatibility"):

- BACKWARD: consumers on the new schema read data written with the
  latest version (reader = new, writer = latest); _TRANSITIVE: every
  earlier live version, not only the latest;
- FORWARD: consumers on the latest version read data written with the
  new one (reader = latest, writer = new); _TRANSITIVE: every earlier one;
- FULL: both; FULL_TRANSITIVE: both against every earlier live version;
- NONE: nothing is checked.

The rules, per type:

- Avro: Avro's own schema resolution rules, as avro's
  ``ReaderWriterCompatibilityChecker`` implements them (a reader field
  missing from the writer needs a default; type promotion int -> long ->
  float -> double, string <-> bytes; a writer's enum symbol the reader
  lacks; names matched with aliases).
- Protobuf: written here, after Confluent's ProtobufSchema differences:
  what breaks the wire or a reader of the other version is incompatible
  (a message removed, a field number reused with a type of another wire
  kind or another named type, a field moved between repeated and single,
  a required field added or removed, several fields moved into one
  oneof, the package changed); adding or removing an optional field is
  compatible (its number should be reserved, which Protobuf cannot be
  made to check across versions).
- JSON Schema: written here, after Confluent's JsonSchema differences and
  its open/closed content model: an object is closed when
  ``additionalProperties`` is false. A reader's new property is
  incompatible with an open writer (old data may hold anything under that
  name) and compatible with a closed one unless required; a property the
  reader drops is compatible when the reader is open and not when it is
  closed; a type narrowed, an enum narrowed, a required property added, a
  bound tightened or ``additionalProperties`` turned false are
  incompatible.

Each check answers the reasons, as Confluent's ``verbose=true`` and its
409 message list them; none: compatible.

Who may call: store.py and rest.py, any thread (no state).
"""
from __future__ import annotations

from kafkalite.registry.schemas import AVRO, JSON, PROTOBUF, ParsedSchema, avro_schema

BACKWARD, FORWARD, FULL, NONE = "BACKWARD", "FORWARD", "FULL", "NONE"
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")
DEFAULT_LEVEL = BACKWARD


def check(level: str, new: ParsedSchema, previous: list[ParsedSchema]) -> list[str]:
    """Why ``new`` may not follow ``previous`` (live versions, oldest
    first) at ``level``; empty when it may."""
    if level == NONE or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    direction = level.removesuffix("_TRANSITIVE")
    reasons: list[str] = []
    for old in reversed(against):        # the latest first, as Confluent reports
        if direction in (BACKWARD, FULL):
            reasons += _reader_writer(reader=new, writer=old)
        if direction in (FORWARD, FULL):
            reasons += _reader_writer(reader=old, writer=new)
        if reasons:
            break
    return reasons


def _reader_writer(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    if reader.schema_type != writer.schema_type:
        return [f"Incompatible schema type: {writer.schema_type} data read as "
                f"{reader.schema_type}"]
    if reader.schema_type == AVRO:
        return _avro(reader, writer)
    if reader.schema_type == PROTOBUF:
        return _protobuf(reader.parsed, writer.parsed)
    if reader.schema_type == JSON:
        out: list[str] = []
        _json(reader.parsed, writer.parsed, "#", out)
        return out
    return []


# ---- Avro ---------------------------------------------------------------------------------

def _avro(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro_schema(reader), avro_schema(writer))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = sorted(k.name.upper() for k in result.incompatibilities)
    return [f"Incompatibility{{type:{kind}, location:{location}, message:{message}}}"
            for kind, location, message in zip(
                kinds + kinds[-1:] * len(result.messages), sorted(result.locations)
                or ["/"] * len(result.messages), sorted(result.messages))]


# ---- Protobuf -----------------------------------------------------------------------------

# Scalar types that read each other's wire bytes (protobuf's language
# guide, "Updating A Message Type"): varints, zigzag varints, 32-bit,
# 64-bit, length-delimited.
_WIRE_GROUPS = [{3, 4, 5, 8, 13, 14}, {17, 18}, {7, 15}, {6, 16}, {9, 12}]
_TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
               7: "fixed32", 8: "bool", 9: "string", 11: "message", 12: "bytes", 13: "uint32",
               14: "enum", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def _messages(fdp) -> dict:
    """Full name -> DescriptorProto of every message of the file, nested too."""
    out = {}

    def walk(prefix: str, messages) -> None:
        for m in messages:
            name = f"{prefix}.{m.name}" if prefix else m.name
            out[name] = m
            walk(name, m.nested_type)
    walk(fdp.package, fdp.message_type)
    return out


def _protobuf(reader, writer) -> list[str]:
    out = []
    if reader.package != writer.package:
        out.append(f"PACKAGE_CHANGED: {writer.package!r} -> {reader.package!r}")
    reader_messages = _messages(reader)
    for name, w in _messages(writer).items():
        r = reader_messages.get(name)
        if r is None:
            if not w.options.map_entry:
                out.append(f"MESSAGE_REMOVED: {name}")
            continue
        r_fields = {f.number: f for f in r.field}
        w_fields = {f.number: f for f in w.field}
        for number, wf in w_fields.items():
            rf = r_fields.get(number)
            where = f"{name}.{wf.name} (field {number})"
            if rf is None:
                if wf.label == 2:
                    out.append(f"REQUIRED_FIELD_REMOVED: {where}")
                continue
            if (rf.label == 3) != (wf.label == 3):
                out.append(f"FIELD_KIND_CHANGED: {where} repeated and single")
            elif wf.type in (11, 14) or rf.type in (11, 14):
                if rf.type != wf.type:
                    out.append(f"FIELD_KIND_CHANGED: {where} {_TYPE_NAMES[wf.type]} -> "
                               f"{_TYPE_NAMES[rf.type]}")
                elif rf.type_name != wf.type_name:
                    out.append(f"FIELD_NAMED_TYPE_CHANGED: {where} {wf.type_name} -> "
                               f"{rf.type_name}")
            elif rf.type != wf.type and not any(
                    {rf.type, wf.type} <= group for group in _WIRE_GROUPS):
                out.append(f"FIELD_SCALAR_KIND_CHANGED: {where} {_TYPE_NAMES[wf.type]} -> "
                           f"{_TYPE_NAMES[rf.type]}")
        for number, rf in r_fields.items():
            if number not in w_fields and rf.label == 2:
                out.append(f"REQUIRED_FIELD_ADDED: {name}.{rf.name} (field {number})")
        # several fields of the writer moved into one oneof: a writer may set
        # more than one of them, which the reader's oneof cannot hold
        for index, oneof in enumerate(r.oneof_decl):
            moved = [f for f in r.field if f.HasField("oneof_index") and f.oneof_index == index
                     and not f.proto3_optional and f.number in w_fields
                     and not w_fields[f.number].HasField("oneof_index")]
            if len(moved) > 1:
                out.append(f"MULTIPLE_FIELDS_MOVED_TO_ONEOF: {name}.{oneof.name}")
    return out


# ---- JSON Schema --------------------------------------------------------------------------

def _types(schema) -> set | None:
    t = schema.get("type")
    if t is None:
        return None                        # any type
    return set(t) if isinstance(t, list) else {t}


def _closed(schema) -> bool:
    return schema.get("additionalProperties", True) is False


_COMBINED = ("oneOf", "anyOf", "allOf")
_SUM = ("oneOf", "anyOf")


def _criterion(schema) -> str | None:
    if not isinstance(schema, dict):
        return None
    found = [k for k in _COMBINED if k in schema]
    return found[0] if len(found) == 1 else None


def _subschemas(schema, criterion: str) -> list:
    out = []
    for sub in schema[criterion]:
        if sub not in out:            # Confluent collapses duplicates (a set)
            out.append(sub)
    return out


def _readable(reader, writer, path: str) -> list:
    found: list = []
    _json(reader, writer, path, found)
    return found


def _matching(edges: dict, left: int) -> int:
    """The size of a maximum matching of the bipartite graph ``edges``
    (left index -> the right indexes it may pair with): Kuhn's augmenting
    paths, as Confluent's MaximumCardinalityMatch finds one."""
    paired: dict = {}

    def augment(i: int, seen: set) -> bool:
        for j in edges.get(i, ()):
            if j not in seen:
                seen.add(j)
                if j not in paired or augment(paired[j], seen):
                    paired[j] = i
                    return True
        return False
    return sum(augment(i, set()) for i in range(left))


def _json_combined(reader, writer, path: str, out: list) -> bool:
    """Confluent's SchemaDiff for combined schemas (oneOf, anyOf, allOf);
    False when neither side is one (the caller compares them)."""
    rc, wc = _criterion(reader), _criterion(writer)
    if rc is None and wc is None:
        return False
    if wc is None:
        # a reader's union of one, or a sum type one of whose subschemas reads the writer
        subs = _subschemas(reader, rc)
        if (len(subs) == 1 or rc in _SUM) and any(
                not _readable(sub, writer, f"{path}/{rc}") for sub in subs):
            return True
        out.append(f"TYPE_CHANGED at {path}: a schema -> {rc}")
        return True
    if rc is None:
        # a writer's union of one, or a product type one of whose factors the reader reads
        subs = _subschemas(writer, wc)
        if (len(subs) == 1 or wc == "allOf") and any(
                not _readable(reader, sub, f"{path}/{wc}") for sub in subs):
            return True
        out.append(f"TYPE_CHANGED at {path}: {wc} -> a schema")
        return True
    r_subs, w_subs = _subschemas(reader, rc), _subschemas(writer, wc)
    if rc != wc and not (rc == "anyOf" or (len(r_subs) == 1 and len(w_subs) == 1)
                         or (len(w_subs) == 1 and rc == "oneOf")
                         or (len(r_subs) == 1 and wc == "allOf")):
        out.append(f"COMBINED_TYPE_CHANGED at {path}: {wc} -> {rc}")
        return True
    if len(r_subs) > len(w_subs) and rc == "allOf":
        out.append(f"PRODUCT_TYPE_EXTENDED at {path}: allOf of {len(w_subs)} -> {len(r_subs)}")
    elif len(r_subs) < len(w_subs) and wc in _SUM:
        out.append(f"SUM_TYPE_NARROWED at {path}: {wc} of {len(w_subs)} -> {len(r_subs)}")
    edges = {i: [j for j, r in enumerate(r_subs) if not _readable(r, w, f"{path}/{wc}/{i}")]
             for i, w in enumerate(w_subs)}
    if _matching(edges, len(w_subs)) < min(len(w_subs), len(r_subs)):
        out.append(f"COMBINED_TYPE_SUBSCHEMAS_CHANGED at {path}: a {wc} subschema is read by "
                   f"none of the reader's")
    return True


def _json_tuple(reader, writer, path: str, out: list) -> None:
    """Draft-07 tuple ``items``, position by position (Confluent's
    ArraySchemaDiff: an item added to an open writer's, or removed from a
    closed reader's, list is incompatible)."""
    r_items = reader.get("items") if isinstance(reader.get("items"), list) else None
    w_items = writer.get("items") if isinstance(writer.get("items"), list) else None
    if r_items is None and w_items is None:
        return
    r_items, w_items = r_items or [], w_items or []
    for i, (r, w) in enumerate(zip(r_items, w_items)):
        _json(r, w, f"{path}/items/{i}", out)
    if len(r_items) > len(w_items) and writer.get("additionalItems", True) is not False and \
            any(r not in (True, {}) for r in r_items[len(w_items):]):
        out.append(f"ITEM_ADDED_TO_OPEN_CONTENT_MODEL at {path}: item {len(w_items)}")
    if len(w_items) > len(r_items) and reader.get("additionalItems", True) is False:
        out.append(f"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL at {path}: item {len(r_items)}")


def _json(reader, writer, path: str, out: list) -> None:
    """Can data valid under ``writer`` be read under ``reader``?"""
    if _json_combined(reader, writer, path, out):
        return
    if reader is True or reader == {}:
        return
    if writer is True or writer == {}:
        if reader is False or reader != {}:
            out.append(f"TYPE_NARROWED at {path}: anything -> {reader}")
        return
    if reader is False or writer is False:
        if reader is False and writer is not False:
            out.append(f"TYPE_NARROWED at {path}: nothing is readable")
        return
    rt, wt = _types(reader), _types(writer)
    if rt is not None:
        readable = rt | ({"integer"} if "number" in rt else set())
        if wt is None or not wt <= readable:
            out.append(f"TYPE_CHANGED at {path}: {sorted(wt) if wt else 'any'} -> {sorted(rt)}")
            return
    if "enum" in reader:
        missing = [v for v in writer.get("enum", [None]) if v not in reader["enum"]] \
            if "enum" in writer else ["(any value)"]
        if missing:
            out.append(f"ENUM_ARRAY_NARROWED at {path}: {missing} no longer allowed")
    for key, tighter in (("maximum", lambda r, w: w is None or r < w),
                         ("maxLength", lambda r, w: w is None or r < w),
                         ("maxItems", lambda r, w: w is None or r < w),
                         ("minimum", lambda r, w: w is None or r > w),
                         ("minLength", lambda r, w: w is None or r > w),
                         ("minItems", lambda r, w: w is None or r > w)):
        if key in reader and tighter(reader[key], writer.get(key)):
            out.append(f"{key.upper()}_NARROWED at {path}: {writer.get(key)} -> {reader[key]}")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        # Confluent's StringSchemaDiff: PATTERN_ADDED and PATTERN_CHANGED are
        # not among its compatible changes (PATTERN_REMOVED is)
        kind = "PATTERN_CHANGED" if "pattern" in writer else "PATTERN_ADDED"
        out.append(f"{kind} at {path}: {writer.get('pattern')!r} -> {reader['pattern']!r}")
    if "items" in reader and isinstance(reader["items"], dict):
        _json(reader["items"], writer.get("items", True), f"{path}/items", out)
    _json_tuple(reader, writer, path, out)
    r_props, w_props = reader.get("properties", {}), writer.get("properties", {})
    if not (r_props or w_props or "additionalProperties" in reader or "required" in reader):
        return
    for name, w_prop in w_props.items():
        if name in r_props:
            _json(r_props[name], w_prop, f"{path}/properties/{name}", out)
        elif _closed(reader):
            out.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {path}: {name}")
        elif isinstance(reader.get("additionalProperties"), dict):
            _json(reader["additionalProperties"], w_prop, f"{path}/properties/{name}", out)
    for name, r_prop in r_props.items():
        if name in w_props or r_prop is True or r_prop == {}:
            continue
        if not _closed(writer):
            out.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {path}: {name} (old data "
                       f"may hold any value under that name)")
        elif name in reader.get("required", []) and "default" not in r_prop:
            out.append(f"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at {path}: {name}")
    added = [n for n in reader.get("required", []) if n not in writer.get("required", [])
             and n in w_props and "default" not in r_props.get(n, {})]
    if added:
        out.append(f"REQUIRED_ATTRIBUTE_ADDED at {path}: {added}")
    if _closed(reader) and not _closed(writer):
        out.append(f"ADDITIONAL_PROPERTIES_REMOVED at {path}: the reader is closed, the "
                   f"writer open")
