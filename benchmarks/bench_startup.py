"""How long a server takes to start, and how much memory it then takes:
`kafkalite server` with its defaults (the README's command), the
``kafkalite.testing`` fixture's settings and the test harness's, beside
the interpreter's own start in the same run.

    python benchmarks/bench_startup.py                       # 5 rounds, about a minute
    python benchmarks/bench_startup.py --rounds 9 --json out.json
    python benchmarks/bench_startup.py --before /work/main   # the same, also for another tree

Per start, from the exec of ``python -m kafkalite server`` (the clock
starts just before the fork):

- ready: until the server prints its ready line;
- produce+fetch: until a record produced after the ready line (kafkalite's
  Producer, acks=1, to a topic auto-created by that produce) came back to a
  Consumer assigned to its partition: what a test that starts a broker pays
  before its first assertion;
- CPU: user + system time of every process of the server when it printed
  its ready line (/proc/<pid>/stat, the process tree): the work start-up
  costs, whatever the machine's load;
- RSS and PSS: summed over the process tree after that produce+fetch
  (VmRSS in /proc/<pid>/status; Pss in /proc/<pid>/smaps_rollup, which
  shares the pages the processes share, such as numpy's libraries).

Ceilings measured in the same rounds: a bare interpreter (``python -c
pass``) and one importing zmq, exec to exit.

Bytecode: an installed package has its modules compiled (``.pyc``), so by
default every process runs with a bytecode cache of its own
(``PYTHONPYCACHEPREFIX`` in a temporary directory, filled by an untimed
import of every tree first; no tree is written to) and without
``PYTHONDONTWRITEBYTECODE``, which some environments set: with it, each of
the server's processes compiles kafkalite's modules from source at every
start. ``--environment-as-is`` measures with the environment unchanged. `kafkalite server` with its
defaults listens on the fixed ports 7091-7093, 7100+, 9404: nothing else
may hold them meanwhile (the other settings use free ports). With
``--before DIR`` every setting runs also with the kafkalite of DIR (its
PYTHONPATH), turn by turn with this tree's and the ceilings (the one
going first rotated each round), so that load from elsewhere on the
machine falls on all. Figures are medians (min and max beside).
Timing never fails anything: this prints figures (and ``--json``).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import common
import kafkalite
from kafkalite.client import Consumer, Producer, TopicPartition
from kafkalite.testing import DEFAULT_SERVER_ARGS

HERE = os.path.dirname(os.path.dirname(os.path.abspath(kafkalite.__file__)))
FREE_PORTS = ["--port", "0", "--ingest-port", "0", "--worker-base-port", "0", "--kafka-port", "0",
              "--kafka-worker-base-port", "0", "--metrics-port", "0"]
DEFAULT_PORTS = (7091, 7092, 7093, 9404)
READY_TIMEOUT_S = 60.0


def _server_config(root: str) -> dict:
    """kafkalite.testing's SERVER_CONFIG as ``root``'s tree has it (an older
    tree may not know a setting this one's names)."""
    out = subprocess.run([sys.executable, "-c", "import json; from kafkalite.testing import "
                          "SERVER_CONFIG; print(json.dumps(SERVER_CONFIG))"],
                         env=_env(root), check=True, capture_output=True, cwd=root)
    return json.loads(out.stdout)


def _settings(directory: str, root: str) -> dict[str, list[str]]:
    """name -> `kafkalite server` arguments (run with ``directory`` as cwd)."""
    config = os.path.join(directory, "server.toml")
    with open(config, "w") as f:
        f.writelines(f"{key} = {value}\n" for key, value in _server_config(root).items())
    return {
        "kafkalite server (README: defaults)": [],
        "kafkalite.testing (1 worker, no ingest)": ["--config", config, *FREE_PORTS,
                                                    *DEFAULT_SERVER_ARGS],
        "test harness (2 workers, ingest)": [*FREE_PORTS, "--workers", "2"],
    }


# set by main(): where the processes keep their bytecode (None: as the environment says)
PYCACHE: str | None = None
WARM_UP = ("import kafkalite.cli, kafkalite.server.node.roles, kafkalite.server.node.worker, "
           "kafkalite.client.ingest, kafkalite.webconsole, zmq")


def _env(root: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, os.path.join(root, "spark")])
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    return env


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _cpu_s(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])     # utime, stime
        except OSError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def _memory_mb(pids: list[int]) -> tuple[float, float | None]:
    """(RSS, PSS) summed over ``pids``, MB; PSS None without smaps_rollup."""
    rss, pss = 0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                rss += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue                    # exited meanwhile
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                if pss is not None:
                    pss += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pss = None
    return rss / 1024, (pss / 1024 if pss is not None else None)


def _produce_and_fetch(bootstrap: str) -> None:
    topic = "bench-startup"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    producer.produce(topic, b"first", partition=0)
    left = producer.flush(30)
    producer.close()
    if left:
        raise RuntimeError("the first record was not acknowledged in 30 s")
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() == b"first":
                return
        raise RuntimeError("the first record was not fetched in 30 s")
    finally:
        consumer.close()


def start_once(root: str, args: list[str], cwd: str) -> dict:
    """One start of `kafkalite server args` from ``root``'s tree, in ``cwd``."""
    started = time.perf_counter()
    errors = open(os.path.join(cwd, "stderr.txt"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "server", *args], cwd=cwd,
                            env=_env(root), stdout=subprocess.PIPE, stderr=errors)
    errors.close()
    timer = threading.Timer(READY_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            if line.startswith(b"kafkalite server ready"):
                break
        else:
            with open(os.path.join(cwd, "stderr.txt"), "rb") as f:
                said = f.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"{root}: the server exited before it was ready: "
                               f"{said[0] if said else 'nothing on stderr'}")
        ready = time.perf_counter() - started
        cpu = _cpu_s(_tree(proc.pid))
        bootstrap = line.split(b"bootstrap.servers=", 1)[1].split()[0].decode()
        _produce_and_fetch(bootstrap)
        first_io = time.perf_counter() - started
        rss, pss = _memory_mb(_tree(proc.pid))
        return {"ready_s": ready, "produce_fetch_s": first_io, "cpu_s": cpu, "rss_mb": rss,
                "pss_mb": pss, "processes": len(_tree(proc.pid))}
    finally:
        timer.cancel()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def exec_s(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=_env(HERE), check=True)
    return time.perf_counter() - started


def _ports_free() -> bool:
    for port in DEFAULT_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _summary(values: list) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = common.parser(__doc__)
    common.add_rounds(parser, 5)
    parser.add_argument("--before", metavar="DIR",
                        help="also run the kafkalite of this tree (e.g. /work/main), turn by turn")
    parser.add_argument("--environment-as-is", action="store_true",
                        help="no bytecode cache of the benchmark's own (see above)")
    common.add_json(parser, help="write the figures here")
    args = common.parse(parser)
    global PYCACHE
    if not args.environment_as_is:
        PYCACHE = tempfile.mkdtemp(prefix="kafkalite-bench-pycache-")
    trees = {"this tree": HERE, **({"before": os.path.abspath(args.before)} if args.before else {})}
    ceilings = {"python -c pass": "pass", 'python -c "import zmq"': "import zmq"}
    runs: dict = {}
    exec_times: dict = {name: [] for name in ceilings}
    skipped = set()
    if PYCACHE is not None:
        for root in trees.values():
            subprocess.run([sys.executable, "-c", WARM_UP], env=_env(root), check=True)
    def round_of(side: str) -> None:
        if side in ceilings:
            exec_times[side].append(exec_s(ceilings[side]))
            return
        directory = tempfile.mkdtemp(prefix="kafkalite-bench-startup-")
        try:
            for setting, server_args in _settings(directory, trees[side]).items():
                if not server_args and not _ports_free():
                    skipped.add(setting)
                    continue
                cwd = tempfile.mkdtemp(dir=directory)
                runs.setdefault((setting, side), []).append(
                    start_once(trees[side], server_args, cwd))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    rounds = common.alternating([*ceilings, *trees], args.rounds, round_of)
    if PYCACHE is not None:
        shutil.rmtree(PYCACHE, ignore_errors=True)
    out = {"rounds": args.rounds, "cores": os.cpu_count(), "loadavg_end": os.getloadavg(),
           "bytecode_cache": PYCACHE is not None, "round_orders_and_load": rounds.as_dict(),
           "trees": trees, "exec_s": {k: _summary(v) for k, v in exec_times.items()},
           "starts": [{"setting": s, "tree": t, **{k: _summary([r[k] for r in rs])
                                                  for k in rs[0]}}
                      for (s, t), rs in runs.items()]}
    print(f"{args.rounds} rounds, {os.cpu_count()} cores, load average at the end "
          f"{' '.join(f'{x:.1f}' for x in out['loadavg_end'])}, "
          + ("bytecode cached" if PYCACHE is not None else "environment as is"))
    print("ceilings, exec to exit (median):")
    for name, s in out["exec_s"].items():
        print(f"  {name:38s} {s['median']:.3f} s  (min {s['min']:.3f}, max {s['max']:.3f})")
    for setting in sorted(skipped):
        print(f"  {setting}: skipped, a default port (7091-7093, 9404) is taken")
    print(f"{'setting':40s} {'tree':9s} {'ready':>14s} {'produce+fetch':>14s} {'CPU':>7s} "
          f"{'RSS':>7s} {'PSS':>7s}")
    for row in out["starts"]:
        pss = f"{row['pss_mb']['median']:5.0f}MB" if row["pss_mb"] else "    n/a"
        print(f"{row['setting']:40s} {row['tree']:9s} "
              f"{row['ready_s']['median']:5.2f}s ({row['ready_s']['min']:4.2f}) "
              f"{row['produce_fetch_s']['median']:5.2f}s ({row['produce_fetch_s']['min']:4.2f}) "
              f"{row['cpu_s']['median']:5.2f}s {row['rss_mb']['median']:5.0f}MB {pss}"
              f"  [{row['processes']['median']:.0f} processes]")
    print("(ready and produce+fetch: median (min), from exec; CPU: the server's processes' "
          "user + system time at ready; RSS/PSS: summed over them after the first fetch)")
    if args.json:
        common.write_json(args.json, out)


if __name__ == "__main__":
    main()
