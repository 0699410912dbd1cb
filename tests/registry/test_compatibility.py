"""The seven compatibility levels and each type's rules
(kafkalite/registry/compatibility.py), on schemas parsed as the registry
parses them: for each level, evolutions it must accept and ones it must
refuse (Confluent's "Schema Evolution and Compatibility" tables: Avro's
add with a default, remove, type change, int->long promotion, rename
with aliases; Protobuf's field number and type rules; JSON Schema's open
and closed content models). The transitive levels are told apart from
the plain ones by a third version that is compatible with the latest
and not with the first. No server: the rules are functions of schemas
(test_rest.py has the 409 answers they give).
"""
from __future__ import annotations

import json

import pytest

from kafkalite.registry import compatibility, schemas


def avro(*fields, name="User", aliases=None):
    record = {"type": "record", "name": name, "fields": list(fields)}
    if aliases:
        record["aliases"] = aliases
    return schemas.parse("AVRO", json.dumps(record))


def field(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


A_INT = field("a", "int")
A_INT_DEFAULT = field("a", "int", default=0)
B_DEFAULT = field("b", "string", default="")
B_NO_DEFAULT = field("b", "string")

AVRO_CASES = [
    # (level, [earlier versions, oldest first], new, compatible?, what)
    ("BACKWARD", [avro(A_INT)], avro(A_INT, B_DEFAULT), True, "add a field with a default"),
    ("BACKWARD", [avro(A_INT)], avro(A_INT, B_NO_DEFAULT), False, "add one without a default"),
    ("BACKWARD", [avro(A_INT, B_NO_DEFAULT)], avro(A_INT), True, "remove a field"),
    ("BACKWARD", [avro(A_INT)], avro(field("a", "long")), True, "promote int to long"),
    ("BACKWARD", [avro(field("a", "long"))], avro(A_INT), False, "long to int"),
    ("BACKWARD", [avro(A_INT)], avro(field("a", "string")), False, "change a type"),
    ("BACKWARD", [avro(A_INT)], avro(field("x", "int", aliases=["a"])), True,
     "rename a field with an alias"),
    ("BACKWARD", [avro(A_INT)], avro(field("x", "int")), False, "rename without an alias"),
    ("BACKWARD", [avro(A_INT)], avro(A_INT, name="Person", aliases=["User"]), True,
     "rename the record with an alias"),
    ("BACKWARD", [avro(A_INT)], avro(A_INT, name="Person"), False, "rename the record"),
    ("FORWARD", [avro(A_INT)], avro(A_INT, B_NO_DEFAULT), True,
     "add a field (old readers skip it)"),
    ("FORWARD", [avro(A_INT, B_NO_DEFAULT)], avro(A_INT), False,
     "remove a field old readers need"),
    ("FORWARD", [avro(A_INT, B_DEFAULT)], avro(A_INT), True, "remove a field with a default"),
    ("FORWARD", [avro(A_INT)], avro(field("a", "long")), False, "promote int to long"),
    ("FULL", [avro(A_INT)], avro(A_INT, B_DEFAULT), True, "add a field with a default"),
    ("FULL", [avro(A_INT)], avro(A_INT, B_NO_DEFAULT), False, "add one without a default"),
    ("FULL", [avro(A_INT, B_NO_DEFAULT)], avro(A_INT), False, "remove one without a default"),
    ("FULL", [avro(A_INT)], avro(field("a", "long")), False, "promote int to long"),
    ("NONE", [avro(A_INT)], avro(field("a", "string")), True, "anything"),
    # transitive: compatible with the latest version, not with the first
    ("BACKWARD", [avro(field("a", "string")), avro()], avro(A_INT_DEFAULT), True,
     "a field back with another type, against the latest"),
    ("BACKWARD_TRANSITIVE", [avro(field("a", "string")), avro()], avro(A_INT_DEFAULT), False,
     "the same against every version"),
    ("BACKWARD_TRANSITIVE", [avro(A_INT), avro(A_INT, B_DEFAULT)],
     avro(A_INT, B_DEFAULT, field("c", "int", default=1)), True, "defaults all the way"),
    ("FORWARD", [avro(A_INT), avro(A_INT_DEFAULT)], avro(), True,
     "drop a field the latest gave a default"),
    ("FORWARD_TRANSITIVE", [avro(A_INT), avro(A_INT_DEFAULT)], avro(), False,
     "the first version's readers need it"),
    ("FORWARD_TRANSITIVE", [avro(A_INT), avro(A_INT, B_NO_DEFAULT)], avro(A_INT, B_DEFAULT),
     True, "keep what every reader needs"),
    ("FULL", [avro(A_INT), avro(A_INT_DEFAULT)], avro(), True,
     "drop a field the latest gave a default"),
    ("FULL_TRANSITIVE", [avro(A_INT), avro(A_INT_DEFAULT)], avro(), False,
     "the first version's readers need it"),
    ("FULL_TRANSITIVE", [avro(A_INT), avro(A_INT, B_DEFAULT)],
     avro(A_INT, B_DEFAULT, field("c", "int", default=1)), True, "defaults all the way"),
]


def proto(body: str, syntax: str = "proto3", package: str = "demo"):
    return schemas.parse("PROTOBUF", f'syntax = "{syntax}";\npackage {package};\n{body}')


PROTO_V1 = proto("message User { string name = 1; int32 age = 2; }")
PROTOBUF_CASES = [
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; int32 age = 2; "
                                   "string email = 3; }"), True, "add a field"),
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; }"), True,
     "remove a field"),
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; string age = 2; }"), False,
     "a field number reused with another type"),
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; int64 age = 2; }"), True,
     "int32 to int64: the same varint on the wire"),
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; Age age = 2; }\n"
                                   "message Age { int32 years = 1; }"), False,
     "a scalar field becomes a message"),
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; repeated int32 age = 2; }"),
     False, "single to repeated"),
    ("BACKWARD", [PROTO_V1], proto("message Person { string name = 1; }"), False,
     "a message removed"),
    ("BACKWARD", [PROTO_V1], proto("message User { string name = 1; int32 age = 2; }",
                                   package="other"), False, "the package changed"),
    ("BACKWARD", [proto("message U { optional string a = 1; }", "proto2")],
     proto("message U { optional string a = 1; required int32 b = 2; }", "proto2"), False,
     "a required field added"),
    ("BACKWARD", [PROTO_V1],
     proto("message User { oneof who { string name = 1; int32 age = 2; } }"), False,
     "two fields moved into one oneof"),
    ("FULL", [PROTO_V1], proto("message User { string name = 1; }"), True, "remove a field"),
    ("FULL_TRANSITIVE", [PROTO_V1, proto("message User { string name = 1; }")],
     proto("message User { string name = 1; bool age = 2; }"), True,
     "bool is a varint as int32 is"),
    ("FULL_TRANSITIVE", [PROTO_V1, proto("message User { string name = 1; }")],
     proto("message User { string name = 1; double age = 2; }"), False,
     "the first version's age was an int32"),
    ("FULL", [PROTO_V1, proto("message User { string name = 1; }")],
     proto("message User { string name = 1; double age = 2; }"), True,
     "the latest has no field 2"),
]


def jsonschema(properties: dict, closed: bool = False, required=()):
    schema = {"type": "object", "properties": properties}
    if closed:
        schema["additionalProperties"] = False
    if required:
        schema["required"] = list(required)
    return schemas.parse("JSON", json.dumps(schema))


S = {"type": "string"}
I = {"type": "integer"}
JSON_CASES = [
    ("BACKWARD", [jsonschema({"a": S})], jsonschema({"a": S, "b": I}), False,
     "add a property to an open content model (old data may hold any b)"),
    ("BACKWARD", [jsonschema({"a": S}, closed=True)], jsonschema({"a": S, "b": I}, closed=True),
     True, "add a property to a closed content model"),
    ("BACKWARD", [jsonschema({"a": S}, closed=True)],
     jsonschema({"a": S, "b": I}, closed=True, required=["b"]), False,
     "add a required property"),
    ("BACKWARD", [jsonschema({"a": S, "b": I})], jsonschema({"a": S}), True,
     "remove a property from an open reader"),
    ("BACKWARD", [jsonschema({"a": S, "b": I})], jsonschema({"a": S}, closed=True), False,
     "remove a property from a closed reader"),
    ("BACKWARD", [jsonschema({"a": S})], jsonschema({"a": I}), False, "change a type"),
    ("BACKWARD", [jsonschema({"a": I})], jsonschema({"a": {"type": "number"}}), True,
     "widen integer to number"),
    ("BACKWARD", [jsonschema({"a": {"enum": ["x", "y"]}})], jsonschema({"a": {"enum": ["x"]}}),
     False, "narrow an enum"),
    ("FORWARD", [jsonschema({"a": S})], jsonschema({"a": S, "b": I}), True,
     "add a property: old open readers ignore it"),
    ("FORWARD", [jsonschema({"a": S}, closed=True)], jsonschema({"a": S, "b": I}, closed=True),
     False, "add a property: old closed readers refuse it"),
    ("FULL", [jsonschema({"a": S}, closed=True)], jsonschema({"a": S, "b": I}, closed=True),
     False, "closed both ways"),
    ("FULL_TRANSITIVE", [jsonschema({"a": S}), jsonschema({"a": S, "b": {}})],
     jsonschema({"a": S, "b": {}, "c": {}}), True, "properties that take anything"),
]


def _ids(cases):
    return [f"{level}: {what}" for level, _, _, _, what in cases]


@pytest.mark.parametrize("level,earlier,new,compatible,what", AVRO_CASES, ids=_ids(AVRO_CASES))
def test_avro(level, earlier, new, compatible, what):
    assert (compatibility.check(level, new, earlier) == []) is compatible


@pytest.mark.parametrize("level,earlier,new,compatible,what", PROTOBUF_CASES,
                         ids=_ids(PROTOBUF_CASES))
def test_protobuf(level, earlier, new, compatible, what):
    assert (compatibility.check(level, new, earlier) == []) is compatible


@pytest.mark.parametrize("level,earlier,new,compatible,what", JSON_CASES, ids=_ids(JSON_CASES))
def test_json_schema(level, earlier, new, compatible, what):
    assert (compatibility.check(level, new, earlier) == []) is compatible


def test_every_level_is_covered():
    covered = {level for level, *_ in AVRO_CASES}
    assert covered == set(compatibility.LEVELS)


def test_reasons_name_the_rule_broken():
    reasons = compatibility.check("BACKWARD", PROTOBUF_CASES[2][2], [PROTO_V1])
    assert reasons == ["FIELD_SCALAR_KIND_CHANGED: demo.User.age (field 2) int32 -> string"]
    reasons = compatibility.check("BACKWARD", JSON_CASES[0][2], JSON_CASES[0][1])
    assert reasons and reasons[0].startswith("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")


def test_another_schema_type_is_incompatible():
    assert compatibility.check("BACKWARD", proto("message User { string name = 1; }"),
                               [avro(A_INT)])


# Confluent's JSON Schema differences (SchemaDiff's COMPATIBLE_CHANGES_STRICT):
# PATTERN_ADDED and PATTERN_CHANGED are not compatible, PATTERN_REMOVED is; a
# oneOf is compared subschema by subschema (CombinedSchemaDiff). Before, a
# pattern and a oneOf were not looked at: both narrowings passed BACKWARD.
NUM, STR = {"type": "number"}, {"type": "string"}
JSON_DIFF_CASES = [
    ("BACKWARD", [jsonschema({"a": S})], jsonschema({"a": {**S, "pattern": "^[a-z]+$"}}), False,
     "add a pattern"),
    ("BACKWARD", [jsonschema({"a": {**S, "pattern": "^[a-z]+$"}})],
     jsonschema({"a": {**S, "pattern": "^[a-c]+$"}}), False, "change a pattern"),
    ("BACKWARD", [jsonschema({"a": {**S, "pattern": "^[a-z]+$"}})], jsonschema({"a": S}), True,
     "remove a pattern"),
    ("BACKWARD", [jsonschema({"a": {"oneOf": [NUM, STR]}})],
     jsonschema({"a": {"oneOf": [I, STR]}}), False, "narrow a oneOf's number to integer"),
    ("BACKWARD", [jsonschema({"a": {"oneOf": [I, STR]}})],
     jsonschema({"a": {"oneOf": [NUM, STR]}}), True, "widen a oneOf's integer to number"),
    ("BACKWARD", [jsonschema({"a": {"oneOf": [NUM, STR]}})],
     jsonschema({"a": {"oneOf": [NUM, STR, {"type": "boolean"}]}}), True, "extend a oneOf"),
    ("BACKWARD", [jsonschema({"a": {"oneOf": [NUM, STR]}})],
     jsonschema({"a": {"oneOf": [NUM]}}), False, "take a subschema out of a oneOf"),
    ("BACKWARD", [jsonschema({"a": NUM})], jsonschema({"a": {"oneOf": [NUM, STR]}}), True,
     "a type becomes one branch of a oneOf"),
    ("BACKWARD", [jsonschema({"a": {"type": "array", "items": [S, I]}})],
     jsonschema({"a": {"type": "array", "items": [S, S]}}), False,
     "change a draft-07 tuple item's type"),
]


@pytest.mark.parametrize("level,earlier,new,compatible,what", JSON_DIFF_CASES,
                         ids=_ids(JSON_DIFF_CASES))
def test_json_schema_patterns_combined_and_tuples(level, earlier, new, compatible, what):
    assert (compatibility.check(level, new, earlier) == []) is compatible
