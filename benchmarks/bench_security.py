"""What TLS and SASL cost on the Kafka listener (confluent-kafka over PLAINTEXT, SSL and SASL_SSL),
and CURVE on the native protocol (kafkalite's client, plain against CURVE).

    python benchmarks/bench_security.py                 # 200,000 records of 1 KiB per run
    python benchmarks/bench_security.py --quick         # what the smoke test runs

Three servers of the same build, one after the other in the same run: the
Kafka listeners on PLAINTEXT (fetch answers sendfile segment bytes), SSL
(TLS 1.3 through Python's ssl module; fetched file regions are read in
256 KiB chunks and encrypted) and SASL_SSL with SCRAM-SHA-256 (SSL plus a
login per connection). Figures, each the best of --runs on a fresh topic
(one partition, acks=1, one client process, certificates from
kafkalite.tools.dev_certs):

1. confluent-kafka Producer.produce() records/s
2. confluent-kafka Consumer.consume() records/s (reading what 1 wrote)

3. kafkalite Producer.produce_batch() records/s over the native protocol
   (ZeroMQ, not the shared-memory ring), plain and CURVE
4. kafkalite Consumer.consume_batch() records/s, plain and CURVE
5. kafkalite Producer.produce_batch() records/s over a shared-memory ring
   (``kafkalite.transport`` shm), on the plain server and on a server with
   security on and no key file (a SASL_PLAINTEXT listener: the ring is
   attached over the native port's CURVE with the owner's key pair, issue
   40; the records then travel the ring as before); issue 40's target is
   within 10% of the plain server's figure
6. kafkalite Producer.produce_batch() records/s over the native protocol
   (ZeroMQ) through the secured server's local door: a client without
   keys on this host, authenticated by its Unix user id (``User:unix:``
   and the bench's user name, allowed Write and Describe on every topic by
   an ACL, so the authorizer's check is the one a user meets), against
   figure 3's plain server; and figure 5's secured ring is attached
   through that door too. Issue 40's target: within 10% of plain

For 3 and 4 a plain server and a CURVE server (``native_curve_*``, keys from
``kafkalite curve keygen``) run side by side and the rounds alternate
between them (--native-runs, median kept), so load on a shared machine
falls on both alike.

The SSL and SASL_SSL rows are compared with PLAINTEXT; issue 18's target is
TLS at 0.7x of plaintext or better (CURVE has no target: its ratio is
reported). Timing never fails anything: this prints
figures and writes results.json / results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import os
import statistics
import shutil
import subprocess
import sys
import time
import traceback

import common
import report
from bench_kafka_clients import create_topic
from report import Results, say

from kafkalite import launcher
from kafkalite.tools.dev_certs import make_certs

VALUE_BYTES = 1024
USER, PASSWORD = "bench", "bench-password"
TARGET = 0.7
RING_TARGET = 0.9          # issue 40: a ring with security on within 10% of the plain one
HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def client_conf(server, protocol: str, certs: dict, **extra) -> dict:
    conf = {"bootstrap.servers": server.kafka_bootstrap, "security.protocol": protocol, **extra}
    if protocol.endswith("SSL"):
        conf["ssl.ca.location"] = certs["ca"]
    if protocol.startswith("SASL"):
        conf.update({"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": USER,
                     "sasl.password": PASSWORD})
    return conf


def start_server(work: str, protocol: str, certs: dict, workers: int) -> launcher.ServerProcess:
    data = os.path.join(work, protocol.lower(), "data")
    args = ["--kafka-security-protocol", protocol]
    if protocol.endswith("SSL"):
        args += ["--ssl-certfile", certs["server"], "--ssl-keyfile", certs["server_key"]]
    if protocol.startswith("SASL"):
        subprocess.run([sys.executable, "-m", "kafkalite", "users", "add", USER,
                        "--mechanism", "SCRAM-SHA-256", "--password", PASSWORD,
                        "--data-dir", data], check=True, capture_output=True,
                       env=launcher.package_env())
    return launcher.ServerProcess(data, workers=workers, extra_args=args).start()


def produce(server, protocol, certs, topic: str, n: int) -> float:
    import confluent_kafka as ck
    p = ck.Producer(client_conf(server, protocol, certs, **{
        "acks": 1, "linger.ms": 5, "batch.num.messages": 10000, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}))
    value = b"v" * VALUE_BYTES
    assert p.list_topics(topic, timeout=20).topics[topic].error is None    # connected, logged in

    def loop():
        send = p.produce
        for _ in range(n):
            try:
                send(topic, value, partition=0)
            except BufferError:
                report.produce_when_room(p, lambda: send(topic, value, partition=0))
        assert p.flush(120) == 0
    return n / report.timed(loop)


def consume(server, protocol, certs, topic: str, n: int) -> float:
    import confluent_kafka as ck
    c = ck.Consumer(client_conf(server, protocol, certs, **{
        "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 10485760}))
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    try:
        def loop():
            seen, deadline = 0, time.monotonic() + 300
            while seen < n and time.monotonic() < deadline:
                seen += len(c.consume(10_000, 1.0))
            assert seen >= n, f"consumed {seen} of {n}"
        return n / report.timed(loop)
    finally:
        c.close()


def start_native_server(work: str, curve: bool, workers: int,
                        secured: bool = False) -> launcher.ServerProcess:
    """A server for figures 3-5: plain; with a CURVE key file (``curve``); or
    with security on and no key file (``secured``: a SASL listener)."""
    name = "native-curve" if curve else "native-secured" if secured else "native-plain"
    data = os.path.join(work, name, "data")
    args = []
    if secured:     # the authorizer on: the native ports' local doors open
        config = os.path.join(work, "secured.toml")
        with open(config, "w") as f:
            f.write("authorizer_enabled = true\n")
        args = ["--kafka-security-protocol", "SASL_PLAINTEXT", "--config", config]
    if curve:
        keys = os.path.join(work, "curve-keys")
        if not os.path.exists(keys):
            for who, where in (("server", keys), ("bench", os.path.join(keys, "clients"))):
                subprocess.run([sys.executable, "-m", "kafkalite", "curve", "keygen", who,
                                "--dir", where], check=True, capture_output=True,
                               env=launcher.package_env())
        args = ["--native-curve-secret-key-file", os.path.join(keys, "server.key_secret"),
                "--native-curve-authorized-keys", os.path.join(keys, "clients")]
    server = launcher.ServerProcess(data, workers=workers, extra_args=args).start()
    server.curve = curve
    if secured:
        allow_local_user(server)
    return server


def allow_local_user(server) -> None:
    """Write and Describe on every topic for this process's Unix user, made
    with the owner's key pair over the native port."""
    import pwd
    from kafkalite.client.config import owner_config
    from kafkalite.client.connection import Connection, client_context
    from kafkalite.protocol import ApiKey
    from kafkalite.protocol.enums import (AclOperation, AclPermissionType, PatternType,
                                          ResourceType)
    principal = "User:unix:" + pwd.getpwuid(os.getuid()).pw_name
    ctx = client_context(owner_config(server.info))
    conn = Connection(server.info["native"], "bench-acls", ctx)
    try:
        resp = conn.request(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": ResourceType.TOPIC, "resource_name": "*",
             "resource_pattern_type": PatternType.LITERAL, "principal": principal, "host": "*",
             "operation": op, "permission_type": AclPermissionType.ALLOW}
            for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]}, 30, version=3)
        assert all(r["error_code"] == 0 for r in resp["results"]), resp
    finally:
        conn.close()
        ctx.term()


def native_conf(server, work: str, door: bool = False, **extra) -> dict:
    from kafkalite.client.config import owner_config
    if door:    # no keys: the local door, as this Unix user
        return {"bootstrap.servers": server.bootstrap, **extra}
    # security on without CURVE keys of the bench's own: the owner's key pair
    conf = {"bootstrap.servers": server.bootstrap, **owner_config(server.info), **extra}
    if server.curve:
        keys = os.path.join(work, "curve-keys")
        conf.update({"curve.server.key": os.path.join(keys, "server.key"),
                     "curve.public.key": os.path.join(keys, "clients", "bench.key"),
                     "curve.secret.key": os.path.join(keys, "clients", "bench.key_secret")})
    return conf


def native_create_topic(server, work: str, topic: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient(native_conf(server, work))
    try:
        admin.create_topics([NewTopic(topic, 1)])[topic].result()
    finally:
        admin.close()


def native_produce(server, work: str, topic: str, n: int, transport: str = "zmq",
                   door: bool = False) -> float:
    """produce_batch records/s over ZeroMQ, or over a shared-memory ring
    (``transport`` "shm": the native port only attaches it); ``door``:
    without keys, through the native ports' local doors."""
    from kafkalite.client import Producer
    p = Producer(native_conf(server, work, door, **{
        "acks": 1, "linger.ms": 5, "kafkalite.transport": transport,
        "queue.buffering.max.messages": 1_000_000}))
    chunk = [b"v" * VALUE_BYTES] * 10_000
    try:
        p.produce_batch(topic, chunk[:1], partition=0)      # connected before the clock
        assert p.flush(30) == 0

        def loop():
            for i in range(0, n, len(chunk)):
                p.produce_batch(topic, chunk[:min(len(chunk), n - i)], partition=0)
            assert p.flush(120) == 0
        return n / report.timed(loop)
    finally:
        p.close()


def native_consume(server, work: str, topic: str, n: int) -> float:
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer(native_conf(server, work, **{"group.id": "bench", "enable.auto.commit": False}))
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        def loop():
            seen, deadline = 0, time.monotonic() + 300
            while seen < n + 1 and time.monotonic() < deadline:
                seen += c.consume_batch(1.0).num_rows
            assert seen >= n + 1, f"consumed {seen} of {n + 1}"
        return (n + 1) / report.timed(loop)
    finally:
        c.close()


def native_figures(work: str, records: int, runs: int, workers: int) -> dict:
    """{"plain"|"curve": ([produce rec/s per round], [consume rec/s per round]),
    "ring-plain"|"ring-secured": ([ring produce rec/s per round], [])}, rounds
    alternating between the servers."""
    servers = {"plain": start_native_server(work, False, workers),
               "curve": start_native_server(work, True, workers),
               "secured": start_native_server(work, False, workers, secured=True)}
    out = {name: ([], []) for name in ("plain", "curve", "ring-plain", "ring-secured", "door")}
    try:
        for r in range(runs):
            for name, server in servers.items():
                if name != "secured":
                    topic = f"native-{r}"
                    native_create_topic(server, work, topic)
                    out[name][0].append(native_produce(server, work, topic, records))
                    out[name][1].append(native_consume(server, work, topic, records))
                    say(f"  native {name:<5} round {r + 1}: produce {out[name][0][-1]:,.0f} "
                        f"rec/s, consume {out[name][1][-1]:,.0f} rec/s")
                if name == "secured":
                    topic = f"door-{r}"
                    native_create_topic(server, work, topic)
                    out["door"][0].append(native_produce(server, work, topic, records,
                                                         door=True))
                    say(f"  native local door round {r + 1}: produce "
                        f"{out['door'][0][-1]:,.0f} rec/s")
                if name != "curve":
                    topic = f"ring-{r}"
                    native_create_topic(server, work, topic)
                    out[f"ring-{name}"][0].append(native_produce(
                        server, work, topic, records, "shm", door=name == "secured"))
                    say(f"  ring   {name:<7} round {r + 1}: produce "
                        f"{out[f'ring-{name}'][0][-1]:,.0f} rec/s")
    except Exception:
        for server in servers.values():
            print(server.output()[-3000:], file=sys.stderr)
        raise
    finally:
        for server in servers.values():
            server.stop()
    return out


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=200_000, help="records per run")
    common.add_rounds(p, 2, flag="--runs", help="runs per figure (best is kept)")
    p.add_argument("--native-runs", type=int, default=3,
                   help="alternating rounds of native plain/CURVE (median kept)")
    p.add_argument("--native-only", action="store_true",
                   help="only the native figures: plain/CURVE and the rings (3 to 5)")
    p.add_argument("--workers", type=int, default=1)
    common.add_dirs(p)
    common.add_quick(p, "5,000 records, 1 run")
    args = common.parse(p, argv, quick={"records": 5_000, "runs": 1, "native_runs": 1})
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out_dir, work = report.make_dirs("security", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    import confluent_kafka
    import ssl
    say("kafkalite Kafka listener security benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say(f"  client     confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
        f"{confluent_kafka.libversion()[0]}); server TLS: {ssl.OPENSSL_VERSION}")
    say(f"  workload   {args.records:,} records of {VALUE_BYTES} bytes, one partition, acks=1, "
        f"best of {args.runs} (native: median of {args.native_runs}), {args.workers} worker(s)")
    report.say_load(info)
    certs = make_certs(os.path.join(work, "certs"))
    figures: dict[str, tuple[float, float]] = {}
    started = time.perf_counter()
    native = {}
    try:
        for protocol in PROTOCOLS if not args.native_only else ():
            server = start_server(work, protocol, certs, args.workers)
            try:
                best_p = best_c = 0.0
                for r in range(args.runs):
                    topic = f"bench-{r}"
                    create_topic(server, topic)
                    best_p = max(best_p, produce(server, protocol, certs, topic, args.records))
                    best_c = max(best_c, consume(server, protocol, certs, topic, args.records))
                figures[protocol] = (best_p, best_c)
                say(f"  {protocol:<10} produce {best_p:,.0f} rec/s, consume {best_c:,.0f} rec/s")
            except Exception:
                print(server.output()[-3000:], file=sys.stderr)
                raise
            finally:
                server.stop()
        native = native_figures(work, args.records, args.native_runs, args.workers)
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    res = Results()
    labels = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL (TLS)", "SASL_SSL": "SASL_SSL SCRAM-SHA-256"}
    for test, (kind, index) in enumerate((("produce", 0), ("consume", 1)), start=1):
        if not figures:
            break
        base_key = f"plaintext_{kind}_records_per_s"
        for protocol in PROTOCOLS:
            key = f"{protocol.lower()}_{kind}_records_per_s"
            value = figures[protocol][index]
            if protocol == "PLAINTEXT":
                res.add(key, test, f"confluent-kafka {kind}, PLAINTEXT", value, "records/s")
                continue
            ratio = value / figures["PLAINTEXT"][index]
            res.add(key, test, f"confluent-kafka {kind}, {labels[protocol]}", value, "records/s",
                    baseline_key=base_key, target=TARGET, target_text=f">= {TARGET}x",
                    meets=ratio >= TARGET)
    for test, (kind, index, call) in enumerate((("produce", 0, "produce_batch"),
                                                 ("consume", 1, "consume_batch")), start=3):
        for name in ("plain", "curve"):
            rounds = native[name][index]
            res.add(f"native_{name}_{kind}_records_per_s", test,
                    f"kafkalite {call}, native {'CURVE' if name == 'curve' else 'plain'}",
                    statistics.median(rounds), "records/s", runs=rounds,
                    baseline_key=None if name == "plain" else f"native_plain_{kind}_records_per_s")
        ratio = statistics.median(native["curve"][index]) / statistics.median(native["plain"][index])
        say(f"  native {kind}: CURVE at {ratio:.2f}x of plain (median of {args.native_runs})")
    for name in ("plain", "secured"):
        rounds = native[f"ring-{name}"][0]
        ratio = statistics.median(rounds) / statistics.median(native["ring-plain"][0])
        res.add(f"ring_{name}_produce_records_per_s", 5,
                f"kafkalite produce_batch, ring, {'security on' if name == 'secured' else 'plain'}",
                statistics.median(rounds), "records/s", runs=rounds,
                **({} if name == "plain" else {
                    "baseline_key": "ring_plain_produce_records_per_s", "target": RING_TARGET,
                    "target_text": f">= {RING_TARGET}x", "meets": ratio >= RING_TARGET}))
    rounds = native["door"][0]
    door_ratio = statistics.median(rounds) / statistics.median(native["plain"][0])
    res.add("native_door_produce_records_per_s", 6,
            "kafkalite produce_batch, native, local door (User:unix)", statistics.median(rounds),
            "records/s", runs=rounds, baseline_key="native_plain_produce_records_per_s",
            target=RING_TARGET, target_text=f">= {RING_TARGET}x", meets=door_ratio >= RING_TARGET)
    say(f"  native produce through the local door at {door_ratio:.2f}x of plain (median of "
        f"{args.native_runs}; issue 40's target >= {RING_TARGET}x)")
    ring_ratio = (statistics.median(native["ring-secured"][0])
                  / statistics.median(native["ring-plain"][0]))
    say(f"  ring produce: security on at {ring_ratio:.2f}x of plain (median of "
        f"{args.native_runs}; issue 40's target >= {RING_TARGET}x)")
    report.write_tables(out_dir, "kafkalite security: Kafka listener PLAINTEXT vs SSL vs "
                        "SASL_SSL; native plain vs CURVE", res,
                        HEADERS, elapsed=elapsed, info=info,
                        settings={"records": args.records, "runs": args.runs,
                                  "native_runs": args.native_runs,
                                  "value_bytes": VALUE_BYTES, "workers": args.workers},
                        units={k: "records/s" for k in res.order},
                        intro=f"{args.records:,} records of {VALUE_BYTES} bytes, one partition, "
                              f"acks=1, best of {args.runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
