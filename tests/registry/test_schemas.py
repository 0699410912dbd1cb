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
