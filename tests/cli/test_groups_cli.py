"""`kafkalite groups` and `kafkalite consume --group` against a running server."""
import json
import time

from test_cli import _one_line_error, cli

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


def test_groups_describe_members_state_all_groups_and_json(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "2", *bs).returncode == 0
    c = Consumer(server.config(**{"group.id": "shown", "client.id": "shown-client",
                                  "heartbeat.interval.ms": 100}))
    c.subscribe([topic_name])
    deadline = time.monotonic() + 20
    while len(c.assignment()) < 2 and time.monotonic() < deadline:
        c.consume(1, 0.1)
    try:
        out = cli("groups", "describe", "shown", "--members", *bs)
        assert out.returncode == 0, out.stderr
        header, row = out.stdout.decode().splitlines()
        assert header.split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST",
                                  "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        cells = row.split()
        assert cells[0] == "shown" and cells[4] == "shown-client" and cells[5] == "2"
        assert sorted(cells[6].split(",")) == [f"{topic_name}-0", f"{topic_name}-1"]
        state = cli("groups", "describe", "shown", "--state", "--output", "json", *bs)
        doc = json.loads(state.stdout)
        assert doc["state"] == "Stable" and doc["members"] == 1
        assert doc["assignment_strategy"] == "range"
        every = cli("groups", "describe", "--all-groups", "--state", "--output", "json", *bs)
        assert "shown" in [json.loads(r)["group"] for r in every.stdout.splitlines()]
        assert "--all-groups" in _one_line_error(cli("groups", "describe", *bs))
    finally:
        c.close()


def test_reset_offsets_to_current_by_duration_export_from_file_and_delete_offsets(
        server, topic_name, tmp_path):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "2", *bs).returncode == 0
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(20))
    assert cli("produce", topic_name, "--key-separator", ":", *bs, stdin=lines).returncode == 0
    out = cli("consume", topic_name, "--group", "resets", "--from-beginning", "-e", *bs)
    assert len(out.stdout.splitlines()) == 20, out.stderr
    ends = {int(r.split()[1]): int(r.split()[3]) for r in
            cli("groups", "describe", "resets", *bs).stdout.decode().splitlines()[2:]}
    assert sum(ends.values()) == 20

    def committed():
        return {int(r.split()[1]): int(r.split()[2]) for r in
                cli("groups", "describe", "resets", *bs).stdout.decode().splitlines()[2:]}

    # --export prints topic,partition,offset lines, which --from-file takes back
    plan = cli("groups", "reset-offsets", "resets", "--topic", topic_name, "--to-current",
               "--export", *bs)
    assert plan.returncode == 0, plan.stderr
    assert sorted(plan.stdout.decode().split()) == sorted(
        f"{topic_name},{p},{n}" for p, n in ends.items())
    saved = tmp_path / "offsets.csv"
    saved.write_bytes(plan.stdout)
    # --by-duration: from an hour ago is from the start
    assert cli("groups", "reset-offsets", "resets", "--topic", topic_name, "--by-duration",
               "PT1H", "--execute", *bs).returncode == 0
    assert committed() == {p: 0 for p in ends}
    assert cli("groups", "reset-offsets", "resets", "--from-file", str(saved), "--execute",
               *bs).returncode == 0
    assert committed() == ends
    assert "ISO 8601 duration" in _one_line_error(
        cli("groups", "reset-offsets", "resets", "--by-duration", "an hour", *bs))
    # --delete-offsets: the group no longer has offsets for the topic
    out = cli("groups", "delete-offsets", "resets", "--topic", f"{topic_name}:0", *bs)
    assert out.returncode == 0, out.stderr
    assert "Successful" in out.stdout.decode()
    left = cli("groups", "describe", "resets", "--output", "json", *bs)
    rows = [json.loads(r) for r in left.stdout.splitlines()]
    assert {r["partition"]: r["current_offset"] for r in rows} == {1: ends[1]}


def test_groups_describe_verbose_shows_epochs_targets_and_member_types(server, topic_name):
    """A KIP-848 group with a consumer-protocol member and a classic one
    (confluent-kafka): --state --verbose shows its type and epochs,
    --members --verbose each member's epoch, target and protocol; a classic
    group shows "-" there."""
    import confluent_kafka as ck
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "4", *bs).returncode == 0
    common = {"bootstrap.servers": server.kafka_bootstrap, "group.id": "kip848-shown"}
    new = ck.Consumer({**common, "group.protocol": "consumer", "client.id": "new-one"})
    new.subscribe([topic_name])
    old = None
    try:
        deadline = time.monotonic() + 30
        while len(new.assignment()) < 4 and time.monotonic() < deadline:
            new.poll(0.1)
        old = ck.Consumer({**common, "group.protocol": "classic", "client.id": "old-one",
                           "partition.assignment.strategy": "cooperative-sticky"})
        old.subscribe([topic_name])
        while (len(old.assignment()) != 2 or len(new.assignment()) != 2) and \
                time.monotonic() < deadline:
            new.poll(0.05)
            old.poll(0.05)
        assert len(old.assignment()) == 2 and len(new.assignment()) == 2

        state = json.loads(cli("groups", "describe", "kip848-shown", "--state", "--output",
                               "json", *bs).stdout)
        assert state["type"] == "consumer" and state["assignment_strategy"] == "uniform"
        assert state["members"] == 2 and state["group_epoch"] >= 2
        assert state["target_assignment_epoch"] == state["group_epoch"]
        text = cli("groups", "describe", "kip848-shown", "--state", "--verbose", *bs)
        header, row = text.stdout.decode().splitlines()
        assert header.split()[-3:] == ["TYPE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        assert row.split()[-3:] == ["consumer", str(state["group_epoch"]),
                                    str(state["group_epoch"])]

        out = cli("groups", "describe", "kip848-shown", "--members", "--output", "json", *bs)
        members = {r["client_id"]: r for r in map(json.loads, out.stdout.splitlines())}
        assert members["new-one"]["upgraded"] is True
        assert members["old-one"]["upgraded"] is False
        for r in members.values():
            assert r["member_epoch"] == state["group_epoch"]
            assert sorted(r["target_assignment"]) == sorted(r["assignment"])
        assert sorted(members["new-one"]["assignment"] + members["old-one"]["assignment"]) == \
            [f"{topic_name}-{p}" for p in range(4)]
        text = cli("groups", "describe", "kip848-shown", "--members", "--verbose", *bs)
        lines = text.stdout.decode().splitlines()
        assert lines[0].split()[-4:] == ["CURRENT-EPOCH", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
                                         "UPGRADED"]
        by_client = {line.split()[4]: line.split() for line in lines[1:]}
        assert by_client["old-one"][-1] == "false" and by_client["new-one"][-1] == "true"
    finally:
        new.close()
        if old is not None:
            old.close()

    # a classic group: "-" where KIP-848 groups have epochs
    c = Consumer(server.config(**{"group.id": "classic-shown", "heartbeat.interval.ms": 100}))
    c.subscribe([topic_name])
    deadline = time.monotonic() + 20
    while len(c.assignment()) < 4 and time.monotonic() < deadline:
        c.consume(1, 0.1)
    try:
        text = cli("groups", "describe", "classic-shown", "--members", "--verbose", *bs)
        row = text.stdout.decode().splitlines()[1].split()
        assert row[-4:] == ["-", "-", "-", "-"]
        state = json.loads(cli("groups", "describe", "classic-shown", "--state", "--output",
                               "json", *bs).stdout)
        assert state["type"] == "classic" and state["group_epoch"] is None
    finally:
        c.close()
