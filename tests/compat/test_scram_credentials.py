"""SCRAM credentials through Kafka's APIs (DescribeUserScramCredentials,
AlterUserScramCredentials; KIP-554), with Kafka's own clients.

A real server (SASL_PLAINTEXT; ``authorizer_enabled`` with
``allow_everyone_if_no_acl_found``, and the cluster resource's ACLs given to
``User:admin`` only, so topics are open and the credential APIs are not).
confluent-kafka's and kafka-python's AdminClients create, describe, change
and delete users; confluent-kafka producers then log in as them with
SCRAM-SHA-256 and SCRAM-SHA-512 on every broker process of the node (the
supervisor answers metadata, the workers lead the partitions): an altered
password works at once and the old one is refused, a deleted user is
refused. Kafka's error codes for each bad alteration are pinned on a bare
connection; a user without the cluster ACLs is denied and changes nothing.
"""
from __future__ import annotations

import json
import os
import subprocess

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)
from compat_helpers import add_user, first_client_error

from harness import ServerProcess, run_cli

from kafkalite.protocol import ApiKey
from kafkalite.server.auth.credentials import salted_password

RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
UNSUPPORTED_SASL_MECHANISM, CLUSTER_DENIED = 33, 31
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret-1"
OUTSIDER, OUTSIDER_PASSWORD = "bob", "bob-secret-1"

# the module's server (users, ACLs) is set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("scram_credentials")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("scram")
    data = str(root / "data")
    os.makedirs(data)
    config = root / "server.toml"
    config.write_text('authorizer_enabled = true\nallow_everyone_if_no_acl_found = true\n')
    add_user(data, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512")
    add_user(data, OUTSIDER, OUTSIDER_PASSWORD, "PLAIN")
    s = ServerProcess(data, extra_args=["--config", str(config),
                                        "--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    try:
        a = AdminClient(conf(s, ADMIN, ADMIN_PASSWORD))
        bindings = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                               "User:admin", "*", op, AclPermissionType.ALLOW)
                    for op in (AclOperation.ALTER, AclOperation.DESCRIBE)]
        for f in a.create_acls(bindings, request_timeout=10).values():
            f.result(15)
        a.create_topics([NewTopic("logins", 2, 1)])["logins"].result(15)
        s.admin = a
        yield s
    finally:
        s.stop()
        s.kill()


def conf(srv, user: str, password: str, mechanism: str = "SCRAM-SHA-512", **extra) -> dict:
    return {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "socket.timeout.ms": 10000, **extra}


def upsert(srv, user: str, password: str, mechanism=ScramMechanism.SCRAM_SHA_256,
           iterations: int = 4096) -> None:
    alteration = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations),
                                              password.encode())
    srv.admin.alter_user_scram_credentials([alteration], request_timeout=10)[user].result(15)


def describe(srv, *users: str) -> dict:
    """{user: {mechanism name: iterations}} from confluent-kafka's describe."""
    answer = srv.admin.describe_user_scram_credentials(list(users) or None, request_timeout=10)
    # one future for every user, or one per user named
    got = (answer.result(15) if not users else {u: f.result(15) for u, f in answer.items()})
    return {u: {ScramMechanism(i.mechanism).name: i.iterations
                for i in d.scram_credential_infos} for u, d in got.items()}


def produce(srv, user: str, password: str, mechanism: str) -> None:
    """A producer logged in as ``user`` writes to both partitions (two
    worker processes) and gets every message acknowledged."""
    errors = []
    p = ck.Producer(conf(srv, user, password, mechanism, **{"message.timeout.ms": 15000,
                                                           "error_cb": errors.append}))
    delivered = []
    for partition in (0, 1):
        p.produce("logins", b"%s-%d" % (user.encode(), partition), partition=partition,
                  on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(20) == 0, errors
    assert delivered == [None, None], (delivered, errors)


def refused(srv, user: str, password: str, mechanism: str) -> ck.KafkaError:
    """The first error librdkafka reports for a producer with these credentials."""
    return first_client_error(conf(srv, user, password, mechanism), "logins")


def wire(srv, user=ADMIN, password=ADMIN_PASSWORD):
    """A bare Kafka connection logged in with SCRAM-SHA-512 (scramp's client)."""
    import scramp
    from compat_helpers import KafkaWire
    w = KafkaWire(srv.kafka_bootstrap)
    assert w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
    client = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
    first = w.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.get_client_first().encode()})
    client.set_server_first(first["auth_bytes"].decode())
    final = w.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.get_client_final().encode()})
    assert final["error_code"] == 0, final
    return w


@pytest.mark.timeout(60)
def test_users_created_through_the_api_log_in_with_both_mechanisms(srv):
    upsert(srv, "carol", "carol-pw-1", ScramMechanism.SCRAM_SHA_256, 4096)
    upsert(srv, "carol", "carol-pw-1", ScramMechanism.SCRAM_SHA_512, 8192)
    assert describe(srv, "carol") == {"carol": {"SCRAM_SHA_256": 4096, "SCRAM_SHA_512": 8192}}
    everyone = describe(srv)
    assert everyone["carol"] == {"SCRAM_SHA_256": 4096, "SCRAM_SHA_512": 8192}
    assert everyone[ADMIN] == {"SCRAM_SHA_512": 4096}
    assert OUTSIDER not in everyone             # a PLAIN-only user has no SCRAM credential
    produce(srv, "carol", "carol-pw-1", "SCRAM-SHA-256")
    produce(srv, "carol", "carol-pw-1", "SCRAM-SHA-512")
    # the file keeps keys, never the password nor the salted password
    with open(os.path.join(srv.data_dir, "sasl-users.json")) as f:
        text = f.read()
    assert "carol-pw-1" not in text
    entry = json.loads(text)["users"]["carol"]["SCRAM-SHA-256"]
    assert set(entry) == {"salt", "stored_key", "server_key", "iterations"}


@pytest.mark.timeout(60)
def test_altered_password_works_at_once_and_the_old_one_is_refused(srv):
    upsert(srv, "dave", "dave-old-pw")
    produce(srv, "dave", "dave-old-pw", "SCRAM-SHA-256")
    upsert(srv, "dave", "dave-new-pw")
    produce(srv, "dave", "dave-new-pw", "SCRAM-SHA-256")
    err = refused(srv, "dave", "dave-old-pw", "SCRAM-SHA-256")
    assert err.code() == ck.KafkaError._AUTHENTICATION, err


@pytest.mark.timeout(60)
def test_deleted_user_is_refused_and_no_longer_described(srv):
    upsert(srv, "erin", "erin-pw")
    produce(srv, "erin", "erin-pw", "SCRAM-SHA-256")
    srv.admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)],
        request_timeout=10)["erin"].result(15)
    err = refused(srv, "erin", "erin-pw", "SCRAM-SHA-256")
    assert err.code() == ck.KafkaError._AUTHENTICATION, err
    with pytest.raises(ck.KafkaException) as e:
        describe(srv, "erin")
    assert e.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND
    with open(os.path.join(srv.data_dir, "sasl-users.json")) as f:
        assert "erin" not in json.load(f)["users"]      # no credential left: no user


@pytest.mark.timeout(60)
def test_kafka_python_admin_alters_and_describes(srv):
    from kafka import KafkaAdminClient
    from kafka.admin import ScramMechanism as KpMechanism
    from kafka.admin import UserScramCredentialDeletion as KpDeletion
    from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
    a = KafkaAdminClient(bootstrap_servers=srv.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN,
                         sasl_plain_password=ADMIN_PASSWORD, request_timeout_ms=15000)
    try:
        assert a.alter_user_scram_credentials([
            KpUpsertion("frank", KpMechanism.SCRAM_SHA_512, "frank-pw", iterations=4096),
            KpUpsertion("grace", KpMechanism.SCRAM_SHA_256, "grace-pw", iterations=4096),
        ]) == {"frank": None, "grace": None}
        got = a.describe_user_scram_credentials(["frank", "nobody"])
        assert got["frank"] == {"error": None, "credential_infos": [
            {"mechanism": KpMechanism.SCRAM_SHA_512, "iterations": 4096}]}
        assert got["nobody"]["error"]
        produce(srv, "frank", "frank-pw", "SCRAM-SHA-512")
        produce(srv, "grace", "grace-pw", "SCRAM-SHA-256")
        result = a.alter_user_scram_credentials([KpDeletion("grace", KpMechanism.SCRAM_SHA_256)])
        assert result == {"grace": None}
        refused(srv, "grace", "grace-pw", "SCRAM-SHA-256")
    finally:
        a.close()


def _upsertion(name, mechanism=1, iterations=4096, password="pw"):
    salt = os.urandom(16)
    hashed = salted_password("SCRAM-SHA-256", password, salt, max(iterations, 1)) if \
        iterations <= 16384 else b"x" * 32
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": hashed}


@pytest.mark.timeout(60)
def test_bad_alterations_get_kafkas_error_codes_and_change_nothing(srv):
    upsert(srv, "heidi", "heidi-pw")
    w = wire(srv)
    try:
        answer = w.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [{"name": "twice", "mechanism": 1}, {"name": "nobody", "mechanism": 1},
                          {"name": "heidi", "mechanism": 2}],
            "upsertions": [_upsertion("twice"), _upsertion("few", iterations=1000),
                           _upsertion("many", iterations=20000), _upsertion("", 1),
                           _upsertion("weird", mechanism=7), _upsertion("ivan"),
                           {**_upsertion("huge"), "salt": b"s" * 4096}]})
        codes = {r["user"]: r["error_code"] for r in answer["results"]}
        assert codes == {"twice": DUPLICATE_RESOURCE, "nobody": RESOURCE_NOT_FOUND,
                         "heidi": RESOURCE_NOT_FOUND,         # has SHA-256 only
                         "few": UNACCEPTABLE_CREDENTIAL, "many": UNACCEPTABLE_CREDENTIAL,
                         "": UNACCEPTABLE_CREDENTIAL, "weird": UNSUPPORTED_SASL_MECHANISM,
                         "huge": UNACCEPTABLE_CREDENTIAL,
                         "ivan": 0}                           # users are independent
        assert all(r["error_message"] for r in answer["results"] if r["error_code"])
        described = w.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {
            "users": [{"name": "heidi"}, {"name": "twice"}, {"name": "few"},
                      {"name": "ivan"}, {"name": "ivan"}]})
        codes = {r["user"]: (r["error_code"], [(c["mechanism"], c["iterations"])
                                               for c in r["credential_infos"]])
                 for r in described["results"]}
        assert codes == {"heidi": (0, [(1, 4096)]), "twice": (RESOURCE_NOT_FOUND, []),
                         "few": (RESOURCE_NOT_FOUND, []), "ivan": (DUPLICATE_RESOURCE, [])}
    finally:
        w.close()
    produce(srv, "heidi", "heidi-pw", "SCRAM-SHA-256")
    produce(srv, "ivan", "pw", "SCRAM-SHA-256")


@pytest.mark.timeout(60)
def test_a_user_without_the_cluster_acls_is_denied_and_changes_nothing(srv):
    upsert(srv, "judy", "judy-pw")
    # Describe's denial is a top-level error, which librdkafka (2.12) cannot
    # read without corrupting its heap: kafka-python asks.
    from kafka import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError
    kp = KafkaAdminClient(bootstrap_servers=srv.kafka_bootstrap,
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username=OUTSIDER, sasl_plain_password=OUTSIDER_PASSWORD,
                          request_timeout_ms=15000)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_user_scram_credentials(["judy"])
    finally:
        kp.close()
    outsider = AdminClient(conf(srv, OUTSIDER, OUTSIDER_PASSWORD, "PLAIN"))
    futures = outsider.alter_user_scram_credentials([
        UserScramCredentialDeletion("judy", ScramMechanism.SCRAM_SHA_256),
        UserScramCredentialUpsertion("mallory", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_512, 4096), b"mallory-pw")], request_timeout=10)
    for user in ("judy", "mallory"):
        with pytest.raises(ck.KafkaException) as e:
            futures[user].result(15)
        assert e.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert describe(srv, "judy") == {"judy": {"SCRAM_SHA_256": 4096}}
    assert "mallory" not in describe(srv)
    produce(srv, "judy", "judy-pw", "SCRAM-SHA-256")


def cli(srv, *args, user=ADMIN, password=ADMIN_PASSWORD, mechanism="SCRAM-SHA-512",
        input="") -> subprocess.CompletedProcess:
    """``kafkalite users ... --bootstrap-server``, logged in as ``user``
    (stdout and stderr as text)."""
    r = run_cli("users", *args, "--bootstrap-server", srv.kafka_bootstrap,
                "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", mechanism,
                "--sasl-username", user, "--sasl-password", password, stdin=input.encode())
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


@pytest.mark.timeout(90)
def test_users_command_over_the_kafka_protocol(srv):
    r = cli(srv, "add", "kim", "--iterations", "8192", input="kim-pw\n")
    assert r.returncode == 0, r.stderr
    r = cli(srv, "list")
    assert r.returncode == 0, r.stderr
    assert ("kim\tSCRAM-SHA-256(iterations=8192),SCRAM-SHA-512(iterations=8192)"
            in r.stdout.splitlines())
    produce(srv, "kim", "kim-pw", "SCRAM-SHA-512")
    # the file mode sees the same store
    r = run_cli("users", "list", "--data-dir", srv.data_dir)
    assert "kim\tSCRAM-SHA-256,SCRAM-SHA-512" in r.stdout.decode().splitlines()
    r = cli(srv, "delete", "kim")
    assert r.returncode == 0, r.stderr
    refused(srv, "kim", "kim-pw", "SCRAM-SHA-512")
    # bad input: one readable line and a non-zero exit, never a traceback
    for args, expect in ((("delete", "kim"), "RESOURCE_NOT_FOUND"),
                         (("add", "kim", "--iterations", "100", "--password", "x"), "iterations"),
                         (("add", "kim", "--mechanism", "PLAIN", "--password", "x"), "PLAIN")):
        r = cli(srv, *args)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert expect in r.stderr, (args, r.stderr)
    # a principal without the cluster ACLs is told so
    for args in (("list",), ("add", "kim", "--password", "x")):
        r = cli(srv, *args, user=OUTSIDER, password=OUTSIDER_PASSWORD, mechanism="PLAIN")
        assert r.returncode == 1, r.stderr
        assert "CLUSTER_AUTHORIZATION_FAILED" in r.stderr or "may not" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
