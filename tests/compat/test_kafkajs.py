"""kafkajs (Node.js, from the npm registry) against kafkalite's Kafka listener,
and @kafkajs/confluent-schema-registry, kafkajs' registry client, against
kafkalite's schema registry (schema_registry.js: an Avro schema registered
and a value encoded by it read back by confluent-kafka's AvroDeserializer,
and the reverse; a registry that does not answer is the script's failure).

tests/compat/js/ holds the pinned package (package.json, package-lock.json)
and transactions.js, a transactional producer and a consumer group written
with kafkajs; this test installs kafkajs there with ``npm ci`` on first use,
runs the script against a real server and checks the JSON it prints. It skips
only when node is not installed (tools/install-system-deps installs it).

To see the read_committed checks catch aborted records, run the script with
``--read-uncommitted`` (the consumer then asks for read_uncommitted, as a
broker that ignored the isolation level would answer): the assertions on
``first`` fail with the ``ab-`` values.
"""
from __future__ import annotations

import base64
import fcntl
import json
import pathlib
import shutil
import socket
import subprocess
import tempfile

import pytest
from compat_helpers import create_topic, native_read

JS = pathlib.Path(__file__).parent / "js"
NODE = shutil.which("node")
PARTITIONS = 3
PER_TXN = 12      # transactions.js's PER_TXN

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed "
                                "(tools/install-system-deps installs nodejs and npm)")


def _installed() -> bool:
    """Every package of package.json installed at package-lock.json's version."""
    lock = json.loads((JS / "package-lock.json").read_text())["packages"]
    try:
        for name in json.loads((JS / "package.json").read_text())["dependencies"]:
            installed = JS / "node_modules" / name / "package.json"
            if json.loads(installed.read_text())["version"] != \
                    lock[f"node_modules/{name}"]["version"]:
                return False
        return True
    except (OSError, ValueError, KeyError):
        return False


@pytest.fixture(scope="module")
def kafkajs() -> pathlib.Path:
    """tests/compat/js with node_modules installed from package-lock.json.
    Under a lock: two test processes (pytest-xdist) may both want it first,
    and ``npm ci`` starts by deleting node_modules, so one installing while
    the other checks or runs would break the other. The lock is outside the
    tree (tests/compat/js stays as git has it)."""
    with open(pathlib.Path(tempfile.gettempdir()) / "kafkalite-compat-npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed():
            npm = shutil.which("npm")
            assert npm is not None, "node is installed but npm is not (apt-get install npm)"
            r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS,
                               capture_output=True, text=True, timeout=240)
            assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
            assert _installed(), "npm ci left a package.json package not at its pinned version"
    return JS


def values(records, prefix=None) -> list[str]:
    return sorted(r["value"] for r in records if prefix is None or r["value"].startswith(prefix))


def expected(*tags) -> list[str]:
    return sorted(f"{tag}-{i}" for tag in tags for i in range(PER_TXN))


def test_kafkajs_transactions_and_a_read_committed_consumer_group(server, topic_name, kafkajs):
    create_topic(server, topic_name, PARTITIONS)
    r = subprocess.run([NODE, str(kafkajs / "transactions.js"), server.kafka_bootstrap,
                        topic_name, str(PARTITIONS)],
                       capture_output=True, text=True, timeout=50)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # the first member saw both committed transactions, once each, and none of
    # the aborted one; per partition in offset order
    assert values(out["first"]) == expected("c1", "c2")
    for records in (out["first"], out["second"]):
        for p in range(PARTITIONS):
            offsets = [r["offset"] for r in records if r["partition"] == p]
            assert offsets == sorted(set(offsets))
    # the second member of the group resumed at the offsets the first committed
    assert values(out["second"]) == expected("c3")
    # ...and committed past its last record: before c3's commit marker, or
    # after it when the marker came in a fetch of its own (the log's end)
    last = {p: max(r["offset"] for r in out["second"] if r["partition"] == p)
            for p in range(PARTITIONS)}
    assert [g["partition"] for g in out["groupOffsets"]] == list(range(PARTITIONS))
    for g in out["groupOffsets"]:
        assert g["offset"] in (last[g["partition"]] + 1, last[g["partition"]] + 2), g
    # sendOffsets: the committed transaction's offset, not the aborted one's
    assert out["txnOffsets"] == [{"partition": p, "offset": 7 if p == 0 else -1}
                                 for p in range(PARTITIONS)]
    # the aborted records are in the log: read_committed is what kept them out
    everything = [rec[3].decode() for rec in native_read(server, topic_name, PARTITIONS,
                                                         4 * PER_TXN)]
    assert sorted(everything) == expected("c1", "ab", "c2", "c3")


AVRO_CLICK = json.dumps({"type": "record", "name": "Click", "namespace": "web", "fields": [
    {"name": "user", "type": "string"}, {"name": "count", "type": "int"}]})


def registry_js(kafkajs, url: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([NODE, str(kafkajs / "schema_registry.js"), url, *args],
                          capture_output=True, text=True, timeout=50)


def test_kafkajs_registry_client_registers_and_encodes_for_confluent_kafka(server, topic_name,
                                                                           kafkajs):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    url = server.info["schema_registry"]
    subject = f"{topic_name}-value"
    r = registry_js(kafkajs, url, "encode", subject, AVRO_CLICK,
                    json.dumps({"user": "ada", "count": 3}))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    registry = SchemaRegistryClient({"url": url})
    assert registry.get_latest_version(subject).schema_id == out["id"]
    payload = base64.b64decode(out["payload"])
    assert payload[:5] == b"\x00" + out["id"].to_bytes(4, "big")     # Confluent's wire format
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    assert AvroDeserializer(registry)(payload, ctx) == {"user": "ada", "count": 3}
    # the reverse: confluent-kafka's serializer, kafkajs' client decodes
    written = AvroSerializer(registry, AVRO_CLICK)({"user": "bob", "count": 5}, ctx)
    r = registry_js(kafkajs, url, "decode", base64.b64encode(written).decode())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"value": {"user": "bob",
                                                                      "count": 5}}


def test_kafkajs_registry_client_fails_without_a_registry(kafkajs):
    """The script is not a pass by default: with nothing answering at the
    registry's address it exits 1 naming the failure."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]       # closed again: nothing listens there
    r = registry_js(kafkajs, f"http://127.0.0.1:{port}", "encode", "x-value", AVRO_CLICK,
                    json.dumps({"user": "ada", "count": 3}))
    assert r.returncode == 1 and "schema registry client failed" in r.stderr, r
