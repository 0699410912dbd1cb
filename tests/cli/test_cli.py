"""The CLI against a running server: topics, produce, consume, and errors.

``cli`` runs a command in this process (harness.run_cli: kafkalite.cli.main
with its output captured), as the tests of tests/cli do; ``cli_process``
runs the installed entry point as a user does, for what only a real process
shows (the entry point itself, the exit code through the interpreter)."""
import json
import subprocess
import sys

import pytest

from harness import child_env, run_cli


def cli(*args, stdin=b""):
    return run_cli(*args, stdin=stdin)


def cli_process(*args, stdin=b"", timeout=60):
    return subprocess.run([sys.executable, "-m", "kafkalite", *args], input=stdin,
                          capture_output=True, timeout=timeout, env=child_env())


def test_topics_produce_consume_round_trip(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    out = cli("topics", "create", topic_name, "--partitions", "3", "--config", "retention.ms=3600000", *bs)
    assert out.returncode == 0, out.stderr
    assert topic_name in cli("topics", "list", *bs).stdout.decode().split()
    desc = cli("topics", "describe", topic_name, *bs).stdout.decode()
    assert "PartitionCount: 3" in desc and "retention.ms=3600000" in desc
    lines = b"".join(b"key%d:line %d\n" % (i % 4, i) for i in range(50))
    out = cli("produce", topic_name, "--key-separator", ":", "--header", "src=cli", *bs, stdin=lines)
    assert out.returncode == 0, out.stderr
    out = cli("consume", topic_name, "--from-beginning", "--max-messages", "50", "--print-key",
              "--print-headers", *bs)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.decode().splitlines()
    assert len(rows) == 50
    assert sorted(r.split("\t")[2] for r in rows) == sorted(f"line {i}" for i in range(50))
    assert all(r.startswith("src:cli\tkey") for r in rows)
    assert "Processed a total of 50 messages" in out.stderr.decode()
    out = cli("topics", "alter", topic_name, "--partitions", "5", "--config", "cleanup.policy=delete", *bs)
    assert out.returncode == 0, out.stderr
    assert "PartitionCount: 5" in cli("topics", "describe", topic_name, *bs).stdout.decode()
    out = cli("consume", topic_name, "--partition", "0", "--offset", "0", "--timeout-ms", "500", *bs)
    assert out.returncode == 0
    assert cli("topics", "delete", topic_name, *bs).returncode == 0
    assert topic_name not in cli("topics", "list", *bs).stdout.decode().split()


def _one_line_error(out):
    assert out.returncode != 0
    err = out.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "Traceback" not in out.stderr.decode(), out.stderr
    return err[0]


def test_errors_are_one_readable_line(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert "INVALID_TOPIC" in _one_line_error(cli("topics", "create", "no spaces!", *bs))
    assert "replication" in _one_line_error(cli("topics", "create", topic_name, "--replication-factor", "3", *bs))
    assert "UNKNOWN_TOPIC" in _one_line_error(cli("topics", "delete", "never-made", *bs))
    assert "name=value" in _one_line_error(cli("topics", "create", topic_name, "--config", "oops", *bs))
    assert "--offset needs --partition" in _one_line_error(cli("consume", topic_name, "--offset", "3", *bs))
    down = ["--bootstrap-server", "127.0.0.1:1", "--timeout", "0.5"]
    assert "is the server running" in _one_line_error(cli("topics", "list", *down))
    assert "is the server running" in _one_line_error(cli("produce", "t", *down, stdin=b"x\n"))


@pytest.mark.processes
def test_server_flags_are_checked():
    out = cli_process("server", "--workers", "-1", "--data-dir", "/tmp/never-used-kafkalite")
    assert "workers" in _one_line_error(out)


# Run as `python -c PROBE ARGS...`: the CLI's main on ARGS, then which of
# the modules named in $PROBE_MODULES it had imported, as JSON on stderr.
PROBE = """
import json, os, sys
from kafkalite.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
names = os.environ["PROBE_MODULES"].split(",")
print(json.dumps(sorted(m for m in names if m in sys.modules)), file=sys.stderr)
"""
# what a command's parser must not import: the other commands' modules,
# and the heavy libraries only a command's run may import
OTHER_COMMANDS = ("kafkalite.cli.groups", "kafkalite.cli.consume", "kafkalite.cli.users",
                  "kafkalite.tools.verify", "kafkalite.tools.dump_log")
HEAVY = ("numpy", "pyarrow", "zmq", "confluent_kafka", "kafkalite.bench", "kafkalite.client",
         "kafkalite.server.config")
# what dump-log's and verify's modules import at their top, to read segments
STORAGE = ("kafkalite.storage.log", "kafkalite.storage.segment")


def _imported(*args) -> set[str]:
    env = {**child_env(), "PROBE_MODULES": ",".join(OTHER_COMMANDS + HEAVY + STORAGE)}
    run = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True,
                         text=True, timeout=60)
    return set(json.loads(run.stderr.strip().splitlines()[-1]))


@pytest.mark.processes
def test_a_command_imports_its_own_module_and_nothing_heavy():
    # `kafkalite topics ...` builds the topics parser alone (its start-up:
    # scripts call it in loops); the code before built every command's,
    # importing dump-log's and verify's storage modules
    assert _imported("topics", "--help") == set()
    # the whole parser (--help, a typo) imports every command module, and
    # none imports a heavy library at its top
    assert _imported("--help") == set(OTHER_COMMANDS + STORAGE)


@pytest.mark.processes
def test_python_m_kafkalite_cli_is_the_command_line():
    """``python -m kafkalite.cli`` failed with "No module named
    kafkalite.cli.__main__" (issue 74, item 6)."""
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli", "topic", "list"],
                       capture_output=True, text=True, timeout=60, env=child_env())
    assert r.returncode == 2 and "did you mean 'topics'?" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli", "--version"],
                       capture_output=True, text=True, timeout=60, env=child_env())
    assert r.returncode == 0 and r.stdout.startswith("kafkalite "), r.stdout + r.stderr
