"""Every node of a cluster serves the schema registry (issue 43): three
nodes sharing a real PostgreSQL (tests/postgres.py), one worker each;
node 1 holds the controller lease, nodes 2 and 3 are its broker nodes
(broker_node.py), and each serves a registry on its own port. One of them
leads and writes ``_schemas``; the others forward writes to it
(kafkalite/registry/leader.py) and answer reads from their own replay.

Faults are real: kill -9 of a whole node (tests/server/test_cluster_nodes.py
kill_node). One PostgreSQL for the module, a database (a cluster) per test.
"""
import json
import os
import time

import pytest

from harness import ServerProcess
from postgres import find_binaries
from replicas import wait_for
from test_cluster_nodes import (TIMEOUTS, _registry, controller_of, full_isr, in_parallel,
                                kill_node, live_brokers, pg)  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")

# a write through a registry whose leader was just killed: it finds the
# leader unreachable and takes over (leader.py), well within this
TAKE_OVER_BOUND_S = 30.0


@pytest.fixture
def nodes(pg, tmp_path):
    started = {}

    def start(node_id):
        started[node_id] = ServerProcess(str(tmp_path / f"node{node_id}"), workers=1,
                                         extra_args=["--cluster", pg.dsn, "--node-id",
                                                     str(node_id), *TIMEOUTS])
        return started[node_id].start()
    try:
        start(1)                # the controller first; its broker nodes together
        in_parallel(lambda: start(2), lambda: start(3))
        wait_for(lambda: live_brokers(started[1]) == 3, what="every node's worker registered")
        yield started
    finally:
        # the controller (node 1) last: stopped first, the others would
        # take over from each other while they stop
        for n in sorted(started, key=lambda n: n == 1):
            s = started[n]
            if s.proc is not None and s.proc.poll() is None:
                s.stop()
            s.kill()


def schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "f", "type": "int"}]})


def register(url: str, subject: str, text: str) -> int:
    status, answer = _registry(url, f"/subjects/{subject}/versions", {"schema": text})
    assert status == 200, (url, subject, answer)
    return answer["id"]


def schema_at(url: str, sid: int) -> str | None:
    status, answer = _registry(url, f"/schemas/ids/{sid}")
    return answer["schema"] if status == 200 else None


def test_a_schema_registered_on_one_node_is_read_on_the_others(nodes):
    """Each broker node serves a registry (server.json and its ready line
    name it); a schema registered through a broker node's registry is read
    through the controller node's and the other broker node's, and the
    reverse; concurrent registrations through all three get distinct ids,
    increasing in each caller's order, every one readable on every node."""
    urls = {n: s.info.get("schema_registry") for n, s in nodes.items()}
    assert all(urls.values()), urls
    assert len(set(urls.values())) == 3, urls
    for n in (2, 3):
        assert nodes[n].info["role"] == "broker"
        assert f"schema registry {urls[n]}" in nodes[n].output()

    on_broker = register(urls[2], "from-broker-value", schema("FromBroker"))
    on_controller = register(urls[1], "from-controller-value", schema("FromController"))
    assert on_controller != on_broker
    for n in (1, 3):
        assert json.loads(schema_at(urls[n], on_broker)) == json.loads(schema("FromBroker"))
        status, answer = _registry(urls[n], "/subjects/from-broker-value/versions/latest")
        assert status == 200 and answer["id"] == on_broker, answer
    assert json.loads(schema_at(urls[2], on_controller)) == json.loads(schema("FromController"))

    per_caller: dict[int, list[int]] = {}

    def caller(n: int) -> None:
        per_caller[n] = [register(urls[n], f"concurrent-{n}-{i}-value", schema(f"C{n}x{i}"))
                         for i in range(6)]
    in_parallel(*[lambda n=n: caller(n) for n in urls])
    given = [sid for ids in per_caller.values() for sid in ids]
    assert len(set(given)) == len(given) == 18, per_caller
    assert not {on_broker, on_controller} & set(given), per_caller
    for n, ids in per_caller.items():
        assert ids == sorted(ids), (n, ids)
        for i, sid in enumerate(ids):
            for url in urls.values():
                assert json.loads(schema_at(url, sid)) == json.loads(schema(f"C{n}x{i}")), \
                    (url, sid)


def test_kill_9_of_the_leading_registrys_node_loses_no_schema(nodes):
    """kill -9 of the broker node whose registry leads (it made the first
    write): a registration through another broker node's registry succeeds
    within a bound, with an id past every id given before, and every
    schema registered before is readable there and on the controller's
    node, under its id."""
    urls = {n: s.info["schema_registry"] for n, s in nodes.items()}
    ids = {}
    for i in range(8):
        text = schema(f"K{i}")
        ids[register(urls[2], f"kill-{i}-value", text)] = text   # node 2's registry leads
    for i in range(8, 12):
        text = schema(f"K{i}")
        ids[register(urls[3], f"kill-{i}-value", text)] = text   # forwarded to node 2's
    assert len(ids) == 12
    wait_for(lambda: full_isr(nodes[1], "_schemas", 1), what="_schemas on three nodes")
    kill_node(nodes[2])

    began = time.monotonic()
    after = register(urls[3], "after-kill-value", schema("AfterKill"))
    assert time.monotonic() - began < TAKE_OVER_BOUND_S
    assert after > max(ids), (after, sorted(ids))
    for url in (urls[3], urls[1]):
        for sid, before in ids.items():
            assert json.loads(wait_for(lambda url=url, sid=sid: schema_at(url, sid),
                                       what=f"schema {sid} at {url}")) == json.loads(before)
        # a schema registered before the kill is found, not given a new id
        status, answer = _registry(url, "/subjects/kill-0-value", {"schema": ids[min(ids)]})
        assert status == 200 and answer["id"] == min(ids), answer
    # and the controller's node registers past them all too (forwarded to node 3's)
    assert register(urls[1], "after-kill-2-value", schema("AfterKill2")) > after


def test_a_broker_nodes_registry_follows_the_controller_and_takes_over_its_port(nodes, pg):
    """kill -9 of the controller node while its registry leads: the broker
    node that does not take the lease keeps its registry at the same URL,
    now over the new controller, and registers past every earlier id; the
    node that takes over serves the registry again (its broker node's one
    closed first: one registry on the port), with every schema."""
    urls = {n: s.info["schema_registry"] for n, s in nodes.items()}
    ids = {register(urls[1], f"move-{i}-value", schema(f"M{i}")): schema(f"M{i}")
           for i in range(6)}
    wait_for(lambda: full_isr(nodes[1], "_schemas", 1), what="_schemas on three nodes")
    kill_node(nodes[1])
    taken = wait_for(lambda: (lambda ctl: ctl if ctl and ctl["live"] and ctl["node_id"] != 1
                              and ctl["endpoints"] else None)(controller_of(pg.dsn)),
                     timeout=60, what="another node taking the controller lease")
    new, other = taken["node_id"], ({2, 3} - {taken["node_id"]}).pop()
    wait_for(lambda: os.path.exists(os.path.join(nodes[new].data_dir, "server.json"))
             and nodes[new].refresh().get("role") != "broker"
             and nodes[new].info.get("schema_registry"), timeout=60,
             what="the new controller's registry")
    # both keep their registry's URL: the new controller adopted its broker
    # node's (no second registry on the port), the other followed the lease
    assert nodes[new].info["schema_registry"] == urls[new]
    assert nodes[other].refresh()["schema_registry"] == urls[other]
    after = wait_for(lambda: (lambda r: r[1]["id"] if r[0] == 200 else None)(_registry(
        urls[other], "/subjects/move-next-value/versions", {"schema": schema("MoveNext")})),
        timeout=60, what="a registration through the remaining broker node's registry")
    assert after > max(ids), (after, sorted(ids))
    for url in (urls[other], nodes[new].info["schema_registry"]):
        for sid, before in ids.items():
            assert json.loads(wait_for(lambda url=url, sid=sid: schema_at(url, sid),
                                       timeout=60, what=f"schema {sid} at {url}")) \
                == json.loads(before)


def _as(user: str, password: str, url: str, path: str, body: dict | None = None):
    """(status, answer) of a registry's REST API, logged in with HTTP Basic."""
    import base64
    import urllib.error
    import urllib.request
    request = urllib.request.Request(
        url + path, method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json",
                 "Authorization": "Basic " + base64.b64encode(
                     f"{user}:{password}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_broker_nodes_registry_asks_the_clusters_users_and_acls(pg, tmp_path):
    """With security on (SASL listeners, the nodes' CURVE key pair, the
    authorizer with no access unless granted) a broker node's registry asks
    for a login as the controller node's does, against the cluster's users
    (its node's mirror of them), and the cluster's ACLs (a subject is the
    TOPIC resource ``subject:<name>``), granted after it started: no login
    is a 401; the admin registers through both nodes' registries (one write
    forwarded with the caller's Authorization header) and reads each schema
    on both; alice may register under ``alice-`` through the broker node's
    registry once her ACL is granted, and nowhere else (40301)."""
    from harness import run_cli
    passwords = {"admin": "admin-secret-1", "alice": "alice-secret-1"}
    for user, password in passwords.items():
        r = run_cli("users", "add", user, "--mechanism", "SCRAM-SHA-256", "--data-dir",
                    str(tmp_path / "node1"), stdin=password.encode() + b"\n")
        assert r.returncode == 0, r.stderr.decode()
    keys = tmp_path / "keys"
    assert run_cli("curve", "keygen", "node", "--dir", str(keys)).returncode == 0
    config = tmp_path / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n'
                      'allow_everyone_if_no_acl_found = false\n')
    nodes = {}
    try:
        for n in (1, 2):
            nodes[n] = ServerProcess(str(tmp_path / f"node{n}"), workers=1, extra_args=[
                "--cluster", pg.dsn, "--node-id", str(n), "--config", str(config),
                "--kafka-security-protocol", "SASL_PLAINTEXT", *TIMEOUTS,
                "--native-curve-secret-key-file", str(keys / "node.key_secret")]).start()
        assert nodes[2].info["role"] == "broker"
        urls = {n: nodes[n].info["schema_registry"] for n in (1, 2)}

        def as_(user, url, path, body=None):
            return _as(user, passwords[user], url, path, body)
        status, answer = _registry(urls[2], "/subjects/secured-value/versions",
                                   {"schema": schema("Secured")})
        assert status == 401, answer
        status, answer = _as("admin", "wrong", urls[2], "/subjects")
        assert status == 401, answer
        ids = {}
        for n in (2, 1):
            status, answer = as_("admin", urls[n], f"/subjects/s{n}-value/versions",
                                 {"schema": schema(f"S{n}")})
            assert status == 200, (n, answer)
            ids[n] = answer["id"]
        assert ids[1] != ids[2]
        for n, sid in ids.items():
            for url in urls.values():
                status, answer = as_("admin", url, f"/schemas/ids/{sid}")
                assert status == 200 and json.loads(answer["schema"]) == json.loads(
                    schema(f"S{n}")), (url, answer)

        status, answer = as_("alice", urls[2], "/subjects/alice-value/versions",
                             {"schema": schema("Alice")})
        assert status == 403 and answer["error_code"] == 40301, answer
        r = run_cli("acls", "add", "--bootstrap-server", nodes[1].kafka_bootstrap,
                    "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism",
                    "SCRAM-SHA-256", "--sasl-username", "admin", "--sasl-password",
                    passwords["admin"], "--allow-principal", "User:alice", "--topic",
                    "subject:alice-", "--resource-pattern-type", "prefixed",
                    "--operation", "Write", "--operation", "Read")
        assert r.returncode == 0, r.stderr.decode()
        status, answer = wait_for(lambda: (lambda r: r if r[0] != 403 else None)(as_(
            "alice", urls[2], "/subjects/alice-value/versions", {"schema": schema("Alice")})),
            timeout=15, what="alice's ACL at the broker node's registry")
        assert status == 200 and answer["id"] not in ids.values(), answer
        status, answer = as_("alice", urls[2], "/subjects/other-value/versions",
                             {"schema": schema("Other")})
        assert status == 403 and answer["error_code"] == 40301, answer
    finally:
        for n in sorted(nodes, reverse=True):       # the controller (node 1) last
            if nodes[n].proc is not None and nodes[n].proc.poll() is None:
                nodes[n].stop()
