"""Another user of the same host against a server with security on
(issue 67, items 2 and 5): what a local user who may write only their own
topic could do to another user's shared-memory ring and to the local
publishers of the ingest gateway.

Before: uid 65534 (nobody) read a ring's name in /dev/shm, named it in
``shm_attach`` to the worker draining it and was answered error_code 0:
the worker took the ring over under nobody's principal, and most of the
owner's next 200 records were refused as nobody's writes. And nobody,
having bound the ingest door's abstract name (``kafkalite-ingest-<port>``)
before the server started, received the records local publishers sent to
the door; the gateway logged a warning and served on without it.

Now a ring is attached only for whoever shows its secret and, on a local
door, owns its files (ext/shm_ring.pyx, "A peer naming a ring"); the ingest
door is a socket file in a directory only the server's user can add to
(local_socket.py), and the server does not start when that directory is
one another user could fill.

One server for the module (SASL_PLAINTEXT listeners and the authorizer, as
test_native_doors.py), started on an ingest port whose old door name
nobody had taken first. Becoming nobody needs root.
"""
from __future__ import annotations

import json
import os
import pwd
import select
import subprocess
import sys

import pytest
import zmq
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from harness import (ServerProcess, create, free_port, read_all, sasl_config, secured_server,
                     stop_server)
from kafkalite import errors
from kafkalite.client import Producer
from kafkalite.shm import NAME_PREFIX, SHM_DIR

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="becoming another user needs root")

NOBODY = 65534
ME = "User:unix:" + pwd.getpwuid(os.getuid()).pw_name
PASSWORDS = {"admin": "admin-secret"}
# the ingest gateway's local door until issue 67: an abstract name anyone could bind
OLD_INGEST_DOOR = "ipc://@kafkalite-ingest-{port}"

INTRUDER = r"""
import json, os, sys
import encodings.idna   # what the client imports lazily: nobody may not read our interpreter's
import zmq
import zmq.utils.monitor
from kafkalite import errors
from kafkalite.client.connection import Connection
os.setgid(65534)
os.setuid(65534)        # nobody: from here on another local user
ctx = zmq.Context()
pulls = []
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "attach":       # a ring it read the name of in /dev/shm
        conn = Connection(cmd["endpoint"], "intruder", ctx)
        try:
            out = {"error_code": conn.extension({"op": "shm_attach", "ring": cmd["ring"]},
                                                10)["error_code"]}
        except errors.KafkaError as exc:
            out = {"error_code": exc.code, "message": exc.message}
        out["door"] = conn.door
        conn.close()
    elif cmd["op"] == "bind":       # where local publishers send
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        try:
            pull.bind(cmd["endpoint"])
            pulls.append(pull)
            out = {"bound": True}
        except zmq.ZMQError as exc:
            pull.close()
            out = {"bound": False, "error": str(exc)}
    elif cmd["op"] == "received":
        got = []
        poller = zmq.Poller()
        for pull in pulls:
            poller.register(pull, zmq.POLLIN)
        while pulls and poller.poll(cmd["wait_ms"]):
            for pull in pulls:
                while True:
                    try:
                        got.append(pull.recv_multipart(zmq.NOBLOCK)[2].decode())
                    except zmq.Again:
                        break
        out = {"received": got}
    print(json.dumps(out), flush=True)
"""


class Intruder:
    """The INTRUDER script as uid 65534, told what to try line by line."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", INTRUDER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=os.getcwd())

    def call(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], 60)[0]:
            raise AssertionError(f"the intruder did not answer {cmd}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the intruder exited: {self.proc.stderr.read().decode()}")
        return json.loads(line)

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def intruder():
    child = Intruder()
    yield child
    child.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory, intruder):
    port = free_port()
    # nobody is there first, where the ingest door used to be
    assert intruder.call(op="bind", endpoint=OLD_INGEST_DOOR.format(port=port))["bound"]
    srv = secured_server(tmp_path_factory.mktemp("same-host"), PASSWORDS,
                         ["--ingest-port", str(port)])
    yield srv
    stop_server(srv)
    # the gateway takes its socket file with it (libzmq would leave it)
    assert not os.path.exists(srv.info.get("ingest.local", "ipc://").removeprefix("ipc://"))


def grant(srv, principal: str, topic: str, *operations) -> None:
    """ACLs made by the super user through Kafka's listener."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
    for f in admin.create_acls([AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op,
            AclPermissionType.ALLOW) for op in operations]).values():
        f.result(30)


def produce_errors(producer, topic: str, values: list[bytes]) -> list:
    """Each record's delivery error (None: stored)."""
    outcome = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome


def own_rings() -> set[str]:
    """The segments of the rings this test process made (a ring's name
    carries its producer's pid): the only rings the intruder is pointed at,
    so that other runs' rings on this machine are left alone."""
    prefix = f"{NAME_PREFIX}{os.getpid()}-"
    return {n for n in os.listdir(SHM_DIR) if n.startswith(prefix) and "." not in n}


def test_another_user_cannot_take_over_a_users_ring(server, intruder, topic_name):
    """nobody, who may write its own topic, names our ring (read off
    /dev/shm) to every worker, the one draining it among them: each says
    CLUSTER_AUTHORIZATION_FAILED, and all our records land."""
    ours, theirs = topic_name + "-ours", topic_name + "-nobodys"
    create(server, ours, 1)
    create(server, theirs, 1)
    grant(server, ME, ours, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.READ)
    grant(server, "User:unix:nobody", theirs, AclOperation.WRITE, AclOperation.DESCRIBE)
    before = own_rings()
    values = [b"%d" % i for i in range(201)]
    p = Producer({"bootstrap.servers": server.bootstrap, "kafkalite.transport": "shm",
                  "message.timeout.ms": 10000})
    try:
        assert produce_errors(p, ours, values[:1]) == [None]    # our ring is attached now
        rings = own_rings() - before
        assert len(rings) == 1, rings
        answers = [intruder.call(op="attach", endpoint=w["endpoint"], ring=ring)
                   for w in server.info["workers"] for ring in rings]
        failed = [e for e in produce_errors(p, ours, values[1:]) if e is not None]
    finally:
        p.close()
    assert not failed, (f"{len(failed)} of our 200 records failed after nobody's attach "
                        f"({answers}): {failed[0]}")
    assert all(a["door"] for a in answers), answers    # nobody came by a local door, as 65534
    assert {a["error_code"] for a in answers} == {
        errors.ClusterAuthorizationFailedError.code}, answers
    stored = [m.value() for m in read_all(server, ours, 1, len(values), 20.0,
                                          **{"bootstrap.servers": server.bootstrap})]
    assert stored == values


def test_a_user_who_took_the_ingest_doors_name_first_gets_no_records(server, intruder,
                                                                     topic_name):
    """Our PUSH sends to the door where the server says it is: the records
    land, nobody (who bound the door's old name before the server started)
    receives none, and cannot bind the door's socket file either."""
    create(server, topic_name, 1)
    grant(server, ME, topic_name, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.READ)
    port = int(server.info["ingest"].rsplit(":", 1)[1])
    door = server.info.get("ingest.local", OLD_INGEST_DOOR.format(port=port))
    values = [b"%d" % i for i in range(20)]
    ctx = zmq.Context()
    try:
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 2000)
        push.setsockopt(zmq.SNDTIMEO, 10_000)     # no door: a PUSH without a peer waits
        push.connect(door)
        for v in values:
            push.send_multipart([topic_name.encode(), b"", v])
    finally:
        ctx.destroy(linger=2000)    # what is queued still goes
    stolen = intruder.call(op="received", wait_ms=2000)["received"]
    assert stolen == [], f"nobody received {len(stolen)} of our {len(values)} records at {door}"
    stored = [m.value() for m in read_all(server, topic_name, 1, len(values), 20.0,
                                          **{"bootstrap.servers": server.bootstrap})]
    assert stored == values
    assert door.startswith("ipc:///"), door             # a file, not an abstract name
    taken = intruder.call(op="bind", endpoint=door)
    assert not taken["bound"], taken
    beside = intruder.call(op="bind", endpoint=f"{door}-beside")
    assert not beside["bound"] and "Permission denied" in beside["error"], beside


@pytest.mark.processes
@pytest.mark.parametrize("whose", ["nobodys", "open to all"])
def test_the_server_does_not_start_with_a_door_directory_another_user_could_fill(
        tmp_path, whose):
    doors = tmp_path / "doors"
    doors.mkdir()
    if whose == "nobodys":
        os.chown(doors, NOBODY, NOBODY)
    else:
        os.chmod(doors, 0o777)
    config = tmp_path / "server.toml"
    config.write_text(f'authorizer_enabled = true\nlocal_door_dir = "{doors}"\n')
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)])
    with pytest.raises(RuntimeError, match="server exited with 1") as refused:
        srv.start()
    why = "belongs to uid 65534" if whose == "nobodys" else "writable by group or others"
    line, = [x for x in str(refused.value).splitlines() if "kafkalite server:" in x]
    assert f"local door directory {doors} " in line and why in line, line
    assert os.listdir(doors) == []
