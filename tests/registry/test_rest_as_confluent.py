"""Where kafkalite's registry answered otherwise than Confluent's, in ways a
user notices (issue 69), over HTTP as curl sends it and through
confluent-kafka's SchemaRegistryClient (written independently of
kafkalite): subjects with a ``/``, references of references, the checks
of a new Avro schema, JSON Schema's draft-07 default and its pattern and
oneOf rules, one id for one Avro schema whatever its keys' order, one id
for one set of references, ``GET /schemas``, ``fetchMaxId``, a
reference's version -1, an id that is not a number, and the ``Accept``
header.

On the session's shared server: each test uses subjects of its own and
sets their compatibility level itself (never the global one).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

CT = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def url(server):
    return server.info["schema_registry"]


def call(url: str, method: str = "GET", body=None, accept: str | None = None):
    """(status, decoded JSON answer, content type)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, method=method, data=data)
    if data is not None:
        request.add_header("Content-Type", CT)
    if accept is not None:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), resp.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers["Content-Type"]


def register(url, subject, schema, **extra):
    body = {"schema": json.dumps(schema) if not isinstance(schema, str) else schema, **extra}
    return call(f"{url}/subjects/{subject}/versions", "POST", body)


def record(name, fields=(), **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def test_a_subject_with_a_slash_through_confluents_client(url):
    """confluent-kafka quotes a subject with ``safe=''`` (``team%2Forders-
    value``): the router decodes %2F inside its segment (http_routes.py), so
    every call on such a subject finds it."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    client = SchemaRegistryClient({"url": url})
    schema = Schema(json.dumps(record("Order", [{"name": "id", "type": "long"}])), "AVRO")
    sid = client.register_schema("team/orders-value", schema)
    assert "team/orders-value" in client.get_subjects()
    latest = client.get_latest_version("team/orders-value")
    assert (latest.subject, latest.version, latest.schema_id) == ("team/orders-value", 1, sid)
    assert client.lookup_schema("team/orders-value", schema).schema_id == sid
    assert client.get_versions("team/orders-value") == [1]
    assert client.set_compatibility("team/orders-value", "FULL") == {"compatibility": "FULL"}
    assert client.delete_subject("team/orders-value") == [1]


def test_references_of_references_are_followed(url):
    """Person -> Address -> Country, Person naming Address only (its own
    reference), registered by confluent-kafka's client: Confluent resolves
    Address's reference itself (AbstractSchemaProvider.resolveReferences).
    Before: Avro 422 'unknown type', Protobuf 422 'Depends on file
    geo/country.proto, but it has not been loaded'."""
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    client = SchemaRegistryClient({"url": url})
    client.register_schema("rr-country", Schema(json.dumps(record(
        "Country", [{"name": "code", "type": "string"}], namespace="geo")), "AVRO"))
    client.register_schema("rr-address", Schema(json.dumps(record(
        "Address", [{"name": "country", "type": "geo.Country"}], namespace="geo")), "AVRO",
        [SchemaReference("geo.Country", "rr-country", 1)]))
    person = Schema(json.dumps(record("Person", [{"name": "home", "type": "geo.Address"}])),
                    "AVRO", [SchemaReference("geo.Address", "rr-address", 1)])
    sid = client.register_schema("rr-person-value", person)
    got = client.get_schema(sid)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("geo.Address", "rr-address", 1)]

    proto = 'syntax = "proto3";\npackage geo;\n'
    client.register_schema("rr-country-proto", Schema(
        proto + "message Country { string code = 1; }\n", "PROTOBUF"))
    client.register_schema("rr-address-proto", Schema(
        proto + 'import "geo/country.proto";\nmessage Address { Country country = 1; }\n',
        "PROTOBUF", [SchemaReference("geo/country.proto", "rr-country-proto", 1)]))
    sid = client.register_schema("rr-person-proto-value", Schema(
        proto + 'import "geo/address.proto";\nmessage Person { Address home = 1; }\n',
        "PROTOBUF", [SchemaReference("geo/address.proto", "rr-address-proto", 1)]))
    assert client.get_schema(sid).schema_type == "PROTOBUF"


@pytest.mark.parametrize("schema", [
    record("R", [{"name": "a", "type": "int"}, {"name": "a", "type": "long"}]),
    record("R", [{"name": "a", "type": "int"}], namespace="foo-bar-baz"),
    record("1abc", [{"name": "a", "type": "int"}]),
    record("R", [{"name": "a-b", "type": "int"}]),
    record("R", [{"name": "a", "type": ["null", "string"], "default": "x"}]),
], ids=["duplicate field", "namespace", "record name", "field name", "union default"])
def test_an_invalid_avro_schema_is_422(url, schema):
    """Confluent parses a new schema with Avro's strict names and default
    validation (schema.validate.new.schemas, on by default); before, each
    was registered with a 200."""
    status, answer, _ = register(url, "invalid-avro-value", schema)
    assert (status, answer["error_code"]) == (422, 42201), answer
    # the compatibility check parses it as a new schema too
    status, answer, _ = call(f"{url}/compatibility/subjects/invalid-avro-value/versions",
                             "POST", {"schema": json.dumps(schema)})
    assert (status, answer["error_code"]) == (422, 42201)


def test_json_schema_is_draft_07_by_default_and_its_narrowings_are_409(url):
    """No $schema: draft-07 (Confluent's default), so a tuple ``items`` is
    registered; a pattern added, and a oneOf's number narrowed to an
    integer, are refused under BACKWARD (before: 422, and both 200)."""
    tuple_items = {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
    assert register(url, "js-tuple-value", tuple_items, schemaType="JSON")[0] == 200
    for subject, before, after in (
            ("js-pattern-value", {"type": "string"}, {"type": "string", "pattern": "^[a-z]+$"}),
            ("js-oneof-value", {"oneOf": [{"type": "number"}, {"type": "string"}]},
             {"oneOf": [{"type": "integer"}, {"type": "string"}]})):
        assert call(f"{url}/config/{subject}", "PUT", {"compatibility": "BACKWARD"})[0] == 200
        assert register(url, subject, before, schemaType="JSON")[0] == 200
        status, answer, _ = register(url, subject, after, schemaType="JSON")
        assert (status, answer["error_code"]) == (409, 409), (subject, answer)


def test_one_avro_schema_in_any_key_order_is_one_id(url):
    """Confluent compares (and stores) Avro's canonical text: the same schema
    with its keys in another order is the same schema, under the subject
    (no new version) and under another (the same id). Before: a new id."""
    first = record("Keyed", [{"name": "id", "type": "long"}], namespace="ko")
    again = {"fields": [{"type": "long", "name": "id"}], "name": "Keyed", "namespace": "ko",
             "type": "record"}
    sid = register(url, "key-order-value", first)[1]["id"]
    assert register(url, "key-order-value", again)[1] == {"id": sid}
    assert call(f"{url}/subjects/key-order-value/versions")[1] == [1]
    assert register(url, "key-order-other", again)[1] == {"id": sid}
    assert call(f"{url}/subjects/key-order-value", "POST",
                {"schema": json.dumps(again)})[1]["version"] == 1
    # served as Avro Java writes it, as Confluent serves it
    assert call(f"{url}/schemas/ids/{sid}")[1]["schema"] == (
        '{"type":"record","name":"Keyed","namespace":"ko","fields":[{"name":"id","type":"long"}]}')


def test_references_to_another_subject_are_another_schema(url):
    """The same text referencing another subject (of identical content) is
    another schema with its own id and references (Confluent's MD5 of a
    schema covers its references). Before: the first one's id, so its
    references were answered for the second subject."""
    address = record("Address", [{"name": "city", "type": "string"}], namespace="twin")
    person = record("Person", [{"name": "home", "type": "twin.Address"}], namespace="twin")
    register(url, "twin-address-a", address)
    register(url, "twin-address-b", address)
    refs_a = [{"name": "twin.Address", "subject": "twin-address-a", "version": 1}]
    refs_b = [{"name": "twin.Address", "subject": "twin-address-b", "version": 1}]
    id_a = register(url, "twin-person-a", person, references=refs_a)[1]["id"]
    id_b = register(url, "twin-person-b", person, references=refs_b)[1]["id"]
    assert id_a != id_b
    assert call(f"{url}/subjects/twin-person-b/versions/1")[1]["references"] == refs_b
    assert call(f"{url}/schemas/ids/{id_b}")[1]["references"] == refs_b
    assert call(f"{url}/subjects/twin-address-b/versions/1/referencedby")[1] == [id_b]


def test_a_reference_version_minus_one_is_the_latest(url):
    """Confluent takes version -1 as the subject's latest and stores the
    version it was (before: 42201)."""
    register(url, "latest-address", record("Addr", [{"name": "city", "type": "string"}]))
    register(url, "latest-address", record("Addr", [
        {"name": "city", "type": "string"}, {"name": "zip", "type": "string", "default": ""}]))
    refs = [{"name": "Addr", "subject": "latest-address", "version": -1}]
    status, answer, _ = register(url, "latest-person",
                                 record("P", [{"name": "a", "type": "Addr"}]), references=refs)
    assert status == 200, answer
    assert call(f"{url}/subjects/latest-person/versions/1")[1]["references"] == [
        {"name": "Addr", "subject": "latest-address", "version": 2}]
    # looked up the same way: the same version
    assert call(f"{url}/subjects/latest-person", "POST", {
        "schema": json.dumps(record("P", [{"name": "a", "type": "Addr"}])),
        "references": refs})[1]["id"] == answer["id"]


def test_get_schemas_lists_every_version(url):
    """``GET /schemas`` (Confluent's SchemasResource.getSchemas): before, 404."""
    one = register(url, "listing-a", record("L", [{"name": "a", "type": "int"}]))[1]["id"]
    two = register(url, "listing-a", record("L", [
        {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]))[1]["id"]
    three = register(url, "listing-b", "\"string\"")[1]["id"]
    status, got, ctype = call(f"{url}/schemas?subjectPrefix=listing-")
    assert status == 200 and ctype == CT
    assert [(s["subject"], s["version"], s["id"]) for s in got] == [
        ("listing-a", 1, one), ("listing-a", 2, two), ("listing-b", 1, three)]
    assert got[2]["schema"] == '"string"' and "schemaType" not in got[2]
    latest = call(f"{url}/schemas?subjectPrefix=listing-&latestOnly=true")[1]
    assert [(s["subject"], s["version"]) for s in latest] == [("listing-a", 2), ("listing-b", 1)]
    page = call(f"{url}/schemas?subjectPrefix=listing-&offset=1&limit=1")[1]
    assert [(s["subject"], s["version"]) for s in page] == [("listing-a", 2)]
    call(f"{url}/subjects/listing-b", "DELETE")
    assert [s["subject"] for s in call(f"{url}/schemas?subjectPrefix=listing-b")[1]] == []
    assert [s["subject"] for s in call(
        f"{url}/schemas?subjectPrefix=listing-b&deleted=true")[1]] == ["listing-b"]


def test_fetch_max_id_and_an_id_that_is_not_a_number(url):
    """``?fetchMaxId=true`` adds the highest id given (before: ignored);
    ``/schemas/ids/abc`` is Confluent's plain 404 (before: 40403)."""
    sid = register(url, "maxid-value", record("M", [{"name": "a", "type": "int"}]))[1]["id"]
    newest = register(url, "maxid-other", record("M2", [{"name": "a", "type": "int"}]))[1]["id"]
    got = call(f"{url}/schemas/ids/{sid}?fetchMaxId=true")[1]
    assert got["maxId"] >= newest > sid
    assert "maxId" not in call(f"{url}/schemas/ids/{sid}")[1]
    for path in ("/schemas/ids/abc", "/schemas/ids/abc/versions", "/schemas/ids/abc/schema"):
        assert call(url + path)[:2] == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})


@pytest.mark.parametrize("accept,answered", [
    ("application/json", "application/json"),
    ("application/vnd.schemaregistry+json", "application/vnd.schemaregistry+json"),
    ("application/vnd.schemaregistry.v1+json, application/json", CT),
    ("application/json; q=0.9, application/vnd.schemaregistry.v1+json; q=0.1",
     "application/json"),
    ("*/*", CT),
    ("text/html, application/xhtml+xml, */*; q=0.8", CT),
    ("text/html", None),
])
def test_the_accept_header_picks_the_answers_type(url, accept, answered):
    """Confluent's resources produce three types, weighed 1, 0.9 and 0.5
    (Versions.*_WEIGHTED): the Accept header picks one, or none (406).
    Before: always the first."""
    status, body, ctype = call(f"{url}/subjects", accept=accept)
    if answered is None:
        assert (status, body) == (406, {"error_code": 406, "message": "HTTP 406 Not Acceptable"})
    else:
        assert (status, ctype) == (200, answered)
