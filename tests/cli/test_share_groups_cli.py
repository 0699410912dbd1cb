"""`kafkalite share-groups` against a running server."""
import json
import time

from test_cli import _one_line_error, cli

from kafkalite.client import Producer, ShareConsumer


def jsonl(out: bytes) -> list:
    return [json.loads(line) for line in out.splitlines()]


def test_share_groups_list_describe_delete(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    c = ShareConsumer(server.config(**{"group.id": "cli-share"}))
    c.subscribe([topic_name])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.consume(1, 0.1)
    p = Producer(server.config())
    for i in range(10):
        p.produce(topic_name, value=b"%d" % i)
    p.flush()
    got = []
    while len(got) < 10 and time.monotonic() < deadline:
        got += c.consume(10, 0.2)
    assert len(got) == 10
    c.commit_sync()
    try:
        listed = jsonl(cli("share-groups", "list", "--output", "json", *bs).stdout)
        assert {"group": "cli-share", "state": "Stable"} in listed
        # not a consumer group: `groups list` leaves it out
        assert "cli-share" not in cli("groups", "list", *bs).stdout.decode().split()
        desc = jsonl(cli("share-groups", "describe", "cli-share", "--output", "json",
                         *bs).stdout)
        assert [(d["member_id"], d["assignment"]) for d in desc] == \
            [(c.member_id, [f"{topic_name}-0"])]
        text = cli("share-groups", "describe", "cli-share", *bs).stdout.decode()
        assert c.member_id in text and "MEMBER-ID" in text
        _one_line_error(cli("share-groups", "delete", "cli-share", *bs))   # it has a member
    finally:
        c.close()
    # the share coordinator keeps the group's state (10 records accepted) ...
    def offsets():
        out = cli("share-groups", "describe", "cli-share", "--offsets", "--output", "json", *bs)
        return jsonl(out.stdout) if out.returncode == 0 else out.stderr.decode()
    assert [(r["partition"], r["start_offset"]) for r in offsets()] == [(0, 10)]
    assert "has no members" in cli("share-groups", "describe", "cli-share", *bs).stdout.decode()
    out = cli("share-groups", "delete", "cli-share", *bs)
    assert out.returncode == 0, out.stderr
    assert "cli-share" not in cli("share-groups", "list", *bs).stdout.decode().split()
    # ... and drops it with the group
    assert "not found" in offsets()


def test_share_groups_errors_are_one_line(server):
    bs = ["--bootstrap-server", server.bootstrap]
    _one_line_error(cli("share-groups", "describe", "nobody-home", *bs))
    _one_line_error(cli("share-groups", "delete", "nobody-home", *bs))


def _accept(server, group, topic, want, deadline_s=20):
    """A share consumer of ``group`` accepts ``want`` records (or what comes
    within the time) and leaves: their values."""
    c = ShareConsumer(server.config(**{"group.id": group, "fetch.max.wait.ms": 100}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(10, 0.2)]
    c.commit_sync()
    c.close()
    return got


def test_share_groups_describe_offsets_and_reset(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    p = Producer(server.config())
    for i in range(10):
        p.produce(topic_name, value=b"%d" % i)
    p.flush()
    # the group starts at the log end (share.auto.offset.reset=latest): to
    # the beginning first, a reset of a group with no state yet
    out = cli("share-groups", "reset-offsets", "--group", "cli-reset", "--topic", topic_name,
              "--to-earliest", "--execute", *bs)
    assert out.returncode == 0, out.stderr
    assert len(_accept(server, "cli-reset", topic_name, 6)) >= 6
    text = cli("share-groups", "describe", "--group", "cli-reset", "--offsets", *bs)
    assert "START-OFFSET" in text.stdout.decode() and "LAG" in text.stdout.decode(), text.stderr
    rows = jsonl(cli("share-groups", "describe", "--group", "cli-reset", "--offsets",
                     "--output", "json", *bs).stdout)
    assert [(r["topic"], r["partition"], r["log_end_offset"]) for r in rows] == \
        [(topic_name, 0, 10)]
    assert rows[0]["start_offset"] + rows[0]["lag"] == 10 and rows[0]["start_offset"] >= 6
    # a dry run changes nothing
    out = cli("share-groups", "reset-offsets", "cli-reset", "--topic", f"{topic_name}:0",
              "--to-offset", "2", *bs)
    assert out.returncode == 0 and b"Dry run" in out.stdout, out.stderr
    assert jsonl(cli("share-groups", "describe", "cli-reset", "--offsets", "--output", "json",
                     *bs).stdout)[0]["start_offset"] == rows[0]["start_offset"]
    out = cli("share-groups", "reset-offsets", "cli-reset", "--topic", f"{topic_name}:0",
              "--to-offset", "2", "--execute", *bs)
    assert out.returncode == 0, out.stderr
    assert _accept(server, "cli-reset", topic_name, 8) == [b"%d" % i for i in range(2, 10)]
    # to the log end; refused while a member is active
    c = ShareConsumer(server.config(**{"group.id": "cli-reset"}))
    c.subscribe([topic_name])
    try:
        c.consume(1, 1.0)
        err = _one_line_error(cli("share-groups", "reset-offsets", "cli-reset", "--topic",
                                  topic_name, "--to-earliest", "--execute", *bs))
        assert "active member" in err
    finally:
        c.close()
    out = cli("share-groups", "reset-offsets", "cli-reset", "--to-latest", "--execute", *bs)
    assert out.returncode == 0, out.stderr
    assert jsonl(cli("share-groups", "describe", "cli-reset", "--offsets", "--output", "json",
                     *bs).stdout)[0]["lag"] == 0


def test_share_groups_reset_errors_are_one_line(server):
    bs = ["--bootstrap-server", server.bootstrap]
    _one_line_error(cli("share-groups", "describe", "--offsets", *bs))     # no group
    _one_line_error(cli("share-groups", "describe", "--group", "nobody-home", "--offsets", *bs))
    _one_line_error(cli("share-groups", "reset-offsets", "g", "--topic", "no-such-topic",
                        "--to-earliest", *bs))
    _one_line_error(cli("share-groups", "reset-offsets", "g", "--to-earliest", *bs))  # no state
    _one_line_error(cli("share-groups", "reset-offsets", "g", "--topic", "x:a",
                        "--to-earliest", *bs))
    _one_line_error(cli("share-groups", "reset-offsets", "g", "--topic", "x",
                        "--to-datetime", "yesterday", *bs))
