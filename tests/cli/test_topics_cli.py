"""`kafkalite topics | produce | configs | cluster` with Kafka's habits, run as a
user runs them (subprocesses) against a real server: per-partition offsets,
records and size in describe, --if-(not-)exists, errors that name their
topic, a subcommand's own usage, produce's count before an error."""
import glob
import json
import os
import re

from harness import free_port
from test_cli import _one_line_error, cli

from kafkalite.client import AdminClient, TopicPartition


def test_describe_shows_offsets_records_and_size_per_partition(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--partitions", "2", *bs).returncode == 0
    lines = b"".join(b"record %d\n" % i for i in range(30))
    assert cli("produce", topic_name, "-p", "0", *bs, stdin=lines).returncode == 0
    admin = AdminClient(server.config())
    try:
        for fut in admin.delete_records([TopicPartition(topic_name, 0, 12)]).values():
            fut.result()
    finally:
        admin.close()
    out = cli("topics", "describe", "--topic", topic_name, *bs)
    assert out.returncode == 0, out.stderr
    rows = {int(re.search(r"Partition: (\d+)", r).group(1)): dict(
        re.findall(r"(StartOffset|EndOffset|Records|Size): (\d+)", r))
        for r in out.stdout.decode().splitlines()[1:]}
    # the size is the leader's segment files on disk
    (log_dir,) = glob.glob(os.path.join(server.data_dir, "**", f"{topic_name}-0"), recursive=True)
    on_disk = sum(os.path.getsize(f) for f in glob.glob(os.path.join(log_dir, "*.log")))
    assert rows[0] == {"StartOffset": "12", "EndOffset": "30", "Records": "18",
                       "Size": str(on_disk)}
    assert on_disk > 0
    assert rows[1] == {"StartOffset": "0", "EndOffset": "0", "Records": "0", "Size": "0"}
    doc = json.loads(cli("topics", "describe", topic_name, "--output", "json", *bs).stdout)
    assert doc["partition_count"] == 2
    assert doc["partitions"][0]["start_offset"] == 12
    assert doc["partitions"][0]["size_bytes"] == on_disk


def test_if_not_exists_and_if_exists(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", "-t", topic_name, *bs).returncode == 0
    assert "TOPIC_ALREADY_EXISTS" in _one_line_error(cli("topics", "create", topic_name, *bs))
    assert cli("topics", "create", topic_name, "--if-not-exists", *bs).returncode == 0
    assert cli("topics", "delete", "--topic", topic_name, *bs).returncode == 0
    assert topic_name in _one_line_error(cli("topics", "delete", topic_name, *bs))
    out = cli("topics", "delete", topic_name, "--if-exists", *bs)
    assert out.returncode == 0 and out.stderr == b""
    assert "two topics" in cli("topics", "delete", "a", "--topic", "b", *bs).stderr.decode()


def test_errors_name_the_topic(server):
    bs = ["--bootstrap-server", server.bootstrap]
    for args in (("topics", "describe", "never-made"), ("consume", "never-made", "-e")):
        line = _one_line_error(cli(*args, *bs))
        assert "'never-made'" in line
        assert line.count("UNKNOWN_TOPIC_OR_PARTITION") == 1, line     # the code once


def test_a_bad_flag_prints_the_subcommands_usage():
    for args, usage in ((("consume", "t", "--bogus"), "usage: kafkalite consume"),
                        (("topics", "create", "t", "--bogus"), "usage: kafkalite topics create"),
                        (("groups", "describe", "g", "--bogus"), "usage: kafkalite groups describe")):
        out = cli(*args)
        err = out.stderr.decode()
        assert out.returncode == 2
        assert err.startswith(usage), err
        assert "unrecognized arguments: --bogus" in err


def test_produce_without_a_server_counts_the_line_it_could_not_write():
    err = _one_line_error(cli("produce", "t", "--bootstrap-server", f"127.0.0.1:{free_port()}",
                              "--timeout", "5", stdin=b"hello\n"))
    assert "wrote 0 of 1 record(s)" in err and "is the server running?" in err, err


def test_a_typo_gets_a_did_you_mean():
    for args, hint in ((("topcs", "list"), "did you mean 'topics'?"),
                       (("topics", "lst"), "did you mean 'list'?"),
                       (("topics", "create", "t", "--partitons", "3"), "did you mean '--partitions'?"),
                       (("consume", "t", "--from-begining"), "did you mean '--from-beginning'?")):
        out = cli(*args)
        err = out.stderr.decode()
        assert out.returncode == 2 and err.rstrip().endswith(hint), (args, err)
    assert "did you mean" not in cli("topics", "create", "t", "--zzz").stderr.decode()


def test_produce_says_how_many_records_were_written_before_an_error(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    lines = b"a\nb\n" + b"x" * 2_000_000 + b"\nc\nd\n"    # line 3: over max.message.bytes
    err = _one_line_error(cli("produce", topic_name, *bs, stdin=lines))
    written = re.search(rf"wrote (\d) of 5 record\(s\) to topic '{topic_name}'", err)
    assert written and "MESSAGE_TOO_LARGE" in err and "line 3" in err, err
    out = cli("consume", topic_name, "--from-beginning", "-e", *bs)
    assert out.stdout.split() == [b"a", b"b", b"c", b"d"]
    assert int(written.group(1)) == 4
    # a line without its key separator: what came before it is written and counted
    err = _one_line_error(cli("produce", topic_name, "--key-separator", ":", *bs,
                              stdin=b"k:1\nk:2\nnone\nk:3\n"))
    assert "wrote 2 of 3 record(s)" in err and "line 3 has no key separator" in err


def test_configs_describe_all_with_sources_and_alter(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, "--config", "retention.ms=3600000", *bs) \
        .returncode == 0
    out = cli("configs", "describe", topic_name, *bs).stdout.decode()
    assert out.splitlines()[1:] == ["  retention.ms=3600000 (DYNAMIC_TOPIC_CONFIG)"]
    docs = [json.loads(r) for r in cli("configs", "describe", "--topic", topic_name, "--all",
                                       "--output", "json", *bs).stdout.splitlines()]
    by_name = {d["name"]: d for d in docs}
    assert by_name["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert by_name["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    assert len(docs) > 10
    out = cli("configs", "alter", topic_name, "--add-config", "cleanup.policy=compact,"
              "min.insync.replicas=1", "--delete-config", "retention.ms", *bs)
    assert out.returncode == 0, out.stderr
    out = cli("configs", "describe", topic_name, *bs).stdout.decode()
    assert out.splitlines()[1:] == ["  cleanup.policy=compact (DYNAMIC_TOPIC_CONFIG)",
                                    "  min.insync.replicas=1 (DYNAMIC_TOPIC_CONFIG)"]
    assert "'nope'" in _one_line_error(cli("configs", "describe", "nope", *bs))


def test_cluster_info(server):
    bs = ["--bootstrap-server", server.bootstrap]
    out = cli("cluster", "info", *bs)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert re.search(r"^Cluster ID: \S+$", text, re.M)
    brokers = re.findall(r"^(\d+)\s+(\S+)\s+(\d+)$", text, re.M)
    assert sorted(int(b[0]) for b in brokers) == [0, 1]
    assert f"kafka: {server.info['kafka.bootstrap.servers']}" in text
    doc = json.loads(cli("cluster", "info", "--output", "json",
                         *bs).stdout)
    assert doc["listeners"]["native"] == server.info["native"]
    assert len(doc["brokers"]) == 2
