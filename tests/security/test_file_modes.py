"""What a server with security on leaves on disk for other local users
(issue 40): nothing. Its data directory and every directory under it are
0750 at most, every file 0640 at most (the umask it runs under,
security.SECURE_UMASK, which its workers inherit), and the ACLs 0600, as
the SCRAM credentials already were. Before, segments and acls.json were
0644: any local user could read the records the ACLs protect, and who may
do what.

A server of the test's own (the authorizer on, User:ANONYMOUS a super user
so that the test's PLAINTEXT clients may create ACLs), started on a data
directory made 0755 beforehand, as an existing one would be.
"""
from __future__ import annotations

import os
import stat

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from harness import ServerProcess


def modes(root: str) -> dict[str, int]:
    out = {root: stat.S_IMODE(os.stat(root).st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            out[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


@pytest.mark.processes
def test_a_secured_server_keeps_its_files_from_other_users(tmp_path, topic_name):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)                       # whatever the test process's umask
    config = tmp_path / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:ANONYMOUS"\n')
    srv = ServerProcess(str(data), extra_args=["--config", str(config)]).start()
    try:
        kafka = {"bootstrap.servers": srv.kafka_bootstrap}
        admin = AdminClient(kafka)
        for f in admin.create_topics([NewTopic(topic_name, 2, 1)]).values():
            f.result(30)
        for f in admin.create_acls([AclBinding(
                ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.READ, AclPermissionType.ALLOW)]).values():
            f.result(30)
        p = Producer(kafka)
        for i in range(100):
            p.produce(topic_name, b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        found = modes(str(data))
    finally:
        srv.stop()
        srv.kill()
    segments = [p for p in found if p.endswith(".log")]
    assert segments, "the topic's segments"
    open_to_others = {p: oct(m) for p, m in found.items() if m & 0o007}
    assert open_to_others == {}
    writable_by_group = {p: oct(m) for p, m in found.items() if m & 0o020}
    assert writable_by_group == {}
    assert found[str(data / "acls.json")] == 0o600


@pytest.mark.processes
def test_a_server_without_security_keeps_the_usual_modes(tmp_path, topic_name):
    """Nothing changes for a server without security: its files stay
    readable as before (tools of other users read its logs)."""
    data = tmp_path / "data"
    old = os.umask(0o022)
    try:
        srv = ServerProcess(str(data)).start()
    finally:
        os.umask(old)
    try:
        admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
        for f in admin.create_topics([NewTopic(topic_name, 1, 1)]).values():
            f.result(30)
        found = modes(str(data))
    finally:
        srv.stop()
        srv.kill()
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o755
    assert any(p.endswith(".log") and m == 0o644 for p, m in found.items()), found


def test_the_users_file_and_its_lock_are_the_owners_alone(tmp_path):
    """``sasl-users.json.lock`` was created 0644 (issue 67); one an earlier
    version left so is made 0600 by the next write."""
    from harness import run_cli
    data = tmp_path / "data"
    r = run_cli("users", "add", "alice", "--data-dir", str(data), stdin=b"alice-secret\n")
    assert r.returncode == 0, r.stderr
    users = data / "sasl-users.json"
    assert stat.S_IMODE(os.stat(users).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(users) + ".lock").st_mode) == 0o600
    os.chmod(str(users) + ".lock", 0o644)
    r = run_cli("users", "add", "bob", "--data-dir", str(data), stdin=b"bob-secret\n")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(str(users) + ".lock").st_mode) == 0o600
