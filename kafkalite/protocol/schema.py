"""The schema DSL our message definitions are written in.

It mirrors the vocabulary of Kafka's JSON message definitions, compactly:

    Request(ApiKey.PRODUCE, "0-10", flexible="9+", fields=[
        Field("transactional_id", "string", "3+", nullable="3+"),
        Field("acks", "int16"),
        Array("topic_data", "0+", fields=[
            Field("name", "string"),
            Field("replica_nodes", "[]int32"),
        ]),
        Struct("current_leader", "12+", tag=0, fields=[...]),
    ])

- Names are the snake_case of Kafka's field names; bodies are dicts keyed by
  them.
- Versions are Kafka's version specs: "3+", "0-7", "4", "none".
- ``nullable`` is the versions in which null (None) is allowed.
- ``tag`` marks a tagged field (KIP-482); it is tagged in every version it
  exists in (all such versions are flexible).
- tags from OWN_TAGS_FROM on are kafkalite's own fields in Kafka's messages
  (a Kafka peer skips a tag it does not know); comparisons with Kafka's
  specs leave them out (``Field.own``).
- ``default`` is the value taken when a field is missing from a body being
  encoded, and reported for versions that lack the field. Unset, it is None
  in versions where the field is nullable, else the type's zero value
  (0, False, "", b"", [], the zero UUID, a struct of defaults).
- A field inside a struct exists only where the struct does; its own
  versions need only say how it differs.
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.types import WIRE_TYPES

MAX_VERSION = 0x7FFF
OWN_TAGS_FROM = 10_000
_UNSET: Any = object()


class Versions(NamedTuple):
    """An inclusive range of versions; ``NO_VERSIONS`` contains none."""

    low: int
    high: int

    @classmethod
    def parse(cls, spec: str) -> Versions:
        spec = spec.strip()
        if spec == "none":
            return NO_VERSIONS
        if spec.endswith("+"):
            return cls(int(spec[:-1]), MAX_VERSION)
        low, sep, high = spec.partition("-")
        return cls(int(low), int(high) if sep else int(low))

    def __contains__(self, version: object) -> bool:
        return self.low <= version <= self.high  # type: ignore[operator]

    def __str__(self) -> str:
        if self.low > self.high:
            return "none"
        if self.high == MAX_VERSION:
            return f"{self.low}+"
        return f"{self.low}-{self.high}" if self.high != self.low else str(self.low)


NO_VERSIONS = Versions(1, 0)


class Field:
    """One field of a struct: a primitive, an array, or a nested struct.

    ``kind`` is "primitive", "array" (of primitives, ``type`` "[]int32"),
    "struct_array" or "struct"; ``wire`` is the WireType of the primitive or
    of the array element (None for structs).
    """

    __slots__ = ("name", "type", "kind", "wire", "versions", "nullable", "tag", "fields", "_default")

    def __init__(self, name: str, type: str, versions: str = "0+", *, nullable: str = "none",
                 default: Any = _UNSET, tag: int | None = None, fields: list[Field] | None = None):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise ValueError(f"field name {name!r} is not snake_case")
        self.name = name
        self.type = type
        self.versions = Versions.parse(versions)
        self.nullable = Versions.parse(nullable)
        self.tag = tag
        self._default = default
        self.fields = tuple(fields) if fields is not None else None
        if type == "[]":
            self.kind, self.wire = "struct_array", None
        elif type == "{}":
            self.kind, self.wire = "struct", None
        elif type.startswith("[]"):
            self.kind, self.wire = "array", WIRE_TYPES[type[2:]]
        else:
            self.kind, self.wire = "primitive", WIRE_TYPES[type]
        if (self.fields is None) != (self.kind not in ("struct", "struct_array")):
            raise ValueError(f"{name}: only Array() and Struct() fields have sub-fields")
        if self.kind == "struct" and self.nullable != NO_VERSIONS and tag is not None:
            raise ValueError(f"{name}: nullable tagged structs are not supported")

    def present(self, version: int) -> bool:
        return version in self.versions

    @property
    def own(self) -> bool:
        """kafkalite's addition, not in Kafka's spec of the message."""
        return self.tag is not None and self.tag >= OWN_TAGS_FROM

    def is_nullable(self, version: int) -> bool:
        return version in self.nullable

    def default(self, version: int) -> Any:
        """The value this field takes when absent (see module docstring).

        Mutable defaults (lists, struct dicts) are fresh objects each call.
        """
        nullable = version in self.nullable
        if self._default is not _UNSET and (self._default is not None or nullable):
            return self._default
        if nullable:
            return None
        if self.kind in ("array", "struct_array"):
            return []
        if self.kind == "struct":
            return {f.name: f.default(version) for f in self.fields}
        return self.wire.zero

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {str(self.versions)!r})"


def Array(name: str, versions: str = "0+", *, nullable: str = "none", tag: int | None = None,
          fields: list[Field]) -> Field:
    """An array of structs (Kafka's "[]SomeStruct")."""
    return Field(name, "[]", versions, nullable=nullable, tag=tag, fields=fields)


def Struct(name: str, versions: str = "0+", *, nullable: str = "none", tag: int | None = None,
           fields: list[Field]) -> Field:
    """A single nested struct (Kafka's "SomeStruct"); missing means all
    defaults, or None where ``nullable`` (on the wire an int8 before the
    struct: -1 null, 1 present)."""
    return Field(name, "{}", versions, nullable=nullable, tag=tag, fields=fields)


class Message:
    """A request or response body (or an embedded schema such as a consumer
    protocol Subscription) with its valid and flexible versions."""

    __slots__ = ("name", "api_key", "kind", "versions", "flexible", "fields")

    def __init__(self, name: str, api_key: ApiKey | None, kind: str, versions: str, flexible: str,
                 fields: list[Field]):
        self.name = name
        self.api_key = api_key
        self.kind = kind
        self.versions = Versions.parse(versions)
        self.flexible = Versions.parse(flexible)
        self.fields = tuple(fields)
        _check_fields(self, self.fields, self.versions)

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def __repr__(self) -> str:
        return f"<{self.name} v{self.versions}>"


def _camel(api_key: ApiKey) -> str:
    return "".join(part.capitalize() for part in api_key.name.split("_"))


def Request(api_key: ApiKey, versions: str, *, flexible: str, fields: list[Field]) -> Message:
    return Message(_camel(api_key) + "Request", api_key, "request", versions, flexible, fields)


def Response(api_key: ApiKey, versions: str, *, flexible: str, fields: list[Field]) -> Message:
    return Message(_camel(api_key) + "Response", api_key, "response", versions, flexible, fields)


def Data(name: str, versions: str, *, flexible: str = "none", fields: list[Field]) -> Message:
    """A versioned schema embedded in another message's bytes field."""
    return Message(name, None, "data", versions, flexible, fields)


def _check_fields(message: Message, fields: tuple[Field, ...], within: Versions) -> None:
    names = set()
    tags = set()
    for field in fields:
        versions = Versions(max(field.versions.low, within.low), min(field.versions.high, within.high))
        if field.name in names:
            raise ValueError(f"{message.name}: duplicate field {field.name}")
        names.add(field.name)
        if field.tag is not None:
            if field.tag in tags:
                raise ValueError(f"{message.name}: duplicate tag {field.tag}")
            tags.add(field.tag)
            untagged = [v for v in range(versions.low, versions.high + 1) if not message.is_flexible(v)]
            if untagged:
                raise ValueError(f"{message.name}.{field.name}: tagged in non-flexible version {untagged[0]}")
        if field.fields is not None:
            _check_fields(message, field.fields, versions)
