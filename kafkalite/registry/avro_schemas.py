"""Avro schemas: their checks, and the one text Confluent stores for each.

- ``parse``: fastavro parses the schema with the named types of its
  references (and of theirs: ``references`` is the whole closure,
  dependencies first) and checks each default against its type.
- ``check_new``: what Confluent asks of a schema registered anew
  (``schema.validate.new.schemas``, on by default; AvroSchema's parser
  with Avro's ``NameValidator.STRICT_VALIDATOR`` and
  ``setValidateDefaults(true)``): names and namespaces Avro allows (avro's
  own parser), field names too (``[A-Za-z_][A-Za-z0-9_]*``, Avro's
  specification, "Names"), no field name twice in a record, and a union's
  default a value of its first branch (Avro's ``Schema.isValidDefault``:
  "union default: first branch"; fastavro takes any branch). A schema
  already in ``_schemas`` is never checked so again: it was registered.
- ``canonical``: the schema as Avro Java's ``Schema.toString()`` writes
  it, which is what Confluent stores and serves
  (``AvroSchema.canonicalString()``: ``schemaObj.toString(references)``) and
  hashes to find an id (``MD5.ofSchema``): each object's keys in Avro's
  order whatever order they were sent in, a named type's name short with
  ``namespace`` only where it differs from the enclosing one, a type
  defined before (here or in a reference) written as its name, and
  ``{"type": "string"}`` as ``"string"``. So one schema sent with its keys
  in another order is the same schema, with the same id.

Who may call: schemas.py, on any thread (nothing here keeps state).
"""
from __future__ import annotations

import json
import re

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
NAMED = ("record", "error", "enum", "fixed")
# Avro's specification, "Names": every name, and every part of a namespace
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the attributes Avro Java reads itself (Schema.SCHEMA_RESERVED, ENUM_RESERVED,
# FIELD_RESERVED); any other is a property, written after them in the order sent
_SCHEMA_RESERVED = frozenset(("doc", "fields", "items", "name", "namespace", "size", "symbols",
                              "values", "type", "aliases"))
_FIELD_RESERVED = frozenset(("default", "doc", "name", "order", "type", "aliases"))


def parse(obj, references: list) -> dict:
    """fastavro's check of ``obj`` after the ``references``' schemas
    (ParsedSchema, dependencies first); its named types, by full name.
    Raises ValueError (or fastavro's errors) saying what is wrong."""
    import fastavro
    named: dict = {}
    for ref in references:
        fastavro.parse_schema(ref.parsed, named_schemas=named, _write_hint=False)
    fastavro.parse_schema(obj, named_schemas=named, _write_hint=False)
    return named


def check_new(obj, references: list, named: dict) -> None:
    """Confluent's checks of a schema registered anew (the module's
    docstring); ValueError saying what is wrong."""
    import avro.errors
    import avro.schema
    names = avro.schema.Names()
    try:
        for ref in references:
            avro.schema.make_avsc_object(ref.parsed, names)
        avro.schema.make_avsc_object(obj, names)
    except (avro.errors.AvroException, TypeError, KeyError) as exc:
        raise ValueError(str(exc)) from None
    _check_fields(obj, None, named)


def _check_fields(schema, space, named: dict) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _check_fields(branch, space, named)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if isinstance(kind, (dict, list)):
        _check_fields(kind, space, named)
        return
    if kind in NAMED:
        space = _full_name(schema, space).rpartition(".")[0] or None
    for key in ("items", "values"):
        if key in schema:
            _check_fields(schema[key], space, named)
    if kind not in ("record", "error"):
        return
    seen = set()
    for field in schema.get("fields") or []:
        name = field.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"Illegal character in field name: {name!r} (a name is "
                             f"[A-Za-z_][A-Za-z0-9_]*)")
        if name in seen:
            raise ValueError(f"Duplicate field {name} in record {schema.get('name')}")
        seen.add(name)
        _check_fields(field.get("type"), space, named)
        if isinstance(field.get("type"), list) and "default" in field and field["type"]:
            _check_union_default(field, space, named)


def _check_union_default(field: dict, space, named: dict) -> None:
    """A union's default is a value of its first branch: fastavro's own
    default check, on a field of that branch alone."""
    import fastavro
    first = field["type"][0]
    if isinstance(first, dict) and first.get("type") in NAMED:
        first = _full_name(first, space)        # defined already: by its name
    probe = {"type": "record", "name": "UnionDefault", "fields": [
        {"name": "f", "type": first, "default": field["default"]}]}
    if space:
        probe["namespace"] = space
    try:
        fastavro.parse_schema(probe, named_schemas=dict(named), _write_hint=False)
    except Exception:
        raise ValueError(f"Invalid default for field {field['name']}: "
                         f"{json.dumps(field['default'])} is not a {json.dumps(first)} "
                         f"(a union's default is a value of its first branch)") from None


def _full_name(schema: dict, space) -> str:
    name = schema.get("name") or ""
    if "." in name:
        return name
    ns = schema["namespace"] if "namespace" in schema else space
    return f"{ns}.{name}" if ns else name


def canonical(obj, references: list):
    """``obj`` as Avro Java's ``Schema.toString(references)`` writes it
    (the module's docstring); the named types of ``references``
    (ParsedSchema, any order) are written as names."""
    known: set = set()
    for ref in references:
        _collect_names(ref.parsed, None, known)
    return _Writer(known).write(obj, None)


def _collect_names(schema, space, out: set) -> None:
    if isinstance(schema, list):
        for s in schema:
            _collect_names(s, space, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED:
            full = _full_name(schema, space)
            out.add(full)
            space = full.rpartition(".")[0] or None
        for key in ("type", "items", "values"):
            if isinstance(schema.get(key), (dict, list)):
                _collect_names(schema[key], space, out)
        for f in schema.get("fields") or () if kind in ("record", "error") else ():
            if isinstance(f, dict):
                _collect_names(f.get("type"), space, out)


class _Writer:
    """One canonical text: the named types written so far (``written``:
    each is written as its name the next time, Avro's ``writeNameRef``)."""

    def __init__(self, known: set):
        self.known = known             # the references' named types
        self.written: set = set()

    def _ref(self, name: str, space):
        """A named type named ``name`` in ``space``: its full name as Avro's
        Names.get finds it (in ``space``, else in no namespace)."""
        full = name if "." in name or not space else f"{space}.{name}"
        if full not in self.known and full not in self.written and name in (
                self.known | self.written):
            full = name
        return full

    @staticmethod
    def _qualified(full: str, space):
        ns, _, short = full.rpartition(".")
        return short if ns and ns == space and short not in PRIMITIVES else full

    def write(self, schema, space):
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema
            return self._qualified(self._ref(schema, space), space)
        if isinstance(schema, list):
            return [self.write(branch, space) for branch in schema]
        if not isinstance(schema, dict):
            return schema
        kind = schema.get("type")
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in PRIMITIVES
                                              and kind not in NAMED
                                              and kind not in ("array", "map")):
            return self.write(kind, space)      # {"type": <a schema or a name>}
        props = {k: v for k, v in schema.items() if k not in _SCHEMA_RESERVED
                 and not (kind == "enum" and k == "default")}
        if kind in NAMED:
            return self._named(schema, kind, space, props)
        if kind == "array":
            return {"type": "array", "items": self.write(schema.get("items"), space), **props}
        if kind == "map":
            return {"type": "map", "values": self.write(schema.get("values"), space), **props}
        return {"type": kind, **props} if props else kind

    def _named(self, schema: dict, kind: str, space, props: dict):
        full = _full_name(schema, space)
        if full in self.written or full in self.known:
            return self._qualified(full, space)
        self.written.add(full)
        own = full.rpartition(".")[0] or None
        out = {"type": kind, "name": full.rpartition(".")[2]}
        if own != space:
            out["namespace"] = own or ""
        if "doc" in schema:
            out["doc"] = schema["doc"]
        if kind in ("record", "error"):
            out["fields"] = [self._field(f, own) for f in schema.get("fields") or []]
        elif kind == "enum":
            out["symbols"] = schema.get("symbols")
            if "default" in schema:
                out["default"] = schema["default"]
        else:
            out["size"] = schema.get("size")
        out.update(props)
        if schema.get("aliases"):
            out["aliases"] = [self._qualified(a if "." in a or not own else f"{own}.{a}", own)
                              for a in schema["aliases"]]
        return out

    def _field(self, field: dict, space) -> dict:
        out = {"name": field.get("name"), "type": self.write(field.get("type"), space)}
        for key in ("doc", "default"):
            if key in field:
                out[key] = field[key]
        if field.get("order", "ascending") != "ascending":
            out["order"] = field["order"]
        if field.get("aliases"):
            out["aliases"] = field["aliases"]
        out.update({k: v for k, v in field.items() if k not in _FIELD_RESERVED})
        return out
