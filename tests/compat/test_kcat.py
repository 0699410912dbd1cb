"""kcat (the Debian package, librdkafka's CLI) against kafkalite's Kafka listener."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from compat_helpers import ACKS, COMPRESSIONS, create_topic, native_produce, native_read

from kafkalite._ext.partitioner import partition_for_key

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat)")


def kcat(server, *args, input=None) -> str:
    r = subprocess.run([KCAT, "-b", server.kafka_bootstrap, *args], input=input,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("acks", ACKS)
def test_produce_with_keys_headers_acks_and_compression(server, topic_name, acks, compression):
    create_topic(server, topic_name)
    lines = "".join(f"k{i}:value {i}\n" for i in range(20))
    kcat(server, "-P", "-t", topic_name, "-p", "0", "-K:", "-z", compression,
         "-X", f"acks={acks}", "-H", "origin=kcat", "-H", f"codec={compression}", input=lines)
    got = native_read(server, topic_name, 1, 20)
    assert [(r[1], r[2], r[3]) for r in got] == [
        (i, b"k%d" % i, b"value %d" % i) for i in range(20)]
    assert all(r[4] == (("origin", b"kcat"), ("codec", compression.encode())) for r in got)


def test_idempotent_produce(server, topic_name):
    create_topic(server, topic_name)
    lines = "".join(f"v{i}\n" for i in range(500))
    kcat(server, "-P", "-t", topic_name, "-p", "0", "-X", "enable.idempotence=true",
         input=lines)
    assert [r[3] for r in native_read(server, topic_name, 1, 500)] == [
        b"v%d" % i for i in range(500)]


def test_consumes_native_records_from_the_beginning(server, topic_name):
    create_topic(server, topic_name)
    records = [(b"key-%d" % i, b"value-%d" % i, [("h", b"%d" % i)]) for i in range(30)]
    native_produce(server, topic_name, records, timestamps=[1_700_000_000_000 + i
                                                            for i in range(30)])
    out = kcat(server, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q",
               "-f", "%p %o %k %s %h %T\\n")
    assert out.splitlines() == [f"0 {i} key-{i} value-{i} h={i} {1_700_000_000_000 + i}"
                                for i in range(30)]


def test_keyed_records_land_on_the_murmur2_partition(server, topic_name):
    create_topic(server, topic_name, partitions=3)
    keys = [f"sensor-{i}" for i in range(60)]
    kcat(server, "-P", "-t", topic_name, "-K:", "-X", "partitioner=murmur2_random",
         input="".join(f"{k}:x\n" for k in keys))
    got = native_read(server, topic_name, 3, len(keys))
    assert {r[2]: r[0] for r in got} == {k.encode(): partition_for_key(k.encode(), 3)
                                        for k in keys}


def test_metadata_lists_every_broker_and_topic(server, topic_name):
    create_topic(server, topic_name, partitions=2)
    out = kcat(server, "-L", "-t", topic_name)
    # the workers; the supervisor (bootstrap, 1000) holds no replica and is not listed
    assert "2 brokers:" in out and "broker 1000" not in out and "(controller)" in out
    assert f'topic "{topic_name}" with 2 partitions' in out
