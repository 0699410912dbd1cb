"""Kafka's error semantics, API by API (issue 48): what a broker answers a
request for a resource that does not exist, from a principal that may not
act on it, and with arguments Kafka defines an error for.

``ROWS`` (error_semantics_table.py, written with error_semantics_rows.py's
builders) is the one table: for each API key, the cases Kafka defines, each
a request builder and the error code(s) Kafka answers, per version range,
every row up to the newest version kafkalite advertises (Kafka 4.1's; a
row's answer that changes with the version is split by version range).
The expected codes are Kafka's (KafkaApis, the group and transaction
coordinators, the controller's ReplicationControlManager, the protocol
guide's error table), not what kafkalite answered when the row was written:
a row kafkalite does not meet yet is listed in ``KNOWN_DIFFERENCES`` with
the reason, and runs as xfail(strict=True).
``test_every_advertised_api_has_error_semantics`` fails when a server
advertises an API without a row, so an API added without its errors fails
here.

Two servers: the session's shared server (security off) and one of this
module's own with the authorizer on (SASL/PLAIN, super user admin; alice
has no ACL; bob may DESCRIBE the topic ``seen``, DELETE the group
``errsem-bobs`` and nothing else). Every case is one raw request encoded
with kafkalite's codec (compat_helpers' KafkaWire), sent to the node
Kafka's clients send it to: the partition's leader for the data APIs, the
bootstrap node (the controller, which serves the coordinators and the
admin APIs) for the rest.
"""
from __future__ import annotations

import uuid

import pytest
from compat_helpers import KafkaWire, add_user
from error_semantics_rows import (
    ALLOW,
    BOB_GROUP,
    CONTROLLER,
    DELETE_OP,
    DESCRIBE_OP,
    E,
    GROUP_RESOURCE,
    LITERAL,
    NONE,
    SEEN,
    SMALL,
    TOPIC,
    TOPIC_RESOURCE,
    USERS,
    error_codes,
    new_topic,
    Row,
    World,
)
from error_semantics_table import KNOWN_DIFFERENCES, ROWS

from harness import ServerProcess, create, stop_server, wait_until
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey

# ---- the servers --------------------------------------------------------------------------------

def world_of(srv: ServerProcess, wire: KafkaWire) -> World:
    r = wire.request(ApiKey.METADATA, 12, {"topics": [
        {"topic_id": uuid.UUID(int=0), "name": name} for name in (TOPIC, SMALL, SEEN)],
        "allow_auto_topic_creation": False})
    [t] = [t for t in r["topics"] if t["name"] == TOPIC]
    return World(srv, t["topic_id"], t["partitions"][0]["leader_id"],
                 sorted(b["node_id"] for b in r["brokers"]),
                 {t["name"]: t["topic_id"] for t in r["topics"]},
                 next(iter(srv.info["kafka_listeners"])))


def make_topics(wire: KafkaWire) -> None:
    r = wire.request(ApiKey.CREATE_TOPICS, 7, {"timeout_ms": 10_000, "topics": [
        new_topic(TOPIC, 2), new_topic(SMALL, configs=[("max.message.bytes", "1000")]),
        new_topic(SEEN)]})
    assert {t["error_code"] for t in r["topics"]} <= {NONE, E.TOPIC_ALREADY_EXISTS}, r


@pytest.fixture(scope="module")
def plain(server):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        make_topics(wire)
        create(server, "errsem-ready")       # the topics' leaders are known past this
        return wait_until(lambda: (lambda w: w if w.leader >= 0 else None)(
            world_of(server, wire)), 10, "the topic's leader")
    finally:
        wire.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """The authorizer on, SASL/PLAIN: admin a super user, alice without any
    ACL, bob with DESCRIBE on ``SEEN`` and DELETE on group ``BOB_GROUP`` alone."""
    root = tmp_path_factory.mktemp("errsem-secured")
    data = root / "data"
    data.mkdir()
    for user, secret in USERS.items():
        add_user(str(data), user, secret, "PLAIN")
    config = root / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n')
    srv = ServerProcess(str(data), extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN"]).start()
    try:
        wire = KafkaWire(srv.kafka_bootstrap)
        wire.login_plain("admin", USERS["admin"])
        make_topics(wire)
        r = wire.request(ApiKey.CREATE_ACLS, 3, {"creations": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": SEEN,
            "resource_pattern_type": LITERAL, "principal": "User:bob", "host": "*",
            "operation": DESCRIBE_OP, "permission_type": ALLOW}, {
            "resource_type": GROUP_RESOURCE, "resource_name": BOB_GROUP,
            "resource_pattern_type": LITERAL, "principal": "User:bob", "host": "*",
            "operation": DELETE_OP, "permission_type": ALLOW}]})
        assert [c["error_code"] for c in r["results"]] == [NONE, NONE], r
        world = wait_until(lambda: (lambda w: w if w.leader >= 0 else None)(
            world_of(srv, wire)), 10, "the topic's leader")
        wire.close()
        yield world
    finally:
        stop_server(srv)


class Wires:
    """One logged-in connection per (node, user), kept for the module."""

    def __init__(self):
        self.open: dict = {}

    def to(self, world: World, node: int, user: str | None, fresh: bool) -> KafkaWire:
        key = (world.server.kafka_bootstrap, node, user)
        if fresh or key not in self.open:
            srv = world.server
            if node == CONTROLLER:
                address = srv.kafka_bootstrap
            else:
                port = next(b["port"] for b in srv.info["kafka_brokers"] if b["node_id"] == node)
                address = f"127.0.0.1:{port}"
            wire = KafkaWire(address)
            if user not in (None, "anonymous"):
                wire.login_plain(user, USERS[user])
            if fresh:
                return wire
            self.open[key] = wire
        return self.open[key]

    def drop(self, wire: KafkaWire) -> None:
        self.open = {k: w for k, w in self.open.items() if w is not wire}
        wire.close()

    def close(self):
        for wire in self.open.values():
            wire.close()


@pytest.fixture(scope="module")
def wires():
    w = Wires()
    yield w
    w.close()

def node_for(row: Row, world: World) -> int:
    if row.node == "controller":
        return CONTROLLER
    if row.node == "leader":
        return world.leader
    if row.node == "follower":
        return next(n for n in world.workers if n != world.leader)
    return world.workers[0]


def versions_of(row: Row) -> range:
    """The versions a row runs at: those kafkalite advertises, within ``versions``."""
    low, high = SUPPORTED_VERSIONS[row.api]
    if row.versions:
        low, high = max(low, row.versions[0]), min(high, row.versions[1])
    return range(low, high + 1)


def answers(row: Row, world: World, wires: Wires) -> dict:
    """{version: (codes, check passed)} of the row's request at each version."""
    got = {}
    for version in versions_of(row):
        wire = wires.to(world, node_for(row, world), row.user, row.fresh)
        if row.api in (ApiKey.SASL_AUTHENTICATE,):
            wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        try:
            r = wire.request(row.api, version, row.build(world, version))
        except OSError:          # closed: Kafka closes only where the API has no error field
            wires.drop(wire)
            got[version] = (["connection closed"], False)
            continue
        finally:
            if row.fresh:
                wire.close()
        codes = sorted(set((row.codes or error_codes)(r)))
        got[version] = (codes, row.check(r) if row.check else True)
    return got


def _params():
    out = []
    for api, rows in ROWS.items():
        for row in rows:
            row.api = api
            why = KNOWN_DIFFERENCES.get((api, row.case))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(row, id=f"{api.name}-{row.case}", marks=marks))
    return out


@pytest.mark.processes
@pytest.mark.parametrize("row", _params())
def test_kafka_error_semantics(row, request, wires):
    world = request.getfixturevalue("secured" if row.user else "plain")
    got = answers(row, world, wires)
    assert got, f"{row.api.name} has no version in {row.versions}"
    wrong = {v: codes for v, (codes, ok) in got.items()
             if codes != ([row.expected(v)] if row.expected(v) else []) or not ok}
    assert not wrong, (f"{row.api.name} {row.case}: Kafka answers "
                       f"{ {v: row.expected(v) for v in wrong} }, kafkalite {wrong}")


def test_every_advertised_api_has_error_semantics(plain, secured, wires):
    """Each API key a server advertises (the plain one's ApiVersions, and the
    secured one's, which adds the SASL APIs) has at least one row."""
    advertised = set()
    for world in (plain, secured):
        r = wires.to(world, CONTROLLER, "admin" if world is secured else None, False).request(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "errsem",
                                     "client_software_version": "1"})
        advertised |= {k["api_key"] for k in r["api_keys"]}
    missing = sorted(ApiKey(k).name for k in advertised - {int(k) for k in ROWS})
    assert not missing, f"advertised APIs without error semantics: {missing}"


def test_every_row_runs_to_the_newest_version_with_an_answer_for_each():
    """A version kafkalite starts to advertise is a version every row of its
    API must answer for (issue 70): each row runs up to the API's newest
    version, and its expectation names a code for every version it runs.
    A case that ends at an older version (a field a newer one dropped)
    belongs in a row of its own whose range says so, and then this test
    names it for a look at that version's change."""
    short, unanswered = [], []
    for api, rows in ROWS.items():
        newest = SUPPORTED_VERSIONS[api][1]
        for row in rows:
            row.api = api
            runs = versions_of(row)
            if not runs or runs[-1] != newest:
                short.append(f"{api.name} {row.case!r}: to v{runs[-1] if runs else None}, "
                             f"advertised to v{newest}")
            for version in runs:
                try:
                    row.expected(version)
                except StopIteration:
                    unanswered.append(f"{api.name} {row.case!r} v{version}")
    assert not short, short
    assert not unanswered, unanswered


def test_delete_topics_v6_deletes_a_topic_named_by_its_id(plain, wires):
    """The other side of DELETE_TOPICS' id rows: an entry with the id alone
    deletes that topic and names it in the answer (KIP-516)."""
    name = World.missing("by-id")
    wire = wires.to(plain, CONTROLLER, None, False)
    [created] = wire.request(ApiKey.CREATE_TOPICS, 7, {"timeout_ms": 10_000,
                                                       "topics": [new_topic(name)]})["topics"]
    assert created["error_code"] == NONE, created
    r = wire.request(ApiKey.DELETE_TOPICS, 6, {"timeout_ms": 10_000, "topics": [
        {"name": None, "topic_id": created["topic_id"]}]})
    assert [(t["name"], t["topic_id"], t["error_code"]) for t in r["responses"]] == \
        [(name, created["topic_id"], NONE)]
    [gone] = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": name}],
                                                "allow_auto_topic_creation": False})["topics"]
    assert gone["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
