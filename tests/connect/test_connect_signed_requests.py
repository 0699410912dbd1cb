"""Signed internal requests (KIP-507, signature.py): ``kafkalite connect
distributed`` workers on a real server; the session key read back from the
config topic with Kafka's own client (confluent-kafka), requests signed
here with the standard library's hmac, as another worker would.

- The leader writes a session key (``session-key``: base64 key, algorithm,
  creation timestamp). ``POST /connectors/{name}/tasks`` without a
  signature answers 400, with a wrong one 403, with an algorithm the
  workers do not accept 400 (Kafka's messages); signed with the key it
  lands (written by the leader, seen by every worker), also when sent to a
  follower (forwarded with its signature).
- A short ``inter.worker.key.ttl.ms``: the leader rotates the key; a request
  signed with the old key answers 403, with the new one 204; task configs
  keep reaching the leader from every worker's connectors across the
  rotations (connectors created and reconfigured through them).
- A worker whose signature settings cannot work (an algorithm it would
  not verify, an unknown one, a key size not in bytes) exits with one line.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import subprocess
import sys
import time

import requests
from harness import child_env, wait_until
from test_connect_distributed import get, start_worker
from test_connect_leader_writes import config_records, group_name, records_of, sink_config, \
    stop_all

from kafkalite.connect.signature import (ALGORITHM_HEADER, INVALID_SIGNATURE, MISSING_SIGNATURE,
                                         SIGNATURE_HEADER)


def session_keys(server, topic):
    """The session key records of the config topic, oldest first: [(value, writer)]."""
    return [(v, w) for k, v, w in config_records(server, topic) if k == "session-key"]


def signed(key_record, body: bytes, algorithm="HmacSHA256") -> dict:
    key = base64.b64decode(key_record["key"])
    mac = hmac.new(key, body, getattr(hashlib, algorithm[len("Hmac"):].lower())).digest()
    return {SIGNATURE_HEADER: base64.b64encode(mac).decode(), ALGORITHM_HEADER: algorithm,
            "Content-Type": "application/json"}


def post_tasks(url, name, body, headers=None, forward=False):
    return requests.post(url + f"/connectors/{name}/tasks" + ("" if forward else "?forward=false"),
                         data=body, timeout=60,
                         headers=headers or {"Content-Type": "application/json"})


def taken_task_configs(tmp_path, i):
    """The connectors whose task configs worker ``i``'s REST API took (204) from
    another worker, in order (werkzeug's log)."""
    text = (tmp_path / f"worker{i}.log").read_text(errors="replace")
    return re.findall(r'"POST /connectors/(\S+)/tasks\?forward=false HTTP/[\d.]+" 204', text)


def task_files(url, name):
    return [t["config"].get("file") for t in get(url, f"/connectors/{name}/tasks") or []]


def test_task_configs_need_the_session_keys_signature(server, tmp_path, topic_name):
    group = group_name("sig")
    workers = [start_worker(server, tmp_path, i, group) for i in range(2)]
    urls = [u for _, u in workers]
    topic = f"{group}-configs"
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="2 REST APIs")
        keys = wait_until(lambda: session_keys(server, topic), timeout=60, message="a session key")
        key, writer = keys[-1]
        assert key["algorithm"] == "HmacSHA256" and len(base64.b64decode(key["key"])) == 32
        assert abs(key["creation-timestamp"] / 1000 - time.time()) < 120
        leader = "http://" + writer
        follower = next(u for u in urls if u != leader)
        # a STOPPED connector has no task configs of its own: what lands is the request's
        r = requests.post(urls[0] + "/connectors", timeout=60, json={
            "name": "s", "initial_state": "STOPPED", "config": sink_config(tmp_path, topic_name)})
        assert r.status_code == 201, r.text
        wait_until(lambda: all((get(u, "/connectors/s/status") or {}).get("connector", {}).get(
            "state") == "STOPPED" for u in urls), timeout=60, message="s STOPPED on its owner")
        body = json.dumps([{"file": "signed-0"}, {"file": "signed-1"}]).encode()

        r = post_tasks(leader, "s", body)
        assert r.status_code == 400 and r.json() == {"error_code": 400,
                                                     "message": MISSING_SIGNATURE}, r.text
        wrong = signed({"key": base64.b64encode(b"k" * 32).decode()}, body)
        r = post_tasks(leader, "s", body, wrong)
        assert r.status_code == 403 and r.json()["message"] == INVALID_SIGNATURE, r.text
        # the right key over another body: the signature covers the body's bytes
        r = post_tasks(leader, "s", body + b" ", signed(key, body))
        assert r.status_code == 403, r.text
        r = post_tasks(leader, "s", body, signed(key, body, "HmacSHA512"))
        assert r.status_code == 400 and "does not support the 'HmacSHA512'" in r.text, r.text
        r = post_tasks(follower, "s", body, {**wrong, SIGNATURE_HEADER: "not base64!"})
        assert r.status_code == 403, r.text
        # nothing of the refused requests landed (and below: only the taken ones' commits)
        assert all(task_files(u, "s") == [] for u in urls)

        def commits():
            """The task config commits of s: [(task count, writer URL)]."""
            return [(v["tasks"], "http://" + w) for k, v, w in config_records(server, topic)
                    if k == "commit-s"]

        def hand_over(body, url, forward):
            """Post the signed ``body`` to ``url`` until a leader takes it: a 409 (a
            rebalance under way, or one that moved the leadership: seen under a loaded
            full run) is tried again through the other worker, unmarked, which
            forwards it to whoever leads. -> [(url, marked as forwarded)] of the posts."""
            sent = [(url, forward)]

            def attempt():
                u, fwd = sent[-1]
                r = post_tasks(u, "s", body, signed(key, body), forward=fwd)
                assert r.status_code in (204, 409), r.text
                if r.status_code == 409:
                    sent.append((next(x for x in urls if x != u), True))
                return r.status_code == 204
            wait_until(attempt, timeout=60, interval=0.5,
                       message=lambda: f"the signed task configs taken: {sent}")
            return sent

        # to the leader, marked as forwarded (as an owner's request reaches it): it writes them
        sent = hand_over(body, leader, forward=False)
        for u in urls:
            wait_until(lambda: task_files(u, "s") == ["signed-0", "signed-1"], timeout=60,
                       message=f"{u} sees the signed task configs")
        (count, taker), = commits()
        assert count == 2
        if len(sent) == 1:
            assert taker == leader                 # the worker it was sent to led: it wrote them

        # sent to a follower (not marked as forwarded): it checks the signature, then
        # forwards the request to the leader with it, which writes it. (The worker that
        # wrote the last commit led then; if the other leads by now, it writes the request
        # itself: then once more, to the other.)
        def forwarded_by_a_follower():
            n = len(commits())
            body2 = json.dumps([{"file": f"via-follower-{n}"}]).encode()
            to = next(u for u in urls if u != commits()[-1][1])
            taken = [taken_task_configs(tmp_path, i).count("s") for i in range(2)]
            to = hand_over(body2, to, forward=True)[-1][0]     # where it was taken
            for u in urls:
                wait_until(lambda: task_files(u, "s") == [f"via-follower-{n}"], timeout=60,
                           message=f"{u}: the forwarded task configs")
            (count, writer), = commits()[n:]
            assert count == 1
            if writer == to:
                return False
            # the leader's log shows the follower's request, forwarded
            i = urls.index(writer)
            wait_until(lambda: taken_task_configs(tmp_path, i).count("s") > taken[i], timeout=10,
                       message=f"the forwarded request in {writer}'s log")
            return True
        wait_until(forwarded_by_a_follower, timeout=120, interval=0,
                   message="task configs forwarded by a follower")
        # every task config record of s is a commit's writer's, written by the leader
        recs = config_records(server, topic)
        writers = {"http://" + w for k, _, w in recs if k.startswith(("task-s-", "commit-s"))}
        assert writers <= {w for _, w in commits()} <= set(urls), (writers, commits())
        # signed, for a connector that does not exist: 404 (the signature is checked first)
        r = post_tasks(leader, "nope", b"[]", signed(key, b"[]"))
        assert r.status_code == 404, r.text
    finally:
        stop_all(workers)


def test_task_configs_reach_the_leader_across_key_rotations(server, tmp_path, topic_name):
    group = group_name("rot")
    ttl_ms = 2000
    workers = [start_worker(server, tmp_path, i, group, **{"inter.worker.key.ttl.ms": ttl_ms})
               for i in range(2)]
    urls = [u for _, u in workers]
    topic = f"{group}-configs"
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="2 REST APIs")
        first, writer = wait_until(lambda: session_keys(server, topic), timeout=60,
                                   message="a session key")[0]
        leader = "http://" + writer
        # connectors created through both workers over several key lifetimes: each is owned
        # by one of the two (two tasks each: the assignor puts connectors on both workers),
        # whose task configs (the follower's: signed) reach the leader
        names = [f"c{i}" for i in range(6)]

        def config(name, version=""):
            return sink_config(tmp_path, topic_name, file=str(tmp_path / f"{name}{version}.txt"),
                               **{"tasks.max": "2"})
        for i, name in enumerate(names):
            r = requests.post(urls[i % 2] + "/connectors", timeout=60,
                              json={"name": name, "config": config(name)})
            assert r.status_code == 201, r.text
            time.sleep(ttl_ms / 1000 / 2)
        for u in urls:
            for name in names:
                wait_until(lambda: task_files(u, name) == [str(tmp_path / f"{name}.txt")] * 2,
                           timeout=60, message=f"{u}: {name}'s task configs")
        keys = session_keys(server, topic)
        assert len(keys) >= 3, keys
        assert len({v["key"] for v, _ in keys}) == len(keys)      # each rotation: a new key
        assert {w for _, w in keys} == {writer}                   # all the leader's
        stamps = [v["creation-timestamp"] for v, _ in keys]
        assert stamps == sorted(stamps) and min(b - a for a, b in zip(stamps, stamps[1:])) \
            >= ttl_ms

        # the first key no longer opens the leader; the newest does
        body = json.dumps([{"file": str(tmp_path / "late.txt")}]).encode()
        r = post_tasks(leader, "c0", body, signed(first, body))
        assert r.status_code == 403 and r.json()["message"] == INVALID_SIGNATURE, r.text

        def with_newest():
            newest = session_keys(server, topic)[-1][0]
            return post_tasks(leader, "c0", body, signed(newest, body)).status_code == 204
        wait_until(with_newest, timeout=60, message="a request signed with the newest key")

        # every worker ends with the key the leader signs against: a config change of each
        # connector restarts it on its owner, whose new task configs reach the leader
        owners = {n: get(urls[0], f"/connectors/{n}/status")["connector"]["worker_id"]
                  for n in names}
        by_follower = [n for n in names if "http://" + owners[n] != leader]
        assert by_follower, owners
        for name in names:
            r = requests.put(urls[0] + f"/connectors/{name}/config", timeout=60,
                             json=config(name, "-v2"))
            assert r.status_code == 200, r.text
        for u in urls:
            for name in names:
                wait_until(lambda: task_files(u, name) == [str(tmp_path / f"{name}-v2.txt")] * 2,
                           timeout=60, message=f"{u}: {name}'s new task configs")
        recs = config_records(server, topic)
        assert all(len(records_of(recs, f"commit-{n}")) >= 2 for n in names)
        # the follower's connectors handed theirs to the leader, signed: twice each at least
        taken = taken_task_configs(tmp_path, urls.index(leader))
        for name in by_follower:
            assert taken.count(name) >= 2, taken
    finally:
        stop_all(workers)


def test_a_worker_refuses_signature_settings_it_cannot_honour(server, tmp_path):
    """A bad KIP-507 setting: one readable line naming it, a non-zero exit,
    before the worker joins its group."""
    cases = {"inter.worker.signature.algorithm=HmacSHA512":
             "'HmacSHA512' must be present in inter.worker.verification.algorithms",
             "inter.worker.key.generation.algorithm=HmacMD5":
             "Invalid value HmacMD5 for configuration inter.worker.key.generation.algorithm",
             "inter.worker.key.size=100": "inter.worker.key.size"}
    for i, (line, message) in enumerate(cases.items()):
        props = tmp_path / f"bad{i}.properties"
        props.write_text(f"bootstrap.servers={server.bootstrap}\ngroup.id={group_name('bad')}\n"
                         f"config.storage.topic=bad-configs\nstatus.storage.topic=bad-status\n"
                         f"offset.storage.topic=bad-offsets\nlisteners=http://127.0.0.1:0\n"
                         f"{line}\n")
        p = subprocess.run([sys.executable, "-m", "kafkalite", "connect", "distributed",
                            str(props)], env=child_env(), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 1, (line, p.stdout, p.stderr)
        assert p.stderr.startswith("kafkalite connect: ") and message in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
