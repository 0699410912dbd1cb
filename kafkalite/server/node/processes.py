"""A node's child processes: the partition workers and the ingest gateway,
and the early start that overlaps their start-up with the supervisor's.

A server is several Python processes, and each spends most of its start-up
importing (zmq, numpy, the protocol's codecs, the storage engine). Started
one after another -- the supervisor importing everything and binding its
listeners, then spawning its workers -- those imports add up.
``start_early`` is what ``kafkalite server`` runs first, having imported
only this module, zmq and the config: it takes the data directory's lock,
binds the control channel (the ROUTER the workers say hello on) and
spawns the workers -- and the ingest gateway, when it is to bind a free
port and the native port is a fixed one it can be told (a gateway on a
fixed port starts once the node is ready) -- then returns the ``EarlyStart`` the supervisor
adopts (supervisor.py). The supervisor's own imports and recovery run
meanwhile; a worker's hello waits in the control socket until the
supervisor's loop reads it, and the endpoints the worker could not be
given yet (the relay and the transaction coordinator) come with its first
assign (worker.py ``join_supervisor``). Nothing here changes when the
node is ready: that is still when every worker has opened its partitions.

Each worker holds ``<data dir>/.workers/<index>.lock`` for its life
(``lock_worker``). A worker whose supervisor died (kill -9, a crash) serves
on -- its Kafka clients keep producing and fetching -- until a new
supervisor adopts it (``take_workers``), however long that takes
(``worker_orphan_timeout_ms`` -1 by default; worker.py): the new
supervisor finds it by its lock, writes where
its control channel is (``SUPERVISOR_FILE``) and starts only the workers
that are not running. A worker it finds that does not say hello within
``ADOPT_WAIT_S`` (stopped, starved) or runs another configuration is killed
and replaced; so is one of an index the new configuration does not have
(``fence_stale_workers``): a worker stopped when its supervisor died must
not wake up beside new workers, on the same partition files. A worker
whose supervisor died before it took its lock (killed while it started or
restarted the worker) exits instead of taking the lock or waiting for it:
the next supervisor found the lock free and starts that index itself
(``lock_worker``).

A node of a cluster (``--cluster``) does not start early: whether it
runs as the controller or as a broker node is known only once it has
asked PostgreSQL.

The control channel is a CURVE server (``bind_control``) open to the
node's key pair only: the native protocol's (``native_curve_secret_key_file``)
or, without one, a pair made once for the data directory
(``node_key_pair``: ``<data dir>/.node-keys``, the owner's only, so that a
later supervisor can adopt the workers of one that died) that each worker
reads from a pipe on its stdin (``spawn_worker``) -- not from its command
line, which any local user can read. Its ZAP handler (protocol/curve.py, which loads
the protocol's codecs, some 200 ms) starts once the workers are spawned,
while they import; a handshake before it fails and the worker's socket
tries again. The supervisor adopts it with the rest (a context has one ZAP
handler).

Who may call: ``kafkalite server`` (cli/server.py) before it imports the
supervisor; the supervisor and broker nodes (``spawn_worker``, ``WorkerProcess``).
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import zmq

from kafkalite import errors
from kafkalite.launcher import pid_alive  # noqa: F401 (the node's modules take it from here)
from kafkalite.server.config import ServerConfig

log = logging.getLogger("kafkalite.processes")

LOCK_FILE = ".lock"
SERVER_FILE = "server.json"
# a worker that keeps dying is started again after these, one more each time
RESTART_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)
# How long a clean stop waits for the workers before killing them: a worker
# closes every log it hosts (a few fsyncs each, on a small thread pool), so
# the supervisor's wait grows with the busiest worker's partitions
# (supervisor.SHUTDOWN_S_PER_PARTITION).
SHUTDOWN_TIMEOUT_S = 15.0
# <data dir>/.workers/<index>.lock: held (flock) by each running worker, with
# its pid in it, for as long as it lives
WORKER_LOCKS = ".workers"
# how often a starting worker tries its lock again while another process
# holds it (the one it replaces, still exiting): lock_worker
LOCK_POLL_S = 0.02
# how long a server waits for a stale worker it killed to let go of its lock
STALE_WORKER_WAIT_S = 10.0
# <data dir>/.supervisor: the running supervisor's pid and control endpoint,
# where an orphaned worker looks for the supervisor that adopts it
SUPERVISOR_FILE = ".supervisor"
# <data dir>/.controller: in a cluster, the controller a broker node's
# workers belong to (its lease epoch and endpoints), written by the broker
# node; a worker that finds another epoch there joins that controller
CONTROLLER_FILE = ".controller"
# <data dir>/.node-keys: the node channels' CURVE key pair (Z85), when no key
# file gives one
NODE_KEYS_FILE = ".node-keys"
# Fault injection for the tests of supervisor kills (tests/server/
# test_supervisor_kills.py): "hold-before-lock:<directory>" makes a worker
# whose index has a file ``hold-<index>`` in <directory> stop just before it
# takes its lock (``lock_worker``), write ``held-<index>-<pid>`` there, and
# go on once ``go-<pid>`` appears: a test kills the supervisor, or starts
# another, while a worker it spawned has not taken its lock yet.
# "drop-acls:<directory>" (tests/security/test_acl_versions.py) makes a worker
# whose index has a file ``drop-acls-<index>`` there drop every ``acls``
# message unread, as if lost on the way, and touch ``dropped-acls-<index>``.
# Never set outside those tests.
FAULT_ENV = "KAFKALITE_WORKER_FAULT"
LOCK_HOLD_FAULT = "hold-before-lock:"
DROP_ACLS_FAULT = "drop-acls:"
# how long a new supervisor waits for a running worker of the dead one to
# say hello before it kills and replaces it. An orphan looks for a new
# supervisor every HEARTBEAT_INTERVAL_S (worker.py), so a live one answers in a
# fraction of this; one that does not is stopped or starved.
ADOPT_WAIT_S = 3.0


@dataclass
class WorkerProcess:
    index: int
    port: int
    kafka_port: int = 0
    proc: subprocess.Popen | None = None
    pid: int = 0
    restarts: int = 0
    crashes_in_a_row: int = 0
    restart_at: float = 0.0
    last_heartbeat: float = 0.0
    hung: bool = False              # alive but silent past the session timeout: fenced
    remote: bool = False            # another node's (a cluster): not this process's child
    host: str | None = None         # a remote worker's advertised host
    rack: str | None = None         # a remote worker's node
    start_covers: int = 0           # the last controller change its start assign carried
    # a running worker of a supervisor that died, which this one adopts
    # (take_workers): not its child, so watched by pid; until its hello,
    # ``adopt_by`` is when it is given up and replaced (0 once it said hello)
    adopted: bool = False
    adopt_by: float = 0.0
    pidfd: int | None = None        # an adopted worker's, polled for its exit
    adopted_hello: bool = False     # its hello is an adopted worker's first (_register)
    # {Kafka listener name: [advertised host or None, port]} (listeners.py)
    kafka_listeners: dict = field(default_factory=dict)


def lock_data_dir(data_dir: str, adopt: int = 0) -> tuple[int, dict[int, int]]:
    """The open, exclusively locked ``<data_dir>/.lock`` and {index: pid} of
    the workers of an earlier server that still run there with an index
    below ``adopt``, for the caller to adopt (``take_workers``); the other
    workers still running there are killed first (``fence_stale_workers``).
    KafkaStorageError when another server holds the lock."""
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise errors.KafkaStorageError(f"another kafkalite server is using {data_dir}") from None
    try:
        running = {i: pid for i, pid in running_workers(data_dir).items() if i < adopt}
        fence_stale_workers(data_dir, running)
    except BaseException:
        os.close(fd)
        raise
    return fd, running


def running_workers(data_dir: str) -> dict[int, int]:
    """{index: pid} of the workers of an earlier server that still hold
    their locks in ``data_dir`` (the caller holds the data directory's
    lock, so every holder is an earlier server's)."""
    found = {}
    directory = os.path.join(data_dir, WORKER_LOCKS)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return found
    for name in names:
        index = name.removesuffix(".lock")
        if not index.isdigit():
            continue
        fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _lock_holder(fd)
            if pid:
                found[int(index)] = pid
        finally:
            os.close(fd)
    return found


def fence_stale_workers(data_dir: str, keep=()) -> None:
    """Kill (SIGKILL) every worker of an earlier server that still holds its
    lock in ``data_dir`` but those of the indexes in ``keep``, and wait
    until it let go. Such a worker outlived its supervisor because it could
    not run (SIGSTOPped, or starved) when the supervisor died, or is one
    the new configuration has no place for; woken after this server's
    workers opened the same partitions, it would append to their files and
    answer its old clients with what it last knew. The data directory's
    lock (held by the caller) makes every lock holder here an earlier
    server's worker."""
    directory = os.path.join(data_dir, WORKER_LOCKS)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    kept = {f"{index}.lock" for index in keep}
    for name in names:
        if name in kept:
            continue
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = None
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                if deadline is None:
                    pid = _lock_holder(fd)
                    print(f"kafkalite: a worker of an earlier server (pid {pid}) still holds "
                          f"{path}; killing it", file=sys.stderr, flush=True)
                    if pid:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    deadline = time.monotonic() + STALE_WORKER_WAIT_S
                elif time.monotonic() > deadline:
                    raise errors.KafkaStorageError(
                        f"a worker of an earlier server still holds {path} "
                        f"(pid {_lock_holder(fd)}) after SIGKILL; stop it and start again")
                time.sleep(0.02)
        finally:
            os.close(fd)        # closing drops the lock: the worker takes it next


def _lock_holder(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (ValueError, IndexError, OSError):
        return 0


def lock_worker(data_dir: str, index: int, supervisor_pid: int | None = None) -> int | None:
    """A worker's open, exclusively locked ``.workers/<index>.lock`` in
    ``data_dir``, its pid written in it; kept until the process ends. A
    worker of the same index that has not ended yet (the one a restart
    replaces, still exiting) is waited for.

    None (the lock let go again) when the supervisor that started this
    worker, ``supervisor_pid``, is no longer its parent once it holds the
    lock or while it waits for it: that supervisor was killed during the
    start, and the next one -- which takes the data directory only after
    the dead one let go of it -- found the lock free and started a worker
    of this index itself, or will find it free and do so. This process has
    opened nothing, and is not needed. Holding on to the lock, it left the
    other worker waiting for it for ever and the node never ready, its own
    hello ignored; waiting behind the other, it waited for ever itself, an
    orphan nobody knew of (issue 68). A worker that took its lock while its
    supervisor lived is found by the next one, and adopted
    (``running_workers``)."""
    _hold_before_lock(index)
    directory = os.path.join(data_dir, WORKER_LOCKS)
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, f"{index}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except BlockingIOError:
            locked = False
        if locked:
            # the pid before the truncation, a reader never finds the file
            # empty; and before the check below: a supervisor alive then
            # was alive with the pid in place, and the next one reads it
            pid = f"{os.getpid()}\n".encode()
            os.pwrite(fd, pid, 0)
            os.ftruncate(fd, len(pid))
        # (a supervisor that died is never the parent again: an orphan's
        # parent is the process that reaps it)
        if supervisor_pid is not None and os.getppid() != supervisor_pid:
            os.close(fd)
            return None
        if locked:
            return fd
        time.sleep(LOCK_POLL_S)


def _hold_before_lock(index: int) -> None:
    """FAULT_ENV "hold-before-lock:<directory>": wait at this point while
    the test asks (see FAULT_ENV). Unset, one look at the environment."""
    fault = os.environ.get(FAULT_ENV, "")
    if not fault.startswith(LOCK_HOLD_FAULT):
        return
    directory = fault[len(LOCK_HOLD_FAULT):]
    if not os.path.exists(os.path.join(directory, f"hold-{index}")):
        return
    open(os.path.join(directory, f"held-{index}-{os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(directory, f"go-{os.getpid()}")):
        time.sleep(0.02)


def acl_push_dropped(index: int) -> bool:
    """FAULT_ENV "drop-acls:<directory>": whether worker ``index`` drops
    the ``acls`` message at hand (see FAULT_ENV). Unset: one look at the
    environment."""
    fault = os.environ.get(FAULT_ENV, "")
    if not fault.startswith(DROP_ACLS_FAULT):
        return False
    directory = fault[len(DROP_ACLS_FAULT):]
    if not os.path.exists(os.path.join(directory, f"drop-acls-{index}")):
        return False
    open(os.path.join(directory, f"dropped-acls-{index}"), "w").close()
    return True


def node_key_pair(data_dir: str) -> tuple[bytes, bytes]:
    """The node channels' CURVE key pair (public, secret: Z85) when no key
    file gives one: made the first time, kept in ``<data_dir>/.node-keys``
    (mode 0600). One pair per data directory rather than per run, so that
    the workers a dead supervisor left running can say hello to the next
    one (a local user who could read the file could read the partitions
    beside it too)."""
    path = os.path.join(data_dir, NODE_KEYS_FILE)
    try:
        with open(path, "rb") as f:
            words = f.read().split()
        if len(words) == 2 and all(len(w) == 40 for w in words):
            return words[0], words[1]
    except FileNotFoundError:
        pass
    public, secret = zmq.curve_keypair()
    os.makedirs(data_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"%s %s\n" % (public, secret))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return public, secret


def config_digest(config: ServerConfig) -> str:
    """What a worker's hello names its configuration by: a supervisor
    adopts only a worker that runs the configuration it would start."""
    raw = json.dumps(asdict(config), sort_keys=True).encode()
    return base64.b32encode(hashlib.sha256(raw).digest()[:10]).decode().lower()


def advertise_supervisor(data_dir: str, control_endpoint: str) -> None:
    """Write ``SUPERVISOR_FILE``: this process's pid and its control
    channel, for orphaned workers to find (atomically: a reader never sees
    half of it)."""
    path = os.path.join(data_dir, SUPERVISOR_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "control": control_endpoint}, f)
    os.replace(tmp, path)


def advertise_controller(data_dir: str, epoch: int, endpoints: dict) -> None:
    """Write ``CONTROLLER_FILE``: the cluster's controller this node's
    workers are to join (a broker node's, when the controller changes)."""
    path = os.path.join(data_dir, CONTROLLER_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"epoch": epoch, "control": endpoints["control"],
                   "relay": endpoints["relay"], "coordinator": endpoints["coordinator"]}, f)
    os.replace(tmp, path)


def read_controller_file(data_dir: str) -> dict | None:
    """``CONTROLLER_FILE``'s {epoch, control, relay, coordinator}, or None."""
    try:
        with open(os.path.join(data_dir, CONTROLLER_FILE)) as f:
            found = json.load(f)
        return found if isinstance(found, dict) and all(
            isinstance(found.get(k), str) for k in ("control", "relay", "coordinator")) \
            else None
    except (OSError, ValueError):
        return None


def read_supervisor(data_dir: str) -> dict | None:
    """``SUPERVISOR_FILE``'s {pid, control}, or None."""
    try:
        with open(os.path.join(data_dir, SUPERVISOR_FILE)) as f:
            found = json.load(f)
        return found if isinstance(found, dict) and isinstance(found.get("pid"), int) \
            and isinstance(found.get("control"), str) else None
    except (OSError, ValueError):
        return None


def take_workers(config: ServerConfig, running: dict[int, int]) -> list[WorkerProcess]:
    """This node's workers: those of ``running`` ({index: pid}, from
    ``running_workers``) the supervisor adopts, waiting ADOPT_WAIT_S for
    their hello, and new ones (not spawned yet: ``w.pid`` is 0) for the
    other indexes."""
    workers = []
    adopt_by = time.monotonic() + ADOPT_WAIT_S
    for i in range(config.worker_count):
        port = config.worker_base_port + i if config.worker_base_port else 0
        kafka_port = config.kafka_worker_base_port + i if config.kafka_worker_base_port else 0
        w = WorkerProcess(i, port, kafka_port)
        if i in running:
            w.pid, w.adopted, w.adopt_by = running[i], True, adopt_by
            print(f"kafkalite: worker {i} (pid {running[i]}) of the previous supervisor still "
                  f"runs; adopting it", file=sys.stderr, flush=True)
        workers.append(w)
    return workers


def spawn_worker(w: WorkerProcess, config: ServerConfig, control: str, relay: str | None,
                 coordinator: str | None, node_keys: tuple[bytes, bytes] | None = None) -> None:
    """Start ``w``'s process: broker ``w.index``, talking to the controller
    at ``control``, relaying to ``relay``, verifying transactions with the
    coordinator at ``coordinator`` (either None: named by its first assign).

    ``node_keys`` (public, secret: Z85) is the node's own CURVE key pair,
    the only one its control channel and relay take (``bind_control``):
    it goes to the worker through a pipe on its stdin, never on its command
    line, which every local user can read in /proc."""
    endpoints = [*(["--relay", relay] if relay else []),
                 *(["--coordinator", coordinator] if coordinator else [])]
    w.proc = subprocess.Popen(
        [sys.executable, "-m", "kafkalite.server.node.worker", "--index", str(w.index),
         "--control", control, "--port", str(w.port), "--kafka-port", str(w.kafka_port),
         "--supervisor-pid", str(os.getpid()), *endpoints,
         *(["--node-keys-stdin"] if node_keys else []),
         "--config-json", json.dumps(asdict(config))],
        stdin=subprocess.PIPE if node_keys else None)
    if node_keys:
        # 82 bytes: far below a pipe's buffer, so this never waits for the worker
        w.proc.stdin.write(b"%s %s\n" % node_keys)
        w.proc.stdin.close()
    w.pid = w.proc.pid


def spawn_ingest(config: ServerConfig, native_port: int, port: int,
                 node_keys: tuple[bytes, bytes] | None = None) -> subprocess.Popen:
    """Start the ingest gateway, a client of the native listener on
    ``native_port``. It prints ``ingest <port>`` on its stdout (a pipe) once
    it listens: the configured ``port``, or any free one for 0. With
    ``node_keys`` (security on without a key file: security.native_security)
    its native connection and its socket take that key pair, read from a
    pipe on its stdin, and it admits no publisher."""
    curve = []          # the gateway is a CURVE server too, and a client with our keys
    if config.native_curve_secret_key_file:
        curve = ["--curve-secret-key-file", config.native_curve_secret_key_file,
                 "--curve-authorized-keys", config.native_curve_authorized_keys]
    elif node_keys:
        curve = ["--curve-keys-stdin"]
    if curve and config.ingest_door_dir:   # publishers on this host as their Unix user
        curve += ["--local-door-dir", config.ingest_door_dir]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkalite.client.ingest", "--bootstrap",
         f"{config.public_host}:{native_port}", "--host", config.host, "--port", str(port),
         *curve],
        stdout=subprocess.PIPE, stdin=subprocess.PIPE if curve[:1] == ["--curve-keys-stdin"]
        else None)
    if proc.stdin is not None:
        proc.stdin.write(b"%s %s\n" % node_keys)
        proc.stdin.close()
    return proc


# protocol/curve.py's NODE_ZAP_DOMAIN (tests/server/test_node_channels.py
# checks they agree): written out here because importing that module (and
# the protocol's codecs with it) would delay the workers' early start
NODE_ZAP_DOMAIN = "kafkalite-nodes"


def bind_control(ctx: zmq.Context, bind_host: str, advertised_host: str,
                 node_secret: bytes | None = None) -> tuple[zmq.Socket, str]:
    """The control channel's ROUTER, bound to any free port, and the
    endpoint workers connect to. With ``node_secret`` (the secret key of the
    node's CURVE key pair) it is a CURVE server that only that key pair may
    join: a local process, or in a cluster a stranger who could reach it,
    saying "hello" there would be taken for a worker. The caller starts the
    ZAP handler that checks the key (protocol/curve.py CurveServer.start);
    until it runs, handshakes fail and the workers' sockets retry them."""
    control = ctx.socket(zmq.ROUTER)
    control.setsockopt(zmq.LINGER, 0)
    control.setsockopt(zmq.ROUTER_HANDOVER, 1)
    if node_secret is not None:
        control.setsockopt(zmq.CURVE_SERVER, 1)
        control.setsockopt(zmq.CURVE_SECRETKEY, node_secret)
        control.setsockopt_string(zmq.ZAP_DOMAIN, NODE_ZAP_DOMAIN)
        control.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    bracketed = f"[{bind_host}]" if ":" in bind_host else bind_host
    port = control.bind_to_random_port(f"tcp://{bracketed}")
    return control, f"tcp://{advertised_host}:{port}"


def stop_children(workers: list[WorkerProcess], timeout: float) -> None:
    """SIGTERM to the running ``workers`` (children of this process: each
    closes its logs in its handler), then wait up to ``timeout`` for them
    all, killing whichever is still there."""
    for w in workers:
        if w.proc is not None and w.proc.poll() is None:
            w.proc.terminate()
    deadline = time.monotonic() + timeout
    for w in workers:
        if w.proc is None:
            continue
        try:
            w.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("pid %d did not stop in time; killing it", w.proc.pid)
            w.proc.kill()
            w.proc.wait()


@dataclass
class RunningWorkers:
    """A cluster node's data directory lock and its running workers, handed
    between the broker node that ran them and the supervisor this process
    starts when the controller's lease expires (and back, if another node
    took the lease first): the workers serve on and join whichever
    controller comes through CONTROLLER_FILE, as they do when the
    controller changes under a live lease, instead of being stopped and
    started again -- which left this node's partitions unwritable until
    every worker had started and recovered its logs."""
    lock_fd: int
    workers: list[WorkerProcess]
    # the broker node's HTTP port still closing (BrokerNode.hand_over):
    # the supervisor waits for it before it binds its own (_serve_http)
    http_closing: threading.Thread | None = None

    def running(self) -> dict[int, WorkerProcess]:
        """{broker id: worker} of those still alive."""
        return {w.index: w for w in self.workers if w.proc is not None and w.proc.poll() is None}

    def stop(self, timeout: float) -> None:
        """Nobody takes them: stop the workers and let go of the lock."""
        stop_children(self.workers, timeout)
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


@dataclass
class EarlyStart:
    """What ``start_early`` set going, for the supervisor to adopt."""
    lock_fd: int
    control: zmq.Socket
    control_endpoint: str
    workers: list[WorkerProcess]
    ingest: subprocess.Popen | None
    stop_requested: bool = False     # SIGTERM/SIGINT before the supervisor took over
    curve: object = None             # the native protocol's protocol/curve.CurveServer, or None
    node_curve: object = None        # the node channels' CurveServer, its ZAP handler running

    def abandon(self) -> None:
        """The supervisor could not start: stop what was started, and let go
        of the lock, so that nothing outlives the failed start."""
        procs = [w.proc for w in self.workers if w.proc is not None]
        procs += [self.ingest] if self.ingest is not None else []
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.ingest is not None and self.ingest.stdout is not None:
            self.ingest.stdout.close()
        self.control.close()
        if self.node_curve is not None:
            self.node_curve.stop()
        os.close(self.lock_fd)


def start_early(config: ServerConfig) -> EarlyStart | None:
    """Lock the data directory, bind the control channel and spawn this
    node's workers (and an ingest gateway on a free port when the native
    port is fixed);
    None for a node of a cluster, which starts in the old order."""
    if config.cluster:
        return None
    lock_fd, running = lock_data_dir(config.data_dir, adopt=config.worker_count)
    curve = None
    if config.native_curve_secret_key_file:
        from kafkalite.server.auth.security import native_curve
        curve = native_curve(config)
    # the node's channels take the native key pair, else the data directory's
    node_keys = (curve.public, curve.secret) if curve is not None \
        else node_key_pair(config.data_dir)
    ctx = zmq.Context.instance()
    control, endpoint = bind_control(ctx, "127.0.0.1", "127.0.0.1", node_keys[1])
    advertise_supervisor(config.data_dir, endpoint)
    early = EarlyStart(lock_fd, control, endpoint, take_workers(config, running), None,
                       curve=curve)

    def stop(signum, frame):
        early.stop_requested = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for w in early.workers:
        if not w.adopted:
            spawn_worker(w, config, endpoint, None, None, node_keys if curve is None else None)
    if config.ingest_port == 0 and config.port and not running:
        # a gateway on a free port starts now: the node is ready once it said
        # which; one on a fixed port starts once the node is ready
        # (supervisor.py), and so does any when a dead supervisor's workers
        # are adopted (supervisor_start.py: their clients wait on this
        # process's start, which a gateway's imports would slow)
        from kafkalite.server.auth.security import security_enabled
        early.ingest = spawn_ingest(config, config.port, config.ingest_port,
                                    node_keys if curve is None and security_enabled(config)
                                    else None)
    # the ZAP handler (and the protocol's codecs it imports) only now, while
    # the workers import: their first handshake waits for it
    from kafkalite.server.auth.security import node_curve
    early.node_curve = node_curve(config, curve, node_keys)
    early.node_curve.start(ctx)
    return early
