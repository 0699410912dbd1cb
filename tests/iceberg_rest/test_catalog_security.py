"""The Iceberg REST catalog with security on: HTTP Basic with the server's
SASL users, and a table guarded as its topic is (Describe to see it, Read
to load it), the refusals in the spec's error model; a super user cannot
write through it either. One secured server for the module."""
from __future__ import annotations

import base64
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from harness import sasl_config, secured_server, stop_server

pytest.importorskip("pyiceberg")

from pyiceberg.catalog import load_catalog  # noqa: E402
from pyiceberg.exceptions import ForbiddenError, UnauthorizedError  # noqa: E402
from server.iceberg_tables import check_exactly_once  # noqa: E402
from test_rest_catalog import call, committed_table, error, make_iceberg_topic, rows_of  # noqa: E402

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TOPIC, HIDDEN = "orders", "payroll"


def basic(user: str, password: str | None = None) -> dict:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def catalog_as(server, user: str):
    return load_catalog(f"as-{user}", type="rest", uri=server.info["iceberg_rest"],
                        auth={"type": "basic", "basic": {"username": user,
                                                         "password": PASSWORDS[user]}})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("iceberg-rest-security"), PASSWORDS)
    try:        # a setup that fails stops the server too
        admin_sasl = sasl_config(srv, "admin", PASSWORDS["admin"])
        sasl = {k: v for k, v in admin_sasl.items() if k != "bootstrap.servers"}
        srv.ends = {t: make_iceberg_topic(srv.kafka_bootstrap, t, 40, sasl, sasl)
                    for t in (TOPIC, HIDDEN)}
        admin = AdminClient(admin_sasl)
        # alice reads orders; bob may only describe it; payroll: the admin's alone
        for f in admin.create_acls([
                AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice",
                           "*", AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:bob",
                           "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)]).values():
            f.result(30)
        srv.sasl = admin_sasl
        admin_catalog = catalog_as(srv, "admin")
        for t in (TOPIC, HIDDEN):
            committed_table(admin_catalog, t, srv.ends[t])
        yield srv
    finally:
        stop_server(srv)


def test_no_login_no_catalog(server):
    url = server.info["iceberg_rest"]
    for headers in ({}, basic("alice", "wrong"), basic("nobody", "x")):
        status, body, got = call(f"{url}/v1/config", headers=headers)
        assert error((status, body, got), 401, "NotAuthorizedException")
        assert got["WWW-Authenticate"].startswith("Basic")
    with pytest.raises(UnauthorizedError):
        load_catalog("anonymous", type="rest", uri=url)


def test_a_table_is_read_by_who_may_read_its_topic(server):
    alice = catalog_as(server, "alice")
    assert alice.list_tables("kafkalite") == [("kafkalite", TOPIC)]
    rows = rows_of(alice.load_table(("kafkalite", TOPIC)).scan().to_arrow().to_pylist())
    assert check_exactly_once(rows, _topic_rows(server)) == []
    with pytest.raises(ForbiddenError, match=rf"Not authorized to access topics: \[{HIDDEN}\]"):
        alice.load_table(("kafkalite", HIDDEN))


def _topic_rows(server) -> list[tuple]:
    """The topic's records, read_committed as the admin, as iceberg_tables' rows."""
    consumer = ck.Consumer({**server.sasl, "group.id": "check", "isolation.level": "read_committed",
                            "enable.auto.commit": False})
    ends, out = server.ends[TOPIC], []
    try:
        consumer.assign([ck.TopicPartition(TOPIC, p, 0) for p in ends])
        deadline = time.monotonic() + 30
        while len(out) < sum(ends.values()) and time.monotonic() < deadline:
            for m in consumer.consume(100, 1):
                assert m.error() is None, m.error()
                out.append((m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                            tuple(m.headers() or ())))
    finally:
        consumer.close()
    return out


def test_describe_sees_a_table_but_does_not_load_it(server):
    url = server.info["iceberg_rest"]
    bob = catalog_as(server, "bob")
    assert bob.list_tables("kafkalite") == [("kafkalite", TOPIC)]
    assert bob.table_exists(("kafkalite", TOPIC))
    assert "Not authorized to access topics: [orders]" in error(
        call(f"{url}/v1/namespaces/kafkalite/tables/{TOPIC}", headers=basic("bob")),
        403, "ForbiddenException")
    # a table bob may not describe: refused before the catalog is asked, so
    # that it says nothing of whether the table exists
    for table in (HIDDEN, "no-such-table"):
        assert call(f"{url}/v1/namespaces/kafkalite/tables/{table}", "HEAD",
                    headers=basic("bob"))[:2] == (403, None)


def test_a_super_user_cannot_write_either(server):
    url = server.info["iceberg_rest"]
    assert error(call(f"{url}/v1/namespaces/kafkalite/tables/{TOPIC}", "DELETE",
                      headers=basic("admin")), 403, "ForbiddenException")
    admin = catalog_as(server, "admin")
    assert sorted(admin.list_tables("kafkalite")) == [("kafkalite", TOPIC), ("kafkalite", HIDDEN)]
