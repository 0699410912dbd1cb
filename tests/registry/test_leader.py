"""Several schema registries on one cluster (kafkalite/registry/leader.py):
one leads and writes ``_schemas``, the others forward writes to it and
answer reads from their own replay. The registries are the node's own and
standalone ones (``python -m kafkalite.registry``), real processes on real
ports; kill -9 is SIGKILL of the leader's process.

One server for the module; each test starts its own registries. The tests
run in one xdist group, in this file's order, the node's own registry
written to only by the last: the first two assert which of their own
registries leads, and a leader another test left running (the node's)
would keep the lead. A stopped registry's lead passes on at the next
write, as a killed one's does.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from harness import ServerProcess, read_all, wait_until
from kafkalite.registry.store import SCHEMAS_TOPIC

pytestmark = pytest.mark.xdist_group("registry-leader")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = ServerProcess(str(tmp_path_factory.mktemp("leader") / "data"), workers=2).start()
    yield server
    server.stop()


class Registry:
    """A standalone registry process on a free port."""

    def __init__(self, bootstrap: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkalite.registry", "--bootstrap", bootstrap,
             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(30)
        assert line and line[0].startswith("schema registry "), f"no url: {line}"
        self.url = line[0].split()[-1]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()


@pytest.fixture
def registries(srv):
    started = []

    def start(n: int) -> list[Registry]:
        for _ in range(n):
            started.append(Registry(srv.bootstrap))
        return started[-n:]
    yield start
    for r in started:
        r.stop()


def call(url: str, path: str, body: dict | None = None, method: str | None = None,
         timeout: float = 60.0):
    """(status, answer) of a registry's REST API."""
    request = urllib.request.Request(
        url + path, method=method or ("POST" if body is not None else "GET"),
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def schema(name: str, field_type: str = "int") -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": "f", "type": field_type}]})


def leader_url(srv) -> str | None:
    """The URL the last LEADER record of _schemas names."""
    named = [json.loads(r.value())["url"] for r in read_all(srv, SCHEMAS_TOPIC, 1, 10_000,
                                                             timeout=3)
             if json.loads(r.key()).get("keytype") == "LEADER" and r.value() is not None]
    return named[-1] if named else None


def test_kill_9_of_the_leader_then_a_survivor_registers_past_every_id(srv, registries):
    """SIGKILL of the leading registry's process: a registration through
    another registry succeeds (it finds the leader gone and takes over)
    within a bound, with an id past every id given before; the schemas
    registered before are all there."""
    first, second = registries(2)
    ids = {}
    for i in range(5):
        status, answer = call(first.url, f"/subjects/kill-{i}-value/versions",
                              {"schema": schema(f"Kill{i}")})
        assert status == 200, answer
        ids[answer["id"]] = f"Kill{i}"
    assert leader_url(srv) == first.url
    # through the follower too: forwarded to the leader
    status, answer = call(second.url, "/subjects/kill-5-value/versions",
                          {"schema": schema("Kill5")})
    assert status == 200, answer
    ids[answer["id"]] = "Kill5"
    first.kill()
    status, answer = wait_until(
        lambda: (lambda r: r if r[0] == 200 else None)(
            call(second.url, "/subjects/kill-after-value/versions",
                 {"schema": schema("KillAfter")}, timeout=20)),
        30, "a registration through the surviving registry")
    assert answer["id"] > max(ids), (answer, sorted(ids))
    assert leader_url(srv) == second.url
    for sid, name in ids.items():
        status, answer = call(second.url, f"/schemas/ids/{sid}")
        assert status == 200 and json.loads(answer["schema"])["name"] == name


def test_a_forwarded_write_carries_the_leaders_error_back_unchanged(srv, registries):
    """An incompatible schema registered through a follower: the leader's
    409 comes back as it gave it (status and body), and the follower did
    not take the writes over."""
    leader, follower = registries(2)
    status, answer = call(leader.url, "/subjects/fwd-value/versions",
                          {"schema": schema("Fwd")})
    assert status == 200, answer
    assert leader_url(srv) == leader.url
    incompatible = {"schema": schema("Fwd", "string")}
    status, through_follower = call(follower.url, "/subjects/fwd-value/versions", incompatible)
    assert status == 409 and through_follower["error_code"] == 409, through_follower
    assert call(leader.url, "/subjects/fwd-value/versions", incompatible) == \
        (409, through_follower)
    # a config change through the follower is the leader's write too
    status, answer = call(follower.url, "/config/fwd-value", {"compatibility": "NONE"},
                          method="PUT")
    assert status == 200 and answer == {"compatibility": "NONE"}, answer
    assert leader_url(srv) == leader.url
    status, answer = call(follower.url, "/subjects/fwd-value/versions", incompatible)
    assert status == 200 and answer["id"] > 0, answer
    assert call(leader.url, "/config/fwd-value") == (200, {"compatibilityLevel": "NONE"})


def test_concurrent_registrations_over_every_registry_give_distinct_ids(srv, registries):
    """Distinct schemas registered at once through four registries (the
    node's and three standalone ones, eight threads): each gets an id of
    its own, and every registry answers every id with its schema. Before
    the leader, each registry decided the next id on its own replay and
    two of them gave the same id to different schemas."""
    urls = [srv.info["schema_registry"]] + [r.url for r in registries(3)]
    given: dict[str, int] = {}
    failures = []

    def register(thread: int) -> None:
        for i in range(10):
            name = f"Race{thread}x{i}"
            status, answer = call(urls[(thread + i) % len(urls)],
                                  f"/subjects/race-{thread}-{i}-value/versions",
                                  {"schema": schema(name)})
            if status != 200:
                failures.append((name, status, answer))
            else:
                given[name] = answer["id"]
    threads = [threading.Thread(target=register, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures[:3]
    assert len(given) == 80
    reused = {sid: [n for n, s in given.items() if s == sid] for sid in set(given.values())}
    assert len(set(given.values())) == 80, {s: n for s, n in reused.items() if len(n) > 1}
    for name, sid in given.items():
        for url in urls:
            status, answer = call(url, f"/schemas/ids/{sid}")
            assert status == 200 and json.loads(answer["schema"])["name"] == name, \
                (url, sid, name, answer)
