"""`kafkalite consume` with Kafka's, kcat's and rpk's habits, run as a user runs
it (a subprocess) against a real server: group interop with Kafka's default
assignors, SIGTERM leaving the group, broken pipes, start offsets, -e,
format strings, JSON output, --property and client-property pass-through."""
import json
import re
import signal
import subprocess
import sys
import threading
import time

from harness import child_env
from test_cli import _one_line_error, cli

from kafkalite.client import AdminClient, Consumer, NewTopic, Producer


def _produce(server, topic, values, key=None, headers=None):
    p = Producer(server.config())
    for v in values:
        p.produce(topic, v, key, headers=headers)
    assert p.flush(20) == 0
    p.close()


def _members(server, group):
    admin = AdminClient(server.config())
    try:
        return admin.describe_consumer_groups([group])[group].result().members
    finally:
        admin.close()


def test_a_group_consumer_joins_a_group_of_cooperative_sticky_members(server, topic_name):
    """Kafka's default assignors (range,cooperative-sticky): the CLI member
    shares the partitions with a member that chose cooperative-sticky
    instead of failing INCONSISTENT_GROUP_PROTOCOL."""
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "4", *bs).returncode == 0
    _produce(server, topic_name, [b"v%d" % i for i in range(40)])
    member = Consumer(server.config(**{
        "group.id": "coop", "auto.offset.reset": "earliest", "heartbeat.interval.ms": 100,
        "partition.assignment.strategy": "cooperative-sticky"}))
    member.subscribe([topic_name])
    stop = threading.Event()

    def keep_polling():          # a live member takes part in every rebalance
        while not stop.is_set():
            member.consume(100, 0.1)

    deadline = time.monotonic() + 20
    while len(member.assignment()) < 4 and time.monotonic() < deadline:
        member.consume(100, 0.1)
    poller = threading.Thread(target=keep_polling)
    poller.start()
    try:
        # the CLI member joins, is given partitions, and reads what arrives in them
        proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "consume", topic_name,
                                 "--group", "coop", "--timeout-ms", "6000", *bs],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
        deadline = time.monotonic() + 30
        while len(_members(server, "coop")) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        while time.monotonic() < deadline and not all(
                m.assignment for m in _members(server, "coop")):
            time.sleep(0.2)
        p = Producer(server.config())
        for i in range(40):                       # 10 in each partition
            p.produce(topic_name, b"late %d" % i, partition=i % 4)
        assert p.flush(20) == 0
        p.close()
        out, err = proc.communicate(timeout=60)
    finally:
        stop.set()
        poller.join()
        member.close()
    assert proc.returncode == 0, err
    assert b"INCONSISTENT_GROUP_PROTOCOL" not in err
    got = out.decode().splitlines()
    # its share: whole partitions of 10 records each
    assert got and len(got) % 10 == 0 and all(line.startswith("late ") for line in got), got


def test_the_readme_group_walk_through_works_as_written(server, tmp_path):
    """The tour's consumer-group example (docs/quickstart.md), followed
    literally: its Python member closes (leaves the group), so the CLI member
    and reset-offsets that follow are not refused."""
    readme = open("docs/quickstart.md").read()
    section = readme[readme.index("Consumer groups share"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shell = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    bs = ["--bootstrap-server", server.bootstrap]
    admin = AdminClient(server.config())
    try:
        for fut in admin.create_topics([NewTopic("orders", 4)]).values():
            fut.result()
    finally:
        admin.close()
    _produce(server, "orders", [b"pizza", b"sushi", b"salad"])
    script = tmp_path / "billing.py"
    script.write_text("from kafkalite.client import Consumer\n"
                      + code.replace("127.0.0.1:7092", server.bootstrap))
    run = subprocess.run([sys.executable, str(script)], env=child_env(), capture_output=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert _members(server, "billing") == []          # it left the group on close()
    commands = [line.split("#")[0].split() for line in shell.splitlines() if line.strip()]
    assert [c[:3] for c in commands] == [["kafkalite", "consume", "orders"],
                                         ["kafkalite", "groups", "describe"],
                                         ["kafkalite", "groups", "reset-offsets"]]
    out = cli(*commands[0][1:], "--timeout-ms", "3000", *bs)
    assert out.returncode == 0, out.stderr
    out = cli(*commands[1][1:], *bs)
    assert out.returncode == 0 and "billing" in out.stdout.decode(), out.stderr
    out = cli(*commands[2][1:], *bs)
    assert out.returncode == 0, out.stderr


def test_sigterm_closes_a_group_consumer_and_exits_0(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "2", *bs).returncode == 0
    _produce(server, topic_name, [b"x%d" % i for i in range(10)])
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "consume", topic_name,
                             "--group", "term", "--from-beginning", *bs],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    try:
        first = proc.stdout.readline()           # a member with its partitions, reading
        assert first.startswith(b"x"), proc.stderr.read() if proc.poll() is not None else first
        assert len(_members(server, "term")) == 1
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    assert b"Processed a total of 10 messages" in proc.stderr.read()
    assert _members(server, "term") == []           # it left; no session timeout to wait out


def test_a_closed_pipe_ends_consume_quietly(server, topic_name):
    """`kafkalite consume T | head -1`: exit 0, nothing on stderr."""
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    # 4 MB: more than a pipe holds, so the writes after the reader left fail
    _produce(server, topic_name, [b"%04d" % i + b"." * 1000 for i in range(4000)])
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "consume", topic_name,
                             "--from-beginning", "--timeout-ms", "3000", *bs],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    assert proc.stdout.readline().startswith(b"0000")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0
    assert err == b""


def test_offsets_exit_at_end_formats_and_properties(server, topic_name, tmp_path):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", "--topic", topic_name, "--partitions", "2", *bs).returncode == 0
    before = int(time.time() * 1000)
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(10))
    assert cli("produce", "-t", topic_name, "-p", "1", "--property", "parse.key=true",
               "--property", "key.separator=:", "--header", "h=1", *bs,
               stdin=lines).returncode == 0
    time.sleep(0.05)
    after = int(time.time() * 1000)
    _produce(server, topic_name, [b"late"], key=b"kl")   # partition by key: either one

    # -e: ends by itself once every partition is read to its end; -f: kcat's tokens
    out = cli("consume", "--topic", topic_name, "-o", "earliest", "-e", "-p", "1",
              "-f", r"%t|%p|%o|%k|%s|%S|%K|%h\n", *bs)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.decode().splitlines()
    assert rows[:10] == [f"{topic_name}|1|{i}|k{i}|v{i}|{len(f'v{i}')}|{len(f'k{i}')}|h=1"
                         for i in range(10)]
    # -N: the last N of each partition; @MS: from a timestamp
    out = cli("consume", topic_name, "-o", "-2", "-e", "-p", "1", "-f", r"%s\n", *bs)
    assert out.stdout.decode().split()[-2:] == (["v8", "v9"] if len(rows) == 10
                                                else ["v9", "late"])
    out = cli("consume", topic_name, "-o", f"@{after}", "-e", "-f", r"%s\n", *bs)
    assert out.stdout.decode().split() == ["late"], out.stderr
    out = cli("consume", topic_name, "-o", f"@{before}", "-e", "-f", r"%s\n", *bs)
    assert len(out.stdout.decode().split()) == 11
    # --output json: one document per record
    out = cli("consume", topic_name, "-o", "beginning", "-e", "-p", "1", "--output", "json", *bs)
    docs = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert docs[0] == {"topic": topic_name, "partition": 1, "offset": 0,
                       "timestamp": docs[0]["timestamp"], "key": "k0", "value": "v0",
                       "headers": [{"key": "h", "value": "1"}]}
    assert before <= docs[0]["timestamp"] <= after
    # kafka-console-consumer's --property
    out = cli("consume", topic_name, "--from-beginning", "-e", "-p", "1", "--property",
              "print.key=true", "--property", "print.offset=true", "--property",
              "key.separator= | ", *bs)
    assert out.stdout.decode().splitlines()[0] == "Offset:0 | k0 | v0"
    # client properties: -X and --command-config reach the client (a bad
    # value is refused naming the property; auto.offset.reset is obeyed)
    err = _one_line_error(cli("consume", topic_name, "-e", "-X", "fetch.max.bytes=lots", *bs))
    assert "fetch.max.bytes" in err
    props = tmp_path / "consumer.properties"
    props.write_text("# as Kafka's tools take them\nauto.offset.reset = earliest\n")
    out = cli("consume", topic_name, "-e", "--command-config", str(props), *bs)
    assert len(out.stdout.decode().splitlines()) == 11, out.stderr
    # an absolute offset belongs to one partition
    assert "--partition" in _one_line_error(cli("consume", topic_name, "-o", "3", *bs))
