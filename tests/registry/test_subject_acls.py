"""The schema registry checks the server's ACLs on subjects
(kafkalite/registry/authorization.py): a subject is the TOPIC resource
``subject:<name>``, granted with ``kafkalite acls`` as any topic ACL.

Before, any user who logged in could register, read and delete every
subject. Now register needs Write on the subject, reading and looking up
Read, deleting Delete, its config and mode DescribeConfigs/AlterConfigs,
the global ones the same on the cluster; a schema by id needs Read on some
subject it is registered under, and lists keep what the user may
Describe. A denial is Confluent's 403 with error_code 40301.

One server for the module: SASL_PLAINTEXT listeners, the authorizer on
(allow_everyone_if_no_acl_found off), User:admin a super user; alice may
do everything on the ``alice-`` subjects (a PREFIXED ACL, granted with the
CLI); bob may Read ``alice-value`` only. A second server (only for the last
test) allows everyone when no ACL is found.
"""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from harness import run_cli, secured_server, stop_server

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
OTHER_SCHEMA = json.dumps({"type": "record", "name": "S",
                           "fields": [{"name": "b", "type": "string"}]})


def acls(server, *args) -> None:
    """``kafkalite acls add`` as the admin, as an operator types it."""
    r = run_cli("acls", "add", "--bootstrap-server", server.kafka_bootstrap,
                "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-256",
                "--sasl-username", "admin", "--sasl-password", PASSWORDS["admin"], *args)
    assert r.returncode == 0, r.stderr.decode()


def call(server, path, user, method="GET", body=None):
    """(status, JSON answer) of the registry, logged in as ``user``."""
    request = urllib.request.Request(
        server.info["schema_registry"] + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json", "Authorization":
                 "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def refused(answer, status, what: str) -> bool:
    """Confluent's answer to an authorization failure."""
    return status == 403 and answer["error_code"] == 40301 and what in answer["message"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("registry-acls"), PASSWORDS)
    try:        # a setup that fails stops the server too
        acls(srv, "--allow-principal", "User:alice", "--topic", "subject:alice-",
             "--resource-pattern-type", "prefixed", "--operation", "Write", "--operation", "Read",
             "--operation", "Delete", "--operation", "AlterConfigs")
        acls(srv, "--allow-principal", "User:bob", "--topic", "subject:alice-value",
             "--operation", "Read")
        yield srv
    finally:
        stop_server(srv)


def register(server, user, subject, schema=SCHEMA):
    return call(server, f"/subjects/{subject}/versions", user, "POST", {"schema": schema})


def test_register_needs_write_on_the_subject(server):
    status, answer = register(server, "alice", "alice-value")
    assert status == 200 and answer["id"] >= 1
    status, answer = register(server, "bob", "alice-value", OTHER_SCHEMA)
    assert refused(answer, status, "User:bob is denied operation Write on Subject: alice-value")
    status, answer = register(server, "bob", "bob-value")     # no ACL at all: denied
    assert refused(answer, status, "Subject: bob-value")
    assert register(server, "admin", "admin-value")[0] == 200   # a super user
    # confluent-kafka's client sees Confluent's error
    client = SchemaRegistryClient({"url": server.info["schema_registry"],
                                   "basic.auth.user.info": "bob:bob-secret"})
    with pytest.raises(SchemaRegistryError) as denied:
        client.register_schema("alice-key", Schema(SCHEMA, "AVRO"))
    assert denied.value.http_status_code == 403 and denied.value.error_code == 40301


def test_reads_and_lookups_need_read(server):
    sid = register(server, "alice", "alice-value")[1]["id"]
    other = register(server, "alice", "alice-other", OTHER_SCHEMA)[1]["id"]
    for path in ("/subjects/alice-value/versions", "/subjects/alice-value/versions/latest",
                 "/subjects/alice-value/versions/1/schema", f"/schemas/ids/{sid}",
                 f"/schemas/ids/{sid}/schema"):
        assert call(server, path, "bob")[0] == 200, path
    assert call(server, "/subjects/alice-value", "bob", "POST", {"schema": SCHEMA})[0] == 200
    assert call(server, "/compatibility/subjects/alice-value/versions/latest", "bob", "POST",
                {"schema": SCHEMA})[0] == 200
    for path in ("/subjects/alice-other/versions", "/subjects/alice-other/versions/latest"):
        status, answer = call(server, path, "bob")
        assert refused(answer, status, "denied operation Read"), path
    # an id of subjects bob may not see is one never given (test_walking_ids_...)
    for path in (f"/schemas/ids/{other}", f"/schemas/ids/{other}/schema"):
        assert call(server, path, "bob") == (404, {"error_code": 40403,
                                                   "message": f"Schema {other} not found"})
    status, answer = call(server, "/subjects/alice-other", "bob", "POST",
                          {"schema": OTHER_SCHEMA})
    assert refused(answer, status, "Read on Subject: alice-other")
    assert call(server, f"/schemas/ids/{other}", "admin")[0] == 200


def test_lists_keep_what_the_user_may_describe(server):
    sid = register(server, "alice", "alice-value")[1]["id"]
    register(server, "alice", "alice-copy")                    # the same schema: the same id
    register(server, "admin", "admin-value")
    assert call(server, "/subjects", "bob") == (200, ["alice-value"])
    alice = call(server, "/subjects", "alice")[1]
    assert "alice-copy" in alice and "admin-value" not in alice
    assert "admin-value" in call(server, "/subjects", "admin")[1]
    assert call(server, f"/schemas/ids/{sid}/subjects", "bob") == (200, ["alice-value"])
    assert call(server, f"/schemas/ids/{sid}/versions", "bob") == (
        200, [{"subject": "alice-value", "version": 1}])
    assert sorted(call(server, f"/schemas/ids/{sid}/subjects", "alice")[1]) == [
        "alice-copy", "alice-value"]



def test_walking_ids_reveals_no_subject_the_user_may_not_see(server):
    """Issue 67: ids are sequential, and a lookup by id of a schema under
    subjects hidden from the user answered 403 "... on Subject: <name>":
    walking the ids listed every subject. Now such an id answers as an id
    never given (404, 40403), and a shared id lists only the subjects the
    user may describe; alice (the ``alice-`` subjects) and bob
    (``alice-value``) each walk every id."""
    secret = json.dumps({"type": "record", "name": "Secret",
                         "fields": [{"name": "salary", "type": "long"}]})
    hidden = register(server, "admin", "payroll-value", secret)[1]["id"]
    shared = register(server, "alice", "alice-shared", secret)[1]["id"]
    assert shared == hidden                 # one schema, one id: under both subjects
    only_hidden = register(server, "admin", "payroll-key", OTHER_SCHEMA.replace('"S"', '"K"'))
    only_hidden = only_hidden[1]["id"]
    register(server, "alice", "alice-value")
    top = call(server, "/schemas/ids/1?fetchMaxId=true", "admin")[1]["maxId"]
    never = top + 1
    for user in ("alice", "bob"):
        for sid in range(1, top + 2):
            for tail in ("", "/schema", "/subjects", "/versions", "/versions?deleted=true"):
                status, answer = call(server, f"/schemas/ids/{sid}{tail}", user)
                assert "payroll" not in json.dumps(answer), (user, sid, tail, answer)
                if sid in (only_hidden, never):
                    assert (status, answer) == (404, {
                        "error_code": 40403, "message": f"Schema {sid} not found"}), \
                        (user, sid, tail)
    assert call(server, f"/schemas/ids/{shared}/subjects", "alice") == (200, ["alice-shared"])
    assert call(server, f"/schemas/ids/{shared}/versions", "alice") == (
        200, [{"subject": "alice-shared", "version": 1}])
    assert call(server, f"/schemas/ids/{shared}", "alice")[0] == 200
    # bob may see neither subject of the shared id: it is unknown to him too
    assert call(server, f"/schemas/ids/{shared}/subjects", "bob")[0] == 404
    assert call(server, f"/schemas/ids/{only_hidden}/subjects", "admin") == (
        200, ["payroll-key"])


def test_a_reference_reveals_no_subject_the_user_may_not_see(server):
    """Issue 67: a schema's references were resolved whatever the user
    might read, so registering one that names a hidden subject succeeded
    where one naming a subject never made failed: a user could tell which
    hidden subjects exist (and build on their types). Now a reference needs
    Read on its subject, and one the user may not see is answered as a
    subject that is not there."""
    secret = json.dumps({"type": "record", "name": "Secret",
                         "fields": [{"name": "salary", "type": "long"}]})
    register(server, "admin", "payroll-value", secret)
    register(server, "alice", "alice-value")

    def refer(user, subject, typename, version=1, into="alice-wrap"):
        wrapper = json.dumps({"type": "record", "name": "Wrap",
                              "fields": [{"name": "inner", "type": typename}]})
        return call(server, f"/subjects/{into}/versions", user, "POST", {
            "schema": wrapper, "references": [
                {"name": typename, "subject": subject, "version": version}]})

    for version in (1, -1):
        hidden = refer("alice", "payroll-value", "Secret", version)
        never = refer("alice", "nobody-value", "Secret", version)
        assert hidden[0] == never[0] == 422, (hidden, never)
        assert hidden[1] == json.loads(json.dumps(never[1]).replace("nobody", "payroll"))
        # looking up and checking compatibility with it answer the same
        for path in ("/subjects/alice-value", "/compatibility/subjects/alice-value/versions"):
            body = {"schema": SCHEMA, "references": [
                {"name": "Secret", "subject": "payroll-value", "version": version}]}
            assert call(server, path, "alice", "POST", body)[1]["error_code"] == 42201, path
    status, answer = refer("alice", "alice-value", "R")      # a subject alice may read
    assert status == 200 and answer["id"] >= 1, answer
    status, answer = refer("admin", "payroll-value", "Secret", into="payroll-wrap")
    assert status == 200, answer

def test_delete_needs_delete(server):
    register(server, "alice", "alice-gone")
    register(server, "admin", "admin-gone")
    status, answer = call(server, "/subjects/alice-value", "bob", "DELETE")
    assert refused(answer, status, "Delete on Subject: alice-value")
    status, answer = call(server, "/subjects/alice-value/versions/1", "bob", "DELETE")
    assert refused(answer, status, "Delete on Subject: alice-value")
    status, answer = call(server, "/subjects/admin-gone", "alice", "DELETE")
    assert refused(answer, status, "admin-gone")
    assert call(server, "/subjects/alice-gone", "alice", "DELETE") == (200, [1])
    assert call(server, "/subjects/admin-gone", "admin", "DELETE") == (200, [1])


def test_config_and_mode_per_subject_and_global(server):
    register(server, "alice", "alice-value")
    # a subject's: AlterConfigs (which implies DescribeConfigs)
    assert call(server, "/config/alice-value", "alice", "PUT",
                {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
    assert call(server, "/config/alice-value", "alice")[1] == {"compatibilityLevel": "FULL"}
    status, answer = call(server, "/config/alice-value", "bob")     # Read is not enough
    assert refused(answer, status, "DescribeConfigs on Subject: alice-value")
    status, answer = call(server, "/config/alice-value", "bob", "PUT", {"compatibility": "NONE"})
    assert refused(answer, status, "AlterConfigs on Subject: alice-value")
    status, answer = call(server, "/mode/alice-value", "bob", "PUT", {"mode": "READONLY"})
    assert refused(answer, status, "AlterConfigs")
    assert call(server, "/mode/alice-value", "alice", "PUT", {"mode": "READWRITE"})[0] == 200
    # the global ones: on the cluster
    for method, path, body in (("GET", "/config", None), ("GET", "/mode", None),
                               ("PUT", "/config", {"compatibility": "NONE"}),
                               ("PUT", "/mode", {"mode": "READONLY"})):
        status, answer = call(server, path, "alice", method, body)
        assert refused(answer, status, "on Cluster: kafka-cluster"), (method, path)
    assert call(server, "/config", "admin")[1] == {"compatibilityLevel": "BACKWARD"}
    acls(server, "--allow-principal", "User:alice", "--cluster", "--operation",
         "DescribeConfigs")
    assert call(server, "/config", "alice") == (200, {"compatibilityLevel": "BACKWARD"})
    status, answer = call(server, "/config", "alice", "PUT", {"compatibility": "NONE"})
    assert refused(answer, status, "AlterConfigs on Cluster")
    # open to any user who logged in
    assert call(server, "/schemas/types", "bob")[0] == 200


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry-acls-open")
    srv = secured_server(root, PASSWORDS, allow_everyone=True)
    try:        # a setup that fails stops the server too
        acls(srv, "--allow-principal", "User:alice", "--topic", "subject:alice-value",
             "--operation", "Write")
        yield srv
    finally:
        stop_server(srv)


def test_allow_everyone_if_no_acl_found(open_server):
    # no ACL on the subject: everyone may; an ACL for alice only: bob may not
    assert register(open_server, "bob", "free-value")[0] == 200
    assert call(open_server, "/subjects", "bob")[1] == ["free-value"]
    status, answer = register(open_server, "bob", "alice-value")
    assert refused(answer, status, "Write on Subject: alice-value")
    assert register(open_server, "alice", "alice-value")[0] == 200
