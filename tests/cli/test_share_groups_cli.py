"""`kafkalite share-groups` against a running server."""
import glob
import json
import os
import time

from test_console import _one_line_error, cli

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
    # the partition's leader keeps the group's state beside the log ...
    pattern = os.path.join(server.data_dir, f"{topic_name}-0",
                           "share-" + b"cli-share".hex() + ".state")
    assert glob.glob(pattern)
    assert "has no members" in cli("share-groups", "describe", "cli-share", *bs).stdout.decode()
    out = cli("share-groups", "delete", "cli-share", *bs)
    assert out.returncode == 0, out.stderr
    assert "cli-share" not in cli("share-groups", "list", *bs).stdout.decode().split()
    # ... and drops it with the group
    deadline = time.monotonic() + 10
    while glob.glob(pattern) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not glob.glob(pattern)


def test_share_groups_errors_are_one_line(server):
    bs = ["--bootstrap-server", server.bootstrap]
    _one_line_error(cli("share-groups", "describe", "nobody-home", *bs))
    _one_line_error(cli("share-groups", "delete", "nobody-home", *bs))
