"""The registry's state and its ``_schemas`` topic (kafkalite/registry/store.py):
the records are Confluent's layout in a compacted topic; a kill -9 of the
server in the middle of registrations, then a restart, loses no
acknowledged registration and gives no id twice; a replay of the topic as
compaction leaves it (a permanently deleted schema's records gone) still
gives ids past every id ever given.

One server for the module (it is killed and restarted).
"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from harness import ServerProcess, read_all, wait_until
from kafkalite.registry.store import SCHEMAS_TOPIC, RegistryState


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = ServerProcess(str(tmp_path_factory.mktemp("registry") / "data"), workers=1).start()
    yield server
    if server.proc.poll() is None:
        server.stop()
    server.kill()


def post(url: str, body: dict, timeout: float = 10.0):
    request = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]})


def test_records_are_confluents_layout_in_a_compacted_topic(srv):
    from kafkalite.client import AdminClient, ConfigResource, ResourceType
    url = srv.info["schema_registry"]
    sid = post(f"{url}/subjects/layout-value/versions", {"schema": schema(0)})["id"]
    urllib.request.urlopen(urllib.request.Request(
        f"{url}/config/layout-value", method="PUT", data=b'{"compatibility": "FULL"}'))
    # (the registry's LEADER record first: kafkalite's own key, leader.py)
    records = [r for r in read_all(srv, SCHEMAS_TOPIC, 1, 3)
               if json.loads(r.key())["keytype"] != "LEADER"]
    keys = [json.loads(r.key()) for r in records]
    assert keys[:2] == [
        {"keytype": "SCHEMA", "subject": "layout-value", "version": 1, "magic": 1},
        {"keytype": "CONFIG", "subject": "layout-value", "magic": 0}]
    assert json.loads(records[0].value()) == {
        "subject": "layout-value", "version": 1, "id": sid, "schema": schema(0).replace(" ", ""),
        "deleted": False}
    assert json.loads(records[1].value()) == {"compatibilityLevel": "FULL"}
    admin = AdminClient(srv.config())
    try:
        resource = ConfigResource(ResourceType.TOPIC, SCHEMAS_TOPIC)
        configs = admin.describe_configs([resource])[resource].result()
        assert configs["cleanup.policy"].value == "compact"
    finally:
        admin.close()


def test_kill_9_mid_registrations_then_restart_loses_nothing_acknowledged(srv):
    url = srv.info["schema_registry"]
    acknowledged: dict[str, int] = {}          # subject -> id the registry answered
    stop = threading.Event()

    def register_many() -> None:
        i = 1
        while not stop.is_set():
            try:
                answer = post(f"{url}/subjects/kill-{i}-value/versions", {"schema": schema(i)},
                              timeout=2)
                acknowledged[f"kill-{i}-value"] = answer["id"]
            except (OSError, ValueError):
                return                          # the server is gone
            i += 1

    writer = threading.Thread(target=register_many, daemon=True)
    writer.start()
    wait_until(lambda: len(acknowledged) >= 40, 30, "40 acknowledged registrations")
    srv.kill()                                  # SIGKILL to the supervisor, mid-registration
    stop.set()
    writer.join(10)
    srv.start()                                 # (it adopts the running workers)
    url = srv.info["schema_registry"]
    for subject, sid in acknowledged.items():
        assert get(f"{url}/subjects/{subject}/versions/1")[1]["id"] == sid, subject
    assert len(set(acknowledged.values())) == len(acknowledged)
    fresh = {post(f"{url}/subjects/after-{i}-value/versions", {"schema": schema(10_000 + i)})[
        "id"] for i in range(5)}
    assert min(fresh) > max(acknowledged.values()), "an id was given again after the restart"


def test_a_compacted_topic_still_gives_ids_past_a_permanently_deleted_one():
    """The records compaction leaves of: id 1 registered under 'a', id 2
    under 'b' then permanently deleted (its SCHEMA record compacted away,
    its tombstone and the MAX_ID record kept)."""
    state = RegistryState()
    state.apply({"keytype": "SCHEMA", "subject": "a", "version": 1, "magic": 1},
                {"subject": "a", "version": 1, "id": 1, "schema": '"int"', "deleted": False})
    state.apply({"keytype": "MAX_ID", "magic": 0}, {"id": 2})
    state.apply({"keytype": "SCHEMA", "subject": "b", "version": 1, "magic": 1}, None)
    assert state.max_id == 2
    assert sorted(state.subjects) == ["a"]
