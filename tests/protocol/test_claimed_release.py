"""kafkalite claims Apache Kafka 4.1: every API a Kafka 4.1 broker advertises,
each to the same newest version, and nothing a 4.1 broker lacks.

Clients judge a broker's release by its ApiVersions (kafka-python infers it
from marker versions: Produce v13 => 4.1, ListOffsets v11 => 4.2; a client
pinned to a release sends that release's versions without asking), so a
claim is whole only if every version it implies is served. ``KAFKA_4_1`` is
what a Kafka 4.1 broker's ApiVersions says: each API's "validVersions" in
Kafka 4.1's message specs (those whose "listeners" include "broker", less
the ones 4.1 marks "latestVersionUnstable"), with the lower ends Kafka 4.1
advertises (Produce from 0: KAFKA-18659 kept v0-v2 advertised for librdkafka).
kafkalite may start lower (clients pinned to Kafka 2.x and 3.x send older
versions), never end elsewhere. Where kafka-python is installed its table
of ranges captured from real 4.1 brokers must agree with this one.
No processes: the advertised ranges are api_keys.SUPPORTED_VERSIONS (the
wire test is tests/compat/test_api_versions_conformance.py).
"""
from __future__ import annotations

import pytest

from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey

pytestmark = pytest.mark.unit

CLAIMED = (4, 1)
# API key -> (min, max) a Kafka 4.1 broker advertises.
KAFKA_4_1 = {
    0: (0, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
    69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1),
    80: (0, 0), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 0), 86: (0, 0), 87: (0, 0),
    90: (0, 0), 91: (0, 0), 92: (0, 0),
}


def comparison() -> str:
    """API, Kafka 4.1's range, kafkalite's: one line each."""
    keys = sorted(set(KAFKA_4_1) | {int(k) for k in SUPPORTED_VERSIONS})
    lines = []
    for key in keys:
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else f"API {key}"
        ours = SUPPORTED_VERSIONS.get(key)
        lines.append(f"{key:3} {name:34} kafka {KAFKA_4_1.get(key)!s:10} kafkalite {ours}")
    return "\n".join(lines)


def test_every_api_of_kafka_4_1_is_served_to_its_newest_version():
    ours = {int(k): v for k, v in SUPPORTED_VERSIONS.items()}
    wrong = {k: (KAFKA_4_1.get(k), ours.get(k)) for k in set(KAFKA_4_1) | set(ours)
             if k not in ours or k not in KAFKA_4_1 or ours[k][1] != KAFKA_4_1[k][1]
             or ours[k][0] > KAFKA_4_1[k][0]}
    assert not wrong, f"(Kafka 4.1, kafkalite) differ: {wrong}\n{comparison()}"


def test_kafka_python_infers_the_claimed_release_and_knows_its_ranges():
    versions = pytest.importorskip("kafka.protocol.broker_version_data")
    ours = {int(k): v for k, v in SUPPORTED_VERSIONS.items()}
    assert versions.infer_broker_version_from_api_versions(ours) == CLAIMED
    assert versions.BROKER_API_VERSIONS[CLAIMED] == KAFKA_4_1
