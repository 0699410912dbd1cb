"""Our message definitions agree with Kafka's JSON message specs.

The specs are read from where they live outside the project (the shared
spec directory, else the copy bundled with kafka-python); for every
supported version each message must have the same fields in the same
order, with the same types, nullability, tags and defaults.
"""
from __future__ import annotations

import json
import pathlib
import re
import uuid

import pytest

from kafkalite.protocol.messages import (
    REQUESTS,
    RESPONSES,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafkalite.protocol.schema import MAX_VERSION, Versions


def _spec_dirs():
    yield pathlib.Path("/work/shared/kafka-protocol")
    try:
        import kafka.protocol.schemas.resources as bundled
        yield pathlib.Path(bundled.__file__).parent
    except ImportError:
        pass


SPEC_DIR = next((d for d in _spec_dirs() if (d / "ProduceRequest.json").exists()), None)
pytestmark = pytest.mark.skipif(SPEC_DIR is None, reason="Kafka's JSON message specs are not available")
# API key -> (the first version a spec snapshot may lack, what defines it):
# versions of releases after the snapshot (the shared specs, or the copy
# kafka-python bundles). Any other version outside a spec's validVersions is
# a claim no Kafka release makes, and fails.
AHEAD_OF_SPEC = {
    69: (1, "KIP-1099, Kafka 4.0: ConsumerGroupDescribe v1, members' types"),
    76: (1, "KIP-932, Kafka 4.1: ShareGroupHeartbeat v1"),
    77: (1, "KIP-932, Kafka 4.1: ShareGroupDescribe v1"),
    78: (1, "KIP-932, Kafka 4.1: ShareFetch v1"),
    79: (1, "KIP-932, Kafka 4.1: ShareAcknowledge v1"),
}
# (message, version) -> what changed it after the spec snapshot: a version
# unstable in the snapshot's release that a later one changed before making
# it stable (tests/compat/test_kafka_4_1_apis.py reads the later layout).
CHANGED_AFTER_SPEC = {
    ("ReadShareGroupStateSummaryResponse", 0):
        "KAFKA-19218, Kafka 4.1: LeaderEpoch between StateEpoch and StartOffset",
}
PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "string", "bytes",
              "uuid", "records"}


def load_specs(name: str) -> list[dict]:
    """Kafka's specs of ``name`` from every spec directory that has it (the
    shared snapshot, from before 4.0, and kafka-python's, newer but without
    the versions 4.0 dropped); a message newer than every one at hand
    (DescribeShareGroupOffsets, Kafka 4.1) is skipped, not guessed."""
    paths = [d / f"{name}.json" for d in _spec_dirs() if (d / f"{name}.json").exists()]
    if not paths:
        pytest.skip(f"no Kafka spec of {name} in {[str(d) for d in _spec_dirs()]}")
    return [json.loads(re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)) for path in paths]


def load_spec(name: str) -> dict:
    return load_specs(name)[0]


def spec_of(specs: list[dict], version: int) -> dict:
    """The spec defining ``version`` (a released version never changes, so
    any that has it will do); the first if none does."""
    return next((s for s in specs if version in versions(s["validVersions"])), specs[0])


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def versions(spec: str | None) -> Versions:
    return Versions.parse(spec) if spec else Versions(1, 0)


def spec_default(field: dict, kind: str, nullable: bool):
    if "default" not in field:
        zeros = {"bool": False, "string": "", "bytes": b"", "float64": 0.0, "uuid": uuid.UUID(int=0)}
        return None if nullable else zeros.get(kind, 0)
    value = field["default"]
    if value == "null":
        return None
    if kind == "bool":
        return value in (True, "true")
    if kind == "string":
        return value
    return int(value, 0) if isinstance(value, str) else value


def compare(spec_fields, our_fields, version, common, where):
    spec_present = [f for f in spec_fields if version in versions(f["versions"])]
    ours = [f for f in our_fields if f.present(version) and not f.own]   # kafkalite's own tags
    names = [snake(f["name"]) for f in spec_present]
    assert names == [f.name for f in ours], f"{where} v{version}: field names"
    for spec, field in zip(spec_present, ours):
        at = f"{where}.{field.name} v{version}"
        kind = spec["type"]
        inner = kind[2:] if kind.startswith("[]") else kind
        nullable = version in versions(spec.get("nullableVersions"))
        assert field.is_nullable(version) == nullable, f"{at}: nullability"
        tagged = "tag" in spec and version in versions(spec.get("taggedVersions"))
        assert field.tag == (spec["tag"] if tagged else None), f"{at}: tag"
        if inner in PRIMITIVES:
            assert field.type == kind, f"{at}: type"
            if not kind.startswith("[]"):
                assert field.default(version) == spec_default(spec, kind, nullable), f"{at}: default"
            continue
        assert field.type == ("[]" if kind.startswith("[]") else "{}"), f"{at}: type"
        sub = spec.get("fields") or common[inner]
        compare(sub, field.fields, version, common, at)


def cases():
    for table in (REQUESTS, RESPONSES):
        for message in table.values():
            yield message
    yield ConsumerProtocolSubscription
    yield ConsumerProtocolAssignment


@pytest.mark.parametrize("message", list(cases()), ids=lambda m: m.name)
def test_definition_matches_kafka_spec(message):
    specs = load_specs(message.name)
    for version in range(message.versions.low, message.versions.high + 1):
        spec = spec_of(specs, version)
        if message.api_key is not None:
            assert spec["apiKey"] == message.api_key
        valid = versions(spec["validVersions"])
        flexible = versions(spec["flexibleVersions"])
        common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
        assert version in valid or message.kind != "data"
        if version not in valid:
            # newer than the specs at hand: not guessed, but only where a
            # release after the snapshot defines it
            assert version >= AHEAD_OF_SPEC.get(message.api_key, (MAX_VERSION, ""))[0], \
                f"{message.name} v{version}: not in the spec's {spec['validVersions']}"
            continue
        assert message.is_flexible(version) == (version in flexible), \
            f"{message.name} v{version}: flexible"
        if (message.name, version) in CHANGED_AFTER_SPEC:
            continue
        compare(spec["fields"], message.fields, version, common, message.name)
    assert message.versions.high < MAX_VERSION
