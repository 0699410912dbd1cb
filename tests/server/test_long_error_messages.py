"""An error message that quotes a long client input is answered, cut to
fit, on both listeners (issue 40; kafkalite/protocol/compiler.py).

Many errors quote what the client sent (here a config value in
CreateTopics' INVALID_CONFIG message). A value near Kafka's 32,767-byte
string cap made the message longer than the cap, and the response could
not be encoded: the Kafka listener dropped the connection (the client saw
no answer, only a closed socket, and retried) and the native port answered
UNKNOWN_SERVER_ERROR instead of the error, each logging an ERROR line per
request. Now the message is cut on a character boundary and marked, the
error code comes back, and the server logs nothing about it.

The shared server (no security: the cap is the codec's).
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
from compat_helpers import KafkaWire  # noqa: E402

from kafkalite import errors  # noqa: E402
from kafkalite.client import AdminClient, NewTopic  # noqa: E402
from kafkalite.protocol import ApiKey  # noqa: E402

CAP = 32767
# 32,700 bytes: under the cap as a request's value, over it once quoted
VALUE = "é" * 16300 + "x" * 100
MARK = "\u2026 (cut from "


@pytest.fixture(scope="module")
def srv(server):
    """The shared server; where its log stood when this module began."""
    server.log_mark = len(server.output())
    return server


def create_body(name: str) -> dict:
    return {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": "cleanup.policy", "value": VALUE}]}],
            "timeout_ms": 5000, "validate_only": False}


def assert_cut(message: str) -> None:
    assert len(message.encode()) <= CAP
    assert message.startswith("invalid value 'éé") and MARK in message, message[-80:]


@pytest.mark.parametrize("version", [2, 7])        # int16 strings, compact strings
def test_the_kafka_listener_answers_invalid_config_with_the_message_cut(srv, version):
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        answer = wire.request(ApiKey.CREATE_TOPICS, version, create_body(f"long-{version}"))
        topic = answer["topics"][0]
        assert topic["error_code"] == errors.InvalidConfigurationError.code
        assert_cut(topic["error_message"])
        # the connection is still the client's
        again = wire.request(ApiKey.CREATE_TOPICS, version, create_body(f"long-{version}"))
        assert again["topics"][0]["error_code"] == errors.InvalidConfigurationError.code
    finally:
        wire.close()


def test_the_native_port_answers_invalid_config_with_the_message_cut(srv):
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    try:
        future = admin.create_topics([NewTopic("long-native", 1,
                                               config={"cleanup.policy": VALUE})])["long-native"]
        with pytest.raises(errors.InvalidConfigurationError) as raised:
            future.result(timeout=15)
        assert_cut(raised.value.message)
    finally:
        admin.close()


def test_the_server_logged_nothing_about_it(srv):
    log = srv.output()[srv.log_mark:]
    assert "cannot encode" not in log and "INVALID_CONFIG" not in log, log[-3000:]
