"""SASL users across the nodes of a cluster (``--cluster DSN``): the users
live in PostgreSQL (``kafkalite_users``) and every node's users file
mirrors them (cluster_store.UsersMirror), so a user created through
AlterUserScramCredentials logs in on every node's Kafka listeners.

Real parts: a PostgreSQL (tests/postgres.py), nodes as separate
``kafkalite server`` processes with SASL_PLAINTEXT Kafka listeners, and
confluent-kafka's AdminClient and producers. Node 1 (the controller) starts
with an ``admin`` user in its own file, which seeds the cluster's users;
node 2 starts with none and gets them. Logins are checked on node 2's
worker's own Kafka port (its broker id from ``kafkalite_brokers``), where
only the mirror can have put the user.

One PostgreSQL for the module, a fresh database per test; the test that
stops PostgreSQL has one of its own.
"""
import json
import os
import subprocess
import sys
import threading
import time

import confluent_kafka as ck
import psycopg
import pytest
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire  # noqa: E402
from harness import ServerProcess, run_cli  # noqa: E402
from postgres import PostgresServer, find_binaries, new_database  # noqa: E402
from replicas import wait_for  # noqa: E402

from kafkalite.protocol import ApiKey  # noqa: E402

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret-1"
TIMEOUTS = ["--controller-lease-ms", "3000", "--broker-session-timeout-ms", "2000"]


def kafkalite(*args, input=None) -> subprocess.CompletedProcess:
    """``kafkalite ARGS`` (in this process), its output as text."""
    r = run_cli(*args, stdin=(input or "").encode())
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(),
                                       r.stderr.decode())


class Cluster:
    def __init__(self, pg, root):
        self.pg, self.root, self.nodes = pg, root, {}
        self._admins: dict[str, AdminClient] = {}

    def data_dir(self, node_id) -> str:
        return str(self.root / f"node{node_id}")

    def start(self, node_id) -> ServerProcess:
        # with security on a cluster's own channels need the nodes' key pair
        keys = self.root / "keys"
        if not keys.exists():
            assert kafkalite("curve", "keygen", "node", "--dir", str(keys)).returncode == 0
        s = ServerProcess(self.data_dir(node_id), workers=1, extra_args=[
            "--cluster", self.pg.dsn, "--node-id", str(node_id),
            "--kafka-security-protocol", "SASL_PLAINTEXT", *TIMEOUTS,
            "--native-curve-secret-key-file", str(keys / "node.key_secret")])
        self.nodes[node_id] = s
        return s.start()

    def admin(self, bootstrap=None) -> AdminClient:
        """An AdminClient logged in as admin (kept: its futures need it alive)."""
        bootstrap = bootstrap or self.nodes[1].kafka_bootstrap
        if bootstrap not in self._admins:
            self._admins[bootstrap] = AdminClient(conf(bootstrap, ADMIN, ADMIN_PASSWORD))
        return self._admins[bootstrap]

    def kafka_port(self, node_id) -> str:
        """host:port of the Kafka listener of ``node_id``'s (only) worker."""
        with psycopg.connect(self.pg.dsn) as c:
            broker, = c.execute("SELECT broker_id FROM kafkalite_brokers WHERE node_id = %s",
                                (node_id,)).fetchone()
        brokers = self.admin().list_topics(timeout=15).brokers
        return f"{brokers[broker].host}:{brokers[broker].port}"

    def registered(self) -> int:
        """How many workers the controller knows (not itself: Kafka broker 1000)."""
        try:
            return len(set(self.admin().list_topics(timeout=5).brokers) - {1000})
        except ck.KafkaException:
            return 0


def conf(bootstrap, user, password, mechanism="SCRAM-SHA-512", **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "socket.timeout.ms": 10000, **extra}


def accepted(address, user, password, mechanism="SCRAM-SHA-256") -> bool:
    """Whether the Kafka listener at ``address`` takes this login now (a bare
    connection; scramp's SCRAM client): how the test waits for a node's
    mirror before asking confluent-kafka, whose failed logins in a loop
    have left confluent-kafka 2.12 with a stray Python exception set."""
    import scramp
    w = KafkaWire(address)
    try:
        assert w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
        if mechanism == "PLAIN":
            return w.request(ApiKey.SASL_AUTHENTICATE, 1, {
                "auth_bytes": f"\0{user}\0{password}".encode()})["error_code"] == 0
        client = scramp.ScramClient([mechanism], user, password)
        first = w.request(ApiKey.SASL_AUTHENTICATE, 1,
                          {"auth_bytes": client.get_client_first().encode()})
        if first["error_code"]:
            return False
        client.set_server_first(first["auth_bytes"].decode())
        return w.request(ApiKey.SASL_AUTHENTICATE, 1, {
            "auth_bytes": client.get_client_final().encode()})["error_code"] == 0
    except ConnectionError:         # the listener closes a connection whose login failed
        return False
    finally:
        w.sock.close()


def logs_in(bootstrap, user, password, mechanism="SCRAM-SHA-256") -> bool:
    """A confluent-kafka producer logged in as ``user`` at ``bootstrap`` gets
    a record acknowledged (True), or is told its login failed (False); it
    produces only once the login is known to work (``accepted``)."""
    seen = []
    p = ck.Producer(conf(bootstrap, user, password, mechanism, **{
        "error_cb": lambda err: seen.append(err.code()), "message.timeout.ms": 15000}))
    if not accepted(bootstrap, user, password, mechanism):
        deadline = time.monotonic() + 15
        while not seen and time.monotonic() < deadline:
            p.poll(0.2)
        assert seen and seen[0] == ck.KafkaError._AUTHENTICATION, seen
        return False
    delivered = []
    p.produce("logins", b"x", on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(20) == 0 and delivered == [None], (delivered, seen)
    return True


def upsert(admin, user, password) -> None:
    alteration = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode())
    admin.alter_user_scram_credentials([alteration], request_timeout=10)[user].result(15)


def delete(admin, user) -> None:
    admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)],
        request_timeout=10)[user].result(15)


def described(admin) -> set:
    return set(admin.describe_user_scram_credentials(None, request_timeout=10).result(15))


def mirrored(data_dir) -> dict:
    with open(os.path.join(data_dir, "sasl-users.json")) as f:
        return json.load(f)


def _cluster(pg, tmp_path):
    c = Cluster(pg, tmp_path)
    r = kafkalite("users", "add", ADMIN, "--data-dir", c.data_dir(1), "--mechanism",
                  "SCRAM-SHA-512", input=ADMIN_PASSWORD + "\n")
    assert r.returncode == 0, r.stderr
    try:
        c.start(1)
        c.start(2)
        wait_for(lambda: c.registered() == 2, what="both nodes' workers registered")
        c.admin().create_topics([NewTopic("logins", 1, 2)])["logins"].result(15)
        yield c
    finally:
        for s in reversed(list(c.nodes.values())):   # the controller (node 1) last
            if s.proc is not None and s.proc.poll() is None:
                s.stop()


@pytest.fixture
def cluster(pg_server, tmp_path):
    yield from _cluster(new_database(pg_server), tmp_path)


@pytest.fixture
def cluster_own_pg(tmp_path):
    """A cluster whose PostgreSQL the test may stop and start."""
    pg = PostgresServer().start()
    try:
        yield from _cluster(pg, tmp_path)
    finally:
        pg.stop()


@pytest.mark.timeout(120)
def test_a_user_altered_through_the_api_logs_in_on_the_other_node(cluster):
    other = cluster.kafka_port(2)
    # bootstrapped at node 2's listener (librdkafka then sends the alteration to
    # the controller it learns of; the users command's relay through node 2's
    # worker is below)
    upsert(cluster.admin(other), "carol", "carol-pw")
    wait_for(lambda: accepted(other, "carol", "carol-pw"), what="carol's login on node 2")
    assert logs_in(other, "carol", "carol-pw")
    assert not logs_in(other, "carol", "wrong-pw")
    assert "carol" in described(cluster.admin(other))
    delete(cluster.admin(), "carol")
    wait_for(lambda: not accepted(other, "carol", "carol-pw"), what="carol refused on node 2")
    assert not logs_in(other, "carol", "carol-pw")
    assert "carol" not in described(cluster.admin(other))
    # node 1's own user seeded the cluster; node 2 got it from PostgreSQL
    assert set(mirrored(cluster.data_dir(2))["users"]) == {ADMIN}


@pytest.mark.timeout(180)
def test_users_survive_restarts_and_reach_a_node_started_later(cluster):
    upsert(cluster.admin(), "dave", "dave-pw")
    upsert(cluster.admin(), "erin", "erin-pw")
    # node 2 is away while erin is deleted: it learns of it when it comes back
    cluster.nodes[2].stop()
    delete(cluster.admin(), "erin")
    cluster.start(2)
    # and node 1, the controller, restarts: the users are PostgreSQL's, not its file's
    cluster.nodes[1].stop()
    os.unlink(os.path.join(cluster.data_dir(1), "sasl-users.json"))
    cluster.start(1)
    wait_for(lambda: cluster.registered() == 2, what="node 2's worker joined the new controller")
    assert {"admin", "dave"} <= described(cluster.admin()) and "erin" not in described(
        cluster.admin())
    other = cluster.kafka_port(2)
    wait_for(lambda: accepted(other, "dave", "dave-pw"), what="dave's login on node 2")
    assert logs_in(other, "dave", "dave-pw")
    assert not logs_in(other, "erin", "erin-pw")
    # a node that joins after the changes has them at once; users of its own
    # file are the cluster's no more (the first node's were: the seed)
    r = kafkalite("users", "add", "mallory", "--data-dir", cluster.data_dir(3), "--password", "m")
    assert r.returncode == 0, r.stderr
    cluster.start(3)
    wait_for(lambda: cluster.registered() == 3, what="node 3's worker registered")
    assert set(mirrored(cluster.data_dir(3))["users"]) == {"admin", "dave"}
    assert "were dropped" in cluster.nodes[3].output() and "mallory" in cluster.nodes[3].output()
    assert logs_in(cluster.kafka_port(3), "dave", "dave-pw")
    assert not logs_in(cluster.kafka_port(3), "mallory", "m", "PLAIN")


@pytest.mark.timeout(120)
def test_the_users_command_on_a_cluster(cluster):
    # a node's file is a mirror: editing it would be undone, so it is refused
    r = kafkalite("users", "add", "frank", "--data-dir", cluster.data_dir(2), "--password", "x")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--bootstrap-server" in r.stderr and "Traceback" not in r.stderr
    assert "frank" not in mirrored(cluster.data_dir(2))["users"]
    # --cluster edits PostgreSQL, PLAIN users too (Kafka has no API for them)
    r = kafkalite("users", "add", "grace", "--cluster", cluster.pg.dsn, "--mechanism", "PLAIN",
                  "--mechanism", "SCRAM-SHA-256", "--password", "grace-pw")
    assert r.returncode == 0, r.stderr
    other = cluster.kafka_port(2)
    wait_for(lambda: accepted(other, "grace", "grace-pw", "PLAIN"), what="grace's login (PLAIN)")
    assert logs_in(other, "grace", "grace-pw", "PLAIN")
    r = kafkalite("users", "list", "--cluster", cluster.pg.dsn)
    assert "grace\tPLAIN,SCRAM-SHA-256" in r.stdout.splitlines(), r.stdout
    # --bootstrap-server: sent to node 2's worker, which relays it to the controller
    r = kafkalite("users", "delete", "grace", "--bootstrap-server", other,
                  "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-512",
                  "--sasl-username", ADMIN, "--sasl-password", ADMIN_PASSWORD)
    assert r.returncode == 0, r.stderr
    r = kafkalite("users", "list", "--cluster", cluster.pg.dsn)
    assert "grace\tPLAIN" in r.stdout.splitlines(), r.stdout     # Kafka's API leaves PLAIN alone
    r = kafkalite("users", "delete", "nobody", "--cluster", cluster.pg.dsn)
    assert r.returncode == 1 and "no SASL user 'nobody'" in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_while_postgresql_is_away_logins_go_on_and_alterations_are_refused(cluster_own_pg):
    cluster = cluster_own_pg
    other = cluster.kafka_port(2)
    upsert(cluster.admin(other), "heidi", "heidi-pw")
    wait_for(lambda: accepted(other, "heidi", "heidi-pw"), what="heidi's login on node 2")
    cluster.pg.halt()
    try:
        # the nodes log users in from their mirrors
        assert logs_in(other, "heidi", "heidi-pw")
        with pytest.raises(ck.KafkaException) as refused:
            upsert(cluster.admin(), "ivan", "ivan-pw")
        assert refused.value.args[0].code() == ck.KafkaError.KAFKA_STORAGE_ERROR, refused.value
    finally:
        cluster.pg.resume()
    # not stored, so nowhere; a change once PostgreSQL is back reaches node 2's
    # mirror (which lost its connection meanwhile) as before
    wait_for(lambda: _stored(cluster.admin(), "ivan", "ivan-pw"), what="an alteration stored again")
    wait_for(lambda: accepted(other, "ivan", "ivan-pw"), what="ivan's login on node 2")
    assert logs_in(other, "ivan", "ivan-pw")


def _stored(admin, user, password) -> bool:
    try:
        upsert(admin, user, password)
        return True
    except ck.KafkaException:
        return False


def test_concurrent_edits_of_the_cluster_users_are_all_kept(pg_server):
    """Two writers (the controller's AlterUserScramCredentials and ``kafkalite
    users --cluster``, say) change the row at once: the second waits on the
    first's row lock and changes what the first wrote, so neither edit is
    lost (without the lock it reads the row as it was and overwrites it:
    planted, this test fails)."""
    from kafkalite.server.controller import cluster_store
    dsn = new_database(pg_server).dsn
    conns = [cluster_store.connect(dsn, 5.0, autocommit=i == 2) for i in range(3)]
    cluster_store.create_schema(conns[0])
    assert cluster_store.seed_users(conns[0], {})
    second, threads = [], []

    def waiting() -> bool:
        return bool(second) or conns[2].execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ).fetchone()[0] == 1

    def first_change(users):
        users["alice"] = {}
        # the other writer comes while this one has read the row
        threads.append(threading.Thread(target=lambda: second.append(
            cluster_store.update_users(conns[1], lambda u: u.__setitem__("bob", {})))))
        threads[0].start()
        wait_for(waiting, what="the second writer waiting (or done)")
    cluster_store.update_users(conns[0], first_change)
    threads[0].join(10)
    _, users, version = second[0]
    assert set(users) == {"alice", "bob"}
    assert cluster_store.read_users(conns[2]) == ({"alice": {}, "bob": {}}, version)
    for c in conns:
        c.close()
