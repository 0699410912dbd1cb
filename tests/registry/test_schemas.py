"""Parsing and the stored forms of each schema type (kafkalite/registry/schemas.py):
what a client sends is checked by the type's library and refused with a
42201 that says what is wrong; a Protobuf schema sent as .proto text and as
a base64 descriptor (confluent-kafka's Python serializer) is one schema,
and a descriptor is served back as .proto text that parses to it again.
No server: these are functions of the text.
"""
from __future__ import annotations

import json

import pytest

from kafkalite.registry import schemas
from kafkalite.registry.errors import RegistryError

PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  map<string, int32> quantities = 2;
  optional int64 coupon = 3;
  oneof payment { string card = 4; string iban = 5; }
  Line first = 6;
  repeated google.protobuf.Timestamp events = 7;
  Status status = 8;
  message Line { string sku = 1; }
  enum Status { NEW = 0; PAID = 1; }
}
"""


def test_proto_text_and_its_descriptor_are_one_schema_and_render_back():
    text = schemas.parse("PROTOBUF", PROTO)
    serialized = text.formatted("serialized")
    descriptor = schemas.parse("PROTOBUF", serialized)
    assert descriptor.identity == text.identity
    assert text.formatted(None) == PROTO                  # served as it was sent
    rendered = descriptor.formatted(None)
    assert rendered.startswith('syntax = "proto3";\npackage shop;')
    assert "map<string, int32> quantities = 2;" in rendered and "oneof payment" in rendered
    assert schemas.parse("PROTOBUF", rendered).identity == text.identity


@pytest.mark.parametrize("schema_type,text,says", [
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}',
     "unknown type 'nope'"),
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", '
             '"default": "x"}]}', "Default value"),
    ("AVRO", "{not json", "not JSON"),
    ("PROTOBUF", 'syntax = "proto3"; message M { Missing m = 1; }', "Missing"),
    ("PROTOBUF", "message {", ".proto text line 1:8"),
    ("PROTOBUF", 'syntax = "proto3"; import "nowhere.proto"; message M { int32 a = 1; }',
     "nowhere.proto"),
    ("PROTOBUF", "aGVsbG8=", "not a FileDescriptorProto"),
    ("JSON", '{"type": "nope"}', "is not valid"),
    ("JSON", "[1, 2]", "an object or a boolean"),
    ("XML", "<a/>", "Invalid schema type 'XML'"),
    ("AVRO", "", "non-empty string"),
])
def test_invalid_schemas_are_42201_saying_why(schema_type, text, says):
    with pytest.raises(RegistryError) as refused:
        schemas.parse(schema_type, text)
    assert refused.value.error_code == 42201 and says in refused.value.message


def test_normalize_qualifies_names_and_orders_keys():
    a = schemas.parse("AVRO", json.dumps({"namespace": "ns", "name": "R", "type": "record",
                                          "fields": [{"type": {"type": "int"}, "name": "x"}]}),
                      normalize=True)
    b = schemas.parse("AVRO", json.dumps({"type": "record", "name": "ns.R",
                                          "fields": [{"name": "x", "type": "int"}]}),
                      normalize=True)
    assert a.text == b.text == \
        '{"type":"record","name":"ns.R","fields":[{"type":"int","name":"x"}]}'
    assert schemas.parse("AVRO", json.dumps({"namespace": "ns", "name": "R", "type": "record",
                                             "fields": []})).text != a.text


def test_avro_references_are_named_types_of_other_schemas():
    address = schemas.parse("AVRO", json.dumps({"type": "record", "name": "Address",
                                                "namespace": "a", "fields": []}))
    person = json.dumps({"type": "record", "name": "Person",
                         "fields": [{"name": "home", "type": "a.Address"}]})
    with pytest.raises(RegistryError):
        schemas.parse("AVRO", person)
    assert schemas.parse("AVRO", person, {"a.Address": address}).text


def _record(name="R", fields=(), **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


@pytest.mark.parametrize("schema,says", [
    (_record(fields=[{"name": "a", "type": "int"}, {"name": "a", "type": "long"}]),
     "Field name a already in use"),
    (_record(namespace="foo-bar-baz"), "foo-bar-baz is not a valid Avro name"),
    (_record(name="1abc"), "1abc is not a valid Avro name"),
    (_record(fields=[{"name": "a-b", "type": "int"}]), "Illegal character in field name"),
    (_record(fields=[{"name": "a", "type": ["null", "string"], "default": "x"}]),
     "a union's default is a value of its first branch"),
], ids=["duplicate field", "namespace", "record name", "field name", "union default"])
def test_a_new_avro_schema_is_checked_as_confluent_checks_it(schema, says):
    """Confluent parses a schema registered anew with Avro's strict name
    validator and its default validation; before, fastavro alone took
    each of these with a 200."""
    with pytest.raises(RegistryError) as refused:
        schemas.parse("AVRO", json.dumps(schema), new=True)
    assert refused.value.error_code == 42201 and says in refused.value.message
    # one already in _schemas (registered before the check) still parses
    assert schemas.parse("AVRO", json.dumps(schema)).text


def test_an_avro_schema_with_its_keys_in_another_order_is_one_schema():
    """Confluent stores and compares Avro Java's text of a schema
    (AvroSchema.canonicalString): keys in Avro's order, the namespace apart
    from the name, {"type": "int"} as "int". Before, each spelling was its
    own text, so its own id."""
    spellings = [
        {"type": "record", "name": "User", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}, {"name": "tag", "type": ["null", "string"],
                                                     "default": None}]},
        {"fields": [{"type": {"type": "long"}, "name": "id"},
                    {"default": None, "type": ["null", "string"], "name": "tag"}],
         "namespace": "shop", "name": "User", "type": "record"},
        {"name": "shop.User", "type": "record",
         "fields": [{"name": "id", "type": "long"}, {"name": "tag", "default": None,
                                                     "type": ["null", {"type": "string"}]}]},
    ]
    parsed = [schemas.parse("AVRO", json.dumps(s)) for s in spellings]
    assert {p.identity for p in parsed} == {parsed[0].identity}
    assert {p.text for p in parsed} == {
        '{"type":"record","name":"User","namespace":"shop","fields":[{"name":"id","type":"long"},'
        '{"name":"tag","type":["null","string"],"default":null}]}'}


def test_a_json_schema_without_schema_is_draft_07():
    """Confluent's JsonSchema reads a schema that names no $schema as
    draft-07, whose tuple "items" (a list) 2020-12 refuses."""
    tuple_items = {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
    assert schemas.parse("JSON", json.dumps(tuple_items)).text
    with pytest.raises(RegistryError):
        schemas.parse("JSON", json.dumps(
            {"$schema": "https://json-schema.org/draft/2020-12/schema", **tuple_items}))


def test_a_references_own_references_are_followed():
    """Person -> Address -> Country, Person naming only Address (as a
    client registers it: Confluent's resolveReferences follows the rest).
    Before: Avro 'unknown type', Protobuf 'Depends on file country.proto,
    but it has not been loaded'."""
    country = schemas.parse("AVRO", json.dumps(_record("Country", [
        {"name": "code", "type": "string"}], namespace="geo")))
    address = schemas.parse("AVRO", json.dumps(_record("Address", [
        {"name": "country", "type": "geo.Country"}], namespace="geo")), {"geo.Country": country})
    person = schemas.parse("AVRO", json.dumps(_record("Person", [
        {"name": "home", "type": "geo.Address"}])), {"geo.Address": address}, new=True)
    assert person.text == ('{"type":"record","name":"Person","fields":'
                           '[{"name":"home","type":"geo.Address"}]}')

    country = schemas.parse("PROTOBUF", 'syntax = "proto3"; package geo; '
                                        'message Country { string code = 1; }')
    address = schemas.parse("PROTOBUF", 'syntax = "proto3"; package geo; import "country.proto"; '
                                        'message Address { Country country = 1; }',
                            {"country.proto": country})
    person = schemas.parse("PROTOBUF", 'syntax = "proto3"; package geo; import "address.proto"; '
                                       'message Person { Address home = 1; }',
                           {"address.proto": address})
    assert [m.name for m in person.parsed.message_type] == ["Person"]
