"""Test harness: a real kafkalite server in its own processes.

The launching itself is kafkalite.launcher's ServerProcess; tests add
a client config helper and a stop() that fails when a worker outlived the
server.
"""
import io
import os
import random
import socket
import subprocess
import sys
import threading
import time

from kafkalite import launcher
from kafkalite.launcher import package_env as child_env  # noqa: F401 (used by tests)
from kafkalite.launcher import pid_alive  # noqa: F401 (used by tests)


# The JVM options of the tests' Spark drivers (tests/spark's session, the
# docs walk's Spark blocks): the client compiler only and the serial
# collector. A test's JVM runs for seconds to minutes on small data, where
# C2's compiles and G1's threads cost more than they pay back: a
# SparkSession's start and first job took 10 s of the JVM's CPU, not 17, and
# 27-30 s of wall time, not 60-70, at a load of 9-15 on 2 cores.
SPARK_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

class ServerProcess(launcher.ServerProcess):
    def config(self, **extra) -> dict:
        """A kafkalite client's settings; on a server with security on and no
        key file, the owner's key pair (client/config.py owner_config)."""
        from kafkalite.client.config import owner_config
        return {"bootstrap.servers": self.bootstrap, **owner_config(self.info), **extra}

    def stop(self, timeout: float = 30.0) -> int | None:
        code = super().stop(timeout)
        assert not self.survivors, f"workers {self.survivors} outlived the server"
        return code


_PORTS_GIVEN: set[int] = set()
# Ports below Linux's ephemeral range (32768-60999 by default), so that no
# outgoing connection's local port or bind(0) takes one between our check
# and the child's bind; each pytest-xdist worker draws from its own slice,
# so two workers of a run never hand out the same port.
# Which slices a run takes turns with another run on the same machine (two
# developers' runs, a run beside a benchmark): KAFKALITE_TEST_PORT_OFFSET,
# drawn once per run by its controlling process (conftest.py) and inherited
# by its xdist workers and children. Without it every run's gw0 drew from
# the same slice, and a port one run's server had just let go (a node
# killed, to be restarted on the same ports) could be handed to another
# run's server: the restart then found it taken (the restart matrix, now
# and then, when runs overlapped).
_PORT_BASE, _PORT_SLICE, _PORT_SLICES = 20000, 1500, 8


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    n += int(os.environ.get("KAFKALITE_TEST_PORT_OFFSET", "0"))
    start = _PORT_BASE + (n % _PORT_SLICES) * _PORT_SLICE
    return range(start, start + _PORT_SLICE)


def free_port() -> int:
    """A loopback port nothing listens on, never one this process was given
    before (two workers of one test once got the same REST port and one of
    them never started), from this xdist worker's own slice of ports."""
    ports = _port_slice()
    first = random.randrange(len(ports))
    for i in range(len(ports)):
        port = ports[(first + i) % len(ports)]
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError("no loopback port this process has not used already")


def wait_until(predicate, timeout: float = 10.0, message="the condition", interval: float = 0.05):
    """Poll ``predicate`` until it returns a true value, and return that value;
    after ``timeout`` seconds fail the test with ``message`` (a string or a
    callable giving one) and the predicate's last value. What tests use
    instead of a sleep standing in for a condition."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; "
                                 f"last: {value!r}")
        time.sleep(interval)


def run_cli(*args, stdin: bytes = b"", env: dict | None = None) -> subprocess.CompletedProcess:
    """``kafkalite ARGS`` run in this process through ``kafkalite.cli.main``,
    with ``stdin`` as its standard input and its output captured: a
    CompletedProcess as ``subprocess.run(capture_output=True)`` gives, without
    an interpreter's start-up and imports per call. ``env`` entries are set
    for the call only. Tests of the entry point itself, signals and exit
    codes of a real process use ``python -m kafkalite`` instead."""
    from kafkalite import cli
    argv = [str(a) for a in args]
    out, err = io.BytesIO(), io.BytesIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    os.environ.update(env or {})
    try:
        try:
            code = cli.main(argv)
        except SystemExit as exc:        # argparse's usage errors and --help
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
                code = 1
            else:
                code = exc.code or 0
        sys.stdout.flush()
        sys.stderr.flush()
        return subprocess.CompletedProcess(["kafkalite", *argv], code or 0,
                                           out.getvalue(), err.getvalue())
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _ours(name: str) -> bool:
    """Whether a /dev/shm entry may come from this test process: its name
    carries the pid that made it (kafkalite-ring-<pid>-..., and the tests'
    own names), and a live process outside this process's descendants is
    another test process's (pytest-xdist runs several at once). An entry
    of a dead process counts as ours: a leak is what the tests look for."""
    field = name[len("kafkalite-ring-"):].split("-")
    pid = next((int(f) for f in field[:2] if f.isdigit()), None)
    if pid is None or pid == os.getpid() or not pid_alive(pid):
        return True
    return os.getpid() in _ancestors(pid)


def shm_entries() -> set:
    """The kafkalite entries of /dev/shm this test process or its children
    made (see _ours)."""
    try:
        names = [n for n in os.listdir("/dev/shm") if n.startswith("kafkalite")]
    except FileNotFoundError:
        return set()
    return {n for n in names if _ours(n)}


def processes_with(marker: str) -> list[str]:
    """Command lines of the live processes whose command line contains ``marker``
    (to check that a test left no server, worker or client process behind)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except OSError:
                continue
            if marker in cmd:
                out.append(cmd)
    return out


def create(server, name, partitions=1, **configs):
    """Create topic ``name`` on ``server`` (a ServerProcess), with topic configs."""
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(name, partitions, config=configs)]).values():
            f.result()
    finally:
        admin.close()


def read_all(server, topic, partitions, expect, timeout=20.0, **config):
    """Consume every partition from the beginning until ``expect`` records
    arrived. A topic that does not exist yet (one a producer elsewhere creates
    on its first record) counts as empty until it appears."""
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    from kafkalite.errors import UnknownTopicOrPartitionError
    c = Consumer(server.config(**config))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            try:
                out += c.consume(10_000, 0.5)
            except UnknownTopicOrPartitionError:
                time.sleep(0.1)
        return out
    finally:
        c.close()


def local_segments(directory: str) -> list[tuple[int, int]]:
    """(base offset, bytes) of each segment's .log in a partition directory,
    in offset order (the active one last; one that retention deletes
    meanwhile is left out)."""
    found = []
    for name in os.listdir(directory):
        if name.endswith(".log") and name[:-4].isdigit():
            try:
                found.append((int(name[:-4]), os.path.getsize(os.path.join(directory, name))))
            except FileNotFoundError:
                pass
    return sorted(found)

def kafka_read_from_zero(config: dict, topic: str, count: int,
                         timeout: float = 60.0) -> list[tuple[int, bytes]]:
    """[(offset, value)] of partition 0 of ``topic`` from offset 0, read with
    confluent-kafka (``config``: its bootstrap) checking CRCs, until
    ``count`` records or ``timeout``."""
    import confluent_kafka as ck
    consumer = ck.Consumer({**config, "group.id": topic, "enable.auto.commit": False,
                            "check.crcs": True})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
        return got
    finally:
        consumer.close()

def kafka_send_numbered(producer, topic: str, start: int, count: int) -> list[bytes]:
    """Values ``start``..``start + count - 1`` (numbered, with random bytes
    after) produced to partition 0 of ``topic`` with the confluent-kafka
    ``producer`` and flushed, every one delivered; the values."""
    values, failed = [], []
    for i in range(start, start + count):
        value = b"%06d:" % i + os.urandom(40)
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, msg: err and failed.append(err))
        values.append(value)
    assert producer.flush(60) == 0 and failed == []
    return values

def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of ``pid`` in MiB (VmRSS of /proc/<pid>/status; VmHWM
    for its peak since start or reset_peak_rss)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no {field} for pid {pid}")


def reset_peak_rss(pid: int) -> None:
    """Start VmHWM of ``pid`` again from its current RSS (proc(5) clear_refs)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def child_pids(pid: int, marker: str = "") -> list[int]:
    """Children of ``pid`` whose command line contains ``marker``."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(kid)
            except OSError:
                pass
    return out


def wait_answers(link, want, timeout=10.0):
    """Poll on what a client link (kafkalite/client/link.py) registered, as
    the producer's sender and the consumer drive it, until ``want`` answers
    came, ``timeout`` passed or the link died; the answers."""
    import zmq
    poller = zmq.Poller()
    link.register(poller)
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline and link.alive():
            if link.arm():
                poller.poll(100)
            got += link.receive()
    finally:
        link.unregister(poller)
    return got


def scrape(server, user: str | None = None, password: str | None = None,
           timeout: float = 10.0, cafile: str | None = None) -> str:
    """The server's /metrics text; with ``user``, logged in as that SASL user
    (a server with security on asks for it: server/auth/http_login.py); with
    ``cafile``, trusting that CA (a server with ``http_tls``)."""
    import base64
    import ssl
    import urllib.request
    request = urllib.request.Request(server.info["metrics"])
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
        return resp.read().decode()


def socket_inodes(pid: int) -> set[str]:
    """The inodes of process ``pid``'s sockets (its /proc/<pid>/fd links),
    to match against /proc/net/tcp{,6}."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets' inodes in
    /proc/<pid>/fd, matched in /proc/net/tcp{,6})."""
    inodes = socket_inodes(pid)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:      # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def secured_server(root, passwords: dict, extra_args=(), super_users: str = "User:admin",
                   mechanism: str = "SCRAM-SHA-256",
                   allow_everyone: bool = False) -> ServerProcess:
    """A started server with security on as the security tests meet it:
    SASL_PLAINTEXT Kafka listeners, the authorizer with ``super_users`` (and
    ``allow_everyone_if_no_acl_found`` as ``allow_everyone``), and the users
    of ``passwords`` ({name: password}) added with the CLI (in process)
    under ``mechanism``; its data directory is ``root``/data."""
    data = root / "data"
    data.mkdir(exist_ok=True)
    for user, password in passwords.items():
        r = run_cli("users", "add", user, "--mechanism", mechanism, "--data-dir", str(data),
                    stdin=password.encode() + b"\n")
        assert r.returncode == 0, r.stderr.decode()
    config = root / "server.toml"
    config.write_text(f'authorizer_enabled = true\nsuper_users = "{super_users}"\n'
                      f'allow_everyone_if_no_acl_found = {str(allow_everyone).lower()}\n')
    return ServerProcess(str(data), extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT",
        *extra_args]).start()


def sasl_config(server, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict:
    """A Kafka client's settings for ``secured_server``'s listener as ``user``."""
    return {"bootstrap.servers": server.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}


def stop_server(server) -> None:
    """A fixture's end: stopped if it still runs; if a test killed it, the
    workers it left for the next server to adopt are killed (ServerProcess.stop)."""
    if server.proc is not None:
        server.stop()
    server.kill()


def keep_for_diagnosis(path, name: str) -> str:
    """A copy of ``path`` (a failed test's data directories and logs) under
    ``$KAFKALITE_KEEP_DIR`` (default /tmp/kafkalite-kept), where pytest's
    rotation of its temporary directories does not reach: a soak's failure
    found after hours of other test runs must still be there to read."""
    import shutil
    root = os.environ.get("KAFKALITE_KEEP_DIR", "/tmp/kafkalite-kept")
    target = os.path.join(root, f"{name}-{int(time.time())}")
    import stat

    def not_files(folder, names):        # the server's Unix sockets, fifos
        return [n for n in names if not (stat.S_ISREG(m := os.lstat(os.path.join(folder, n))
                                                      .st_mode) or stat.S_ISDIR(m))]
    shutil.copytree(path, target, symlinks=True, ignore=not_files, dirs_exist_ok=True)
    return target


class TcpRelay:
    """A TCP relay on ``host`` (127.0.0.1) to ``upstream`` (host, port), for tests that
    put a slow or failing network between a server and what it calls (S3,
    PostgreSQL): each accepted connection gets one of its own to
    ``upstream`` and a thread a direction. Subclasses decide what passes:
    ``before_connect(n)`` runs in connection ``n``'s thread (0 for the
    first) before it is joined upstream, and ``forward(source, data,
    requests)`` before each chunk goes on (``requests``: client to
    upstream); False ends the connection."""

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1"):
        self.upstream = upstream
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def before_connect(self, n: int) -> None:
        pass

    def forward(self, source: socket.socket, data: bytes, requests: bool) -> bool:
        return True

    def _accept(self) -> None:
        n = 0
        while not self.closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(client, n), daemon=True).start()
            n += 1

    def _join(self, client: socket.socket, n: int) -> None:
        self.before_connect(n)
        if self.closed.is_set():
            client.close()
            return
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
        self._pump(server, client, False)

    def _pump(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if not self.forward(source, data, requests):
                    return
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed.set()
        self._listener.close()
