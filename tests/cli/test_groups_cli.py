"""`kafkalite groups` and `kafkalite consume --group` against a running server."""
import time

from test_console import _one_line_error, cli

from kafkalite.client import Consumer


def test_groups_describe_reset_and_delete(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "2", *bs).returncode == 0
    lines = b"".join(b"line %d\n" % i for i in range(40))
    assert cli("produce", topic_name, *bs, stdin=lines).returncode == 0
    # a console consumer in a group reads everything and commits where it stopped
    out = cli("consume", topic_name, "--group", "cli-group", "--from-beginning",
              "--max-messages", "40", *bs)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 40
    assert "cli-group" in cli("groups", "list", *bs).stdout.decode().split()
    desc = cli("groups", "describe", "cli-group", *bs)
    assert desc.returncode == 0, desc.stderr
    rows = [r.split() for r in desc.stdout.decode().splitlines()[2:]]
    # TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG: everything read, no lag
    assert sorted((int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows) == sorted(
        (p, n, n, 0) for p, n in ((int(r[1]), int(r[3])) for r in rows))
    assert sum(int(r[3]) for r in rows) == 40
    # reset: a dry run changes nothing; --execute does
    plan = cli("groups", "reset-offsets", "cli-group", "--topic", topic_name, "--to-earliest", *bs)
    assert plan.returncode == 0 and "Dry run" in plan.stdout.decode()
    after = cli("groups", "describe", "cli-group", *bs).stdout.decode().splitlines()[2:]
    assert all(int(r.split()[4]) == 0 for r in after)       # still no lag
    done = cli("groups", "reset-offsets", "cli-group", "--shift-by", "-5", "--execute", *bs)
    assert done.returncode == 0, done.stderr
    desc = [r.split() for r in
            cli("groups", "describe", "cli-group", *bs).stdout.decode().splitlines()[2:]]
    moved = {int(r[1]): min(5, int(r[3])) for r in desc}    # back 5, not before the log start
    assert {int(r[1]): int(r[4]) for r in desc} == moved
    out = cli("consume", topic_name, "--group", "cli-group", "--timeout-ms", "1500", *bs)
    assert len(out.stdout.splitlines()) == sum(moved.values())
    assert cli("groups", "delete", "cli-group", *bs).returncode == 0
    assert "cli-group" not in cli("groups", "list", *bs).stdout.decode().split()


def test_groups_errors_are_one_line(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    _one_line_error(cli("groups", "describe", "nobody-home", *bs))
    _one_line_error(cli("groups", "delete", "nobody-home", *bs))
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    c = Consumer(server.config(**{"group.id": "busy", "heartbeat.interval.ms": 100}))
    c.subscribe([topic_name])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.consume(1, 0.1)
    try:
        out = cli("groups", "reset-offsets", "busy", "--topic", topic_name, "--to-latest",
                  "--execute", *bs)
        _one_line_error(out)
        assert b"active member" in out.stderr
        _one_line_error(cli("groups", "delete", "busy", *bs))
    finally:
        c.close()
    _one_line_error(cli("groups", "reset-offsets", "busy", "--to-datetime", "yesterday", *bs))
