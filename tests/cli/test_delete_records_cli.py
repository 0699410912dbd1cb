"""`kafkalite delete-records` against a running server: by topic and
partition or from kafka-delete-records.sh's --offset-json-file, printing
each partition's new low watermark; partitions the server refuses and bad
arguments give one line each on stderr and exit 1."""
import json

from test_cli import _one_line_error, cli

from harness import create
from replicas import produce
from kafkalite.client import AdminClient


def earliest(server, topic, partition=0) -> int:
    admin = AdminClient(server.config())
    try:
        return admin.list_offsets({(topic, partition): -2})[(topic, partition)]
    finally:
        admin.close()


def test_delete_records_by_partition_or_json_file_and_errors_in_one_line(server, topic_name,
                                                                         tmp_path):
    bs = ["--bootstrap-server", server.bootstrap]
    create(server, topic_name, 2)
    produce(server, topic_name, [b"v%d" % i for i in range(20)])       # 10 per partition
    out = cli("delete-records", topic_name, "--partition", "0", "--offset", "3", *bs)
    assert (out.returncode, out.stdout.decode()) == (
        0, f"partition: {topic_name}-0\tlow_watermark: 3\n"), out.stderr
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "offset": 5},
        {"topic": topic_name, "partition": 1, "offset": -1}]}))
    out = cli("delete-records", "--offset-json-file", str(spec), *bs)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.decode().splitlines()) == [
        f"partition: {topic_name}-0\tlow_watermark: 5",
        f"partition: {topic_name}-1\tlow_watermark: 10"]
    assert earliest(server, topic_name, 0) == 5
    # every partition of the topic, above its high watermark: a line each
    out = cli("delete-records", topic_name, "--offset", "1000", *bs)
    assert out.returncode == 1 and out.stdout == b""
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 2 and all("OFFSET_OUT_OF_RANGE" in line and "high watermark" in line
                                   for line in lines), out.stderr
    (tmp_path / "bad.json").write_text('{"partitions": [{"topic": "x"}]}')
    assert "needs a topic and --offset" in _one_line_error(
        cli("delete-records", topic_name, *bs))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in _one_line_error(
        cli("delete-records", "no-such-topic", "--offset", "1", *bs))
    assert "INVALID_TOPIC_EXCEPTION" in _one_line_error(
        cli("delete-records", "__consumer_offsets", "--partition", "0", "--offset", "1", *bs))
    assert "needs a topic (string)" in _one_line_error(
        cli("delete-records", "--offset-json-file", str(tmp_path / "bad.json"), *bs))
    assert "No such file" in _one_line_error(
        cli("delete-records", "--offset-json-file", str(tmp_path / "missing.json"), *bs))
    assert "not both" in _one_line_error(
        cli("delete-records", topic_name, "--offset", "1", "--offset-json-file", str(spec), *bs))
    assert earliest(server, topic_name, 0) == 5
