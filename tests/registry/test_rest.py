"""Every endpoint of the registry's REST API (kafkalite/registry/rest.py) as
Confluent's API reference gives it, over plain HTTP as curl would send it:
paths, query parameters, answers, content type, and the error bodies
``{"error_code": N, "message": ...}`` with N's HTTP status.

One server for the module: its tests change the global compatibility
level and mode, which the session's shared server must not see.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

CT = "application/vnd.schemaregistry.v1+json"
AVRO_V1 = {"type": "record", "name": "User", "fields": [{"name": "a", "type": "int"}]}
AVRO_V2 = {"type": "record", "name": "User", "fields": [
    {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}]}
AVRO_BAD = {"type": "record", "name": "User", "fields": [{"name": "a", "type": "string"}]}


@pytest.fixture(scope="module")
def url(module_server):
    return module_server.info["schema_registry"]


def call(url: str, method: str = "GET", body=None, content_type: str = CT,
         raw: bytes | None = None):
    """(status, decoded JSON answer, content type)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, method=method, data=data)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), resp.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers["Content-Type"]


def register(url, subject, schema, **extra):
    body = {"schema": json.dumps(schema) if not isinstance(schema, str) else schema, **extra}
    return call(f"{url}/subjects/{subject}/versions", "POST", body)


def test_a_subject_of_utf8_and_an_encoded_slash_keeps_its_name(url):
    """A path segment is %-decoded UTF-8 (kafkalite/http_routes.py): before,
    ``caf%C3%A9-value`` was stored as ``cafÃ©-value`` (the Latin-1 text
    of PEP 3333's PATH_INFO taken as the name)."""
    for subject, quoted in (("café-value", "caf%C3%A9-value"), ("a/b-value", "a%2Fb-value")):
        assert register(url, quoted, AVRO_V1)[0] == 200
        assert subject in call(f"{url}/subjects")[1]
        assert call(f"{url}/subjects/{quoted}/versions/1")[1]["subject"] == subject


def test_register_twice_same_id_and_versions_listed(url):
    status, answer, ctype = register(url, "reg-value", AVRO_V1)
    assert status == 200 and ctype == CT
    sid = answer["id"]
    assert register(url, "reg-value", AVRO_V1)[1] == {"id": sid}
    # application/json is taken as well
    again = call(f"{url}/subjects/reg-value/versions", "POST",
                 {"schema": json.dumps(AVRO_V1)}, content_type="application/json")
    assert again[:2] == (200, {"id": sid})
    v2 = register(url, "reg-value", AVRO_V2)[1]["id"]
    assert v2 > sid
    assert call(f"{url}/subjects/reg-value/versions")[1] == [1, 2]
    assert "reg-value" in call(f"{url}/subjects")[1]
    got = call(f"{url}/subjects/reg-value/versions/latest")[1]
    assert got == {"subject": "reg-value", "version": 2, "id": v2,
                   "schema": json.dumps(AVRO_V2, separators=(",", ":"))}
    assert call(f"{url}/subjects/reg-value/versions/1")[1]["id"] == sid
    assert call(f"{url}/subjects/reg-value/versions/-1")[1]["version"] == 2
    assert call(f"{url}/subjects/reg-value/versions/1/schema")[1] == AVRO_V1


def test_schemas_by_id(url):
    sid = register(url, "byid-value", AVRO_V1)[1]["id"]
    register(url, "byid-other", AVRO_V1)
    assert call(f"{url}/schemas/ids/{sid}")[1] == {
        "schema": json.dumps(AVRO_V1, separators=(",", ":"))}
    assert call(f"{url}/schemas/ids/{sid}/schema")[1] == AVRO_V1
    assert {"byid-value", "byid-other"} <= set(call(f"{url}/schemas/ids/{sid}/subjects")[1])
    assert {"subject": "byid-other", "version": 1} in call(
        f"{url}/schemas/ids/{sid}/versions")[1]
    assert call(f"{url}/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]
    # Confluent's Errors.schemaNotFoundException(id): "Schema %s not found"
    assert call(f"{url}/schemas/ids/99999")[:2] == (
        404, {"error_code": 40403, "message": "Schema 99999 not found"})


def test_lookup_under_a_subject(url):
    sid = register(url, "look-value", AVRO_V1)[1]["id"]
    status, got, _ = call(f"{url}/subjects/look-value", "POST", {"schema": json.dumps(AVRO_V1)})
    assert status == 200 and got["id"] == sid and got["version"] == 1
    assert got["subject"] == "look-value"
    assert call(f"{url}/subjects/look-value", "POST", {"schema": json.dumps(AVRO_V2)})[:2] == (
        404, {"error_code": 40403, "message": "Schema not found"})
    assert call(f"{url}/subjects/nobody", "POST", {"schema": json.dumps(AVRO_V1)})[:2] == (
        404, {"error_code": 40401, "message": "Subject 'nobody' not found."})


def test_normalize_makes_two_spellings_one_schema(url):
    spelled = {"type": "record", "name": "N", "namespace": "ns",
               "fields": [{"type": {"type": "string"}, "name": "s"}]}
    other = {"name": "ns.N", "type": "record", "fields": [{"name": "s", "type": "string"}]}
    a = call(f"{url}/subjects/norm-value/versions?normalize=true", "POST",
             {"schema": json.dumps(spelled)})[1]["id"]
    b = call(f"{url}/subjects/norm-value/versions?normalize=true", "POST",
             {"schema": json.dumps(other)})[1]["id"]
    assert a == b
    assert call(f"{url}/subjects/norm-value/versions")[1] == [1]


def test_soft_then_permanent_delete_of_a_version_and_a_subject(url):
    register(url, "del-value", AVRO_V1)
    register(url, "del-value", AVRO_V2)
    # permanent first: refused, it must be soft-deleted before
    assert call(f"{url}/subjects/del-value/versions/1?permanent=true", "DELETE")[1][
        "error_code"] == 40407
    assert call(f"{url}/subjects/del-value/versions/1", "DELETE")[:2] == (200, 1)
    assert call(f"{url}/subjects/del-value/versions/1", "DELETE")[1]["error_code"] == 40406
    assert call(f"{url}/subjects/del-value/versions")[1] == [2]
    assert call(f"{url}/subjects/del-value/versions?deleted=true")[1] == [1, 2]
    assert call(f"{url}/subjects/del-value/versions/1")[1]["error_code"] == 40402
    assert call(f"{url}/subjects/del-value/versions/1?deleted=true")[1]["version"] == 1
    assert call(f"{url}/subjects/del-value/versions/1?permanent=true", "DELETE")[:2] == (200, 1)
    assert call(f"{url}/subjects/del-value/versions?deleted=true")[1] == [2]
    # the subject: soft, then listed only with deleted=true, then permanently
    assert call(f"{url}/subjects/del-value?permanent=true", "DELETE")[1]["error_code"] == 40405
    assert call(f"{url}/subjects/del-value", "DELETE")[:2] == (200, [2])
    assert call(f"{url}/subjects/del-value", "DELETE")[1]["error_code"] == 40404
    assert "del-value" not in call(f"{url}/subjects")[1]
    assert "del-value" in call(f"{url}/subjects?deleted=true")[1]
    assert call(f"{url}/subjects/del-value/versions")[1]["error_code"] == 40401
    assert call(f"{url}/subjects/del-value?permanent=true", "DELETE")[:2] == (200, [2])
    assert "del-value" not in call(f"{url}/subjects?deleted=true")[1]
    assert call(f"{url}/subjects/del-value", "DELETE")[:2] == (
        404, {"error_code": 40401, "message": "Subject 'del-value' not found."})


def test_a_new_schema_after_a_permanent_delete_gets_a_new_id(url):
    first = register(url, "gone-value", {**AVRO_V1, "name": "Gone"})[1]["id"]
    call(f"{url}/subjects/gone-value", "DELETE")
    call(f"{url}/subjects/gone-value?permanent=true", "DELETE")
    assert call(f"{url}/schemas/ids/{first}")[0] == 404
    later = register(url, "gone-value", {**AVRO_V1, "name": "Later"})[1]["id"]
    assert later > first


def test_references_and_referencedby(url):
    address = {"type": "record", "name": "Address", "namespace": "ref",
               "fields": [{"name": "city", "type": "string"}]}
    person = {"type": "record", "name": "Person", "namespace": "ref",
              "fields": [{"name": "home", "type": "ref.Address"}]}
    register(url, "address", address)
    # without the reference the named type is unknown
    assert register(url, "person-value", person)[1]["error_code"] == 42201
    refs = [{"name": "ref.Address", "subject": "address", "version": 1}]
    status, answer, _ = register(url, "person-value", person, references=refs)
    assert status == 200
    got = call(f"{url}/subjects/person-value/versions/1")[1]
    assert got["references"] == refs
    assert call(f"{url}/subjects/address/versions/1/referencedby")[1] == [answer["id"]]
    # a referenced schema may not be deleted
    assert call(f"{url}/subjects/address/versions/1", "DELETE")[1]["error_code"] == 42206
    missing = [{"name": "x", "subject": "address", "version": 9}]
    assert register(url, "person2-value", person, references=missing)[1]["error_code"] == 42201


def test_protobuf_imports_are_references(url):
    money = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; }\n'
    register(url, "money", money, schemaType="PROTOBUF")
    order = ('syntax = "proto3";\npackage shop;\nimport "common/money.proto";\n'
             'message Order { common.Money total = 1; }\n')
    assert register(url, "order-value", order, schemaType="PROTOBUF")[1]["error_code"] == 42201
    refs = [{"name": "common/money.proto", "subject": "money", "version": 1}]
    status, answer, _ = register(url, "order-value", order, schemaType="PROTOBUF",
                                 references=refs)
    assert status == 200
    assert call(f"{url}/subjects/money/versions/1/referencedby")[1] == [answer["id"]]
    # a field of another message type in the same number: refused under BACKWARD
    other = order.replace("common.Money total", "string total")
    status, refused, _ = register(url, "order-value", other, schemaType="PROTOBUF",
                                  references=refs)
    assert status == 409 and "FIELD_KIND_CHANGED" in refused["message"]


def test_protobuf_and_json_schema_types(url):
    proto = 'syntax = "proto3";\npackage p;\nmessage M { string a = 1; }\n'
    status, answer, _ = register(url, "proto-value", proto, schemaType="PROTOBUF")
    assert status == 200
    got = call(f"{url}/subjects/proto-value/versions/1")[1]
    assert got["schemaType"] == "PROTOBUF" and got["schema"] == proto
    serialized = call(f"{url}/schemas/ids/{answer['id']}?format=serialized")[1]["schema"]
    # the same schema sent as a descriptor (as confluent-kafka's Python
    # serializer sends it) is the same schema: one id, no new version
    assert register(url, "proto-value", serialized, schemaType="PROTOBUF")[1] == answer
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    status, answer, _ = register(url, "json-value", schema, schemaType="JSON")
    assert status == 200
    assert call(f"{url}/schemas/ids/{answer['id']}")[1]["schemaType"] == "JSON"


def test_config_global_and_per_subject(url):
    assert call(f"{url}/config")[1] == {"compatibilityLevel": "BACKWARD"}
    register(url, "cfg-value", AVRO_V1)
    assert call(f"{url}/config/cfg-value")[1]["error_code"] == 40408
    assert call(f"{url}/config/cfg-value?defaultToGlobal=true")[1] == {
        "compatibilityLevel": "BACKWARD"}
    assert call(f"{url}/config/cfg-value", "PUT", {"compatibility": "NONE"})[1] == {
        "compatibility": "NONE"}
    assert call(f"{url}/config/cfg-value")[1] == {"compatibilityLevel": "NONE"}
    # NONE lets an incompatible change in
    assert register(url, "cfg-value", AVRO_BAD)[0] == 200
    assert call(f"{url}/config/cfg-value", "DELETE")[1] == {"compatibilityLevel": "NONE"}
    assert call(f"{url}/config/cfg-value")[1]["error_code"] == 40408
    assert call(f"{url}/config", "PUT", {"compatibility": "FULL"})[1] == {"compatibility": "FULL"}
    assert call(f"{url}/config")[1] == {"compatibilityLevel": "FULL"}
    assert call(f"{url}/config", "DELETE")[1] == {"compatibilityLevel": "FULL"}
    assert call(f"{url}/config")[1] == {"compatibilityLevel": "BACKWARD"}
    status, answer, _ = call(f"{url}/config", "PUT", {"compatibility": "SIDEWAYS"})
    assert status == 422 and answer["error_code"] == 42203
    assert "BACKWARD_TRANSITIVE" in answer["message"]


def test_incompatible_registration_is_409_with_the_reasons(url):
    register(url, "inc-value", AVRO_V1)
    status, answer, _ = register(url, "inc-value", AVRO_BAD)
    assert status == 409 and answer["error_code"] == 409
    assert "TYPE_MISMATCH" in answer["message"] and "BACKWARD" in answer["message"]


def test_compatibility_endpoint_with_and_without_verbose(url):
    register(url, "chk-value", AVRO_V1)
    ok = call(f"{url}/compatibility/subjects/chk-value/versions/latest", "POST",
              {"schema": json.dumps(AVRO_V2)})
    assert ok[:2] == (200, {"is_compatible": True})
    bad = call(f"{url}/compatibility/subjects/chk-value/versions/1?verbose=true", "POST",
               {"schema": json.dumps(AVRO_BAD)})[1]
    assert bad["is_compatible"] is False and any("TYPE_MISMATCH" in m for m in bad["messages"])
    every = call(f"{url}/compatibility/subjects/chk-value/versions", "POST",
                 {"schema": json.dumps(AVRO_BAD)})[1]
    assert every == {"is_compatible": False}
    assert call(f"{url}/compatibility/subjects/chk-value/versions/7", "POST",
                {"schema": json.dumps(AVRO_V2)})[1]["error_code"] == 40402


def test_modes_readonly_and_import_with_chosen_ids(url):
    assert call(f"{url}/mode")[1] == {"mode": "READWRITE"}
    register(url, "ro-value", AVRO_V1)
    assert call(f"{url}/mode/ro-value", "PUT", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    assert call(f"{url}/mode/ro-value")[1] == {"mode": "READONLY"}
    status, answer, _ = register(url, "ro-value", AVRO_V2)
    assert status == 422 and answer["error_code"] == 42205
    assert call(f"{url}/mode/ro-value", "DELETE")[1] == {"mode": "READONLY"}
    assert register(url, "ro-value", AVRO_V2)[0] == 200
    assert call(f"{url}/mode", "PUT", {"mode": "SLEEPY"})[1]["error_code"] == 42204
    # an id may be chosen only in IMPORT mode, which a subject with versions refuses
    assert register(url, "imp-value", AVRO_V1, id=5000)[1]["error_code"] == 42205
    assert call(f"{url}/mode/ro-value", "PUT", {"mode": "IMPORT"})[1]["error_code"] == 42205
    assert call(f"{url}/mode/imp-value", "PUT", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    imported = {**AVRO_V1, "name": "Imported"}
    assert register(url, "imp-value", imported, id=5000, version=3)[:2] == (200, {"id": 5000})
    assert call(f"{url}/subjects/imp-value/versions/3")[1]["id"] == 5000
    call(f"{url}/mode/imp-value", "DELETE")
    # ids go on past an imported one
    assert register(url, "after-import", {**AVRO_V1, "name": "After"})[1]["id"] > 5000


@pytest.mark.parametrize("method,path,body,status,code", [
    ("GET", "/subjects/nobody/versions", None, 404, 40401),
    ("GET", "/subjects/reg-value/versions/99", None, 404, 40402),
    ("GET", "/subjects/reg-value/versions/zero", None, 422, 42202),
    ("GET", "/subjects/reg-value/versions/0", None, 422, 42202),
    ("GET", "/schemas/ids/abc", None, 404, 404),     # Confluent: no resource (an Integer id)
    ("POST", "/subjects/bad-value/versions", {"schema": "{\"type\": \"nope\"}"}, 422, 42201),
    ("POST", "/subjects/bad-value/versions", {"schema": "x", "schemaType": "XML"}, 422, 42201),
    ("POST", "/subjects/bad-value/versions", {"schemaType": "AVRO"}, 422, 42201),
    ("POST", "/subjects/bad-value/versions", {"schema": "message {", "schemaType": "PROTOBUF"},
     422, 42201),
    ("POST", "/subjects/bad-value/versions", {"schema": "{\"type\": 7}", "schemaType": "JSON"},
     422, 42201),
    ("GET", "/no/such/path", None, 404, 404),
    ("PATCH", "/subjects", None, 405, 405),
])
def test_error_bodies(url, method, path, body, status, code):
    if path.startswith("/subjects/reg-value"):
        register(url, "reg-value", AVRO_V1)
    got_status, answer, ctype = call(url + path, method, body)
    assert (got_status, answer["error_code"]) == (status, code)
    assert isinstance(answer["message"], str) and answer["message"]
    assert ctype == CT


def test_a_body_that_is_not_json_is_400(url):
    status, answer, _ = call(f"{url}/subjects/x/versions", "POST", raw=b"{not json")
    assert status == 400 and answer["error_code"] == 400 and "JSON" in answer["message"]
    status, answer, _ = call(f"{url}/subjects/x/versions", "POST", raw=b"[" * 100_000)
    assert status == 400 and "nested too deeply" in answer["message"]
    deep = '{"type": "array", "items": ' * 5000 + '"int"' + "}" * 5000
    status, answer, _ = call(f"{url}/subjects/x/versions", "POST", {"schema": deep})
    assert (status, answer["error_code"]) in ((422, 42201), (400, 400))


def test_the_ready_line_and_server_json_name_the_registry(module_server, url):
    ready = next(line for line in module_server.output().splitlines()
                 if line.startswith("kafkalite server ready:"))
    assert f"schema registry {url}" in ready
    assert url.startswith("http://127.0.0.1:")


@pytest.mark.processes
def test_schema_registry_port_minus_one_turns_it_off(tmp_path):
    from harness import ServerProcess
    from kafkalite.errors import InvalidConfigurationError
    from kafkalite.server.config import ServerConfig
    with pytest.raises(InvalidConfigurationError, match="schema_registry_port"):
        ServerConfig(schema_registry_port=70000)
    srv = ServerProcess(str(tmp_path / "data"), workers=1,
                        extra_args=["--schema-registry-port", "-1"]).start()
    try:
        assert "schema_registry" not in srv.info
        assert "schema registry" not in srv.output()
    finally:
        srv.stop()


def test_concurrent_registrations_give_one_id_per_schema(url):
    """Eight clients at once: the same schema under one subject is one id
    and one version; distinct schemas get distinct ids."""
    import threading
    same, distinct = [], []

    def client(i: int) -> None:
        same.append(register(url, "race-value", {**AVRO_V1, "name": "Race"})[1]["id"])
        distinct.append(register(url, f"race-{i}", {**AVRO_V1, "name": f"Race{i}"})[1]["id"])
    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(same) == 8 and len(set(same)) == 1
    assert call(f"{url}/subjects/race-value/versions")[1] == [1]
    assert len(set(distinct)) == 8 and same[0] not in distinct


def test_each_registration_is_served_at_once_and_never_gives_its_id_again(url):
    """Register, then read the id back, fifty times in a row: every id is
    new and answered at once. The registry writes _schemas in
    transactions, and their commit markers can land after
    commit_transaction returns; a registry that read the topic only to its
    last stable offset then answered 404 for the id it had just given
    (seen in a CI rehearsal) and could give that id again."""
    given = {}
    for i in range(50):
        schema = {"type": "record", "name": f"Served{i}",
                  "fields": [{"name": "f", "type": "int"}]}
        status, answer, _ = register(url, f"served-{i}-value", schema)
        assert status == 200, answer
        assert answer["id"] not in given, (i, answer["id"], given[answer["id"]])
        given[answer["id"]] = i
        status, got, _ = call(f"{url}/schemas/ids/{answer['id']}")
        assert status == 200 and json.loads(got["schema"])["name"] == f"Served{i}", (i, got)
