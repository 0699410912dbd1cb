"""Compiled twins of generated codecs, for the messages a broker handles per
partition many times a second (issues 46, 72): ProduceRequest's and
FetchRequest's decoders, and ProduceResponse's and FetchResponse's encoders
(kafkalite._ext.produce_fetch, ext/produce_fetch.pyx).

``install(codec)`` puts a twin in place of a CompiledMessage's generated
function when one exists for its message, version and records mode; the
twin calls the generated function for everything it does not take
(malformed input included), so errors and rare shapes behave as before.

The twins are hand-written for the layouts these schemas have today. Each
layout is fingerprinted (``schema_fingerprint``); if a schema changes, the
fingerprint no longer matches ``_WRITTEN_FOR``, no twin is installed (the
generated code serves, correct but slower) and
tests/protocol/test_produce_fetch.py fails until the twin is reviewed.
"""
from __future__ import annotations

import hashlib

from kafkalite._ext.produce_fetch import (FetchRequestDecoder, FetchResponseEncoder,
                                          ProduceRequestDecoder, ProduceResponseEncoder)
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.compiler import CompiledMessage, _byte_length
from kafkalite.protocol.messages import REQUESTS, RESPONSES
from kafkalite.protocol.schema import Message

# (message kind, api key) -> the versions a twin takes: Produce from v3
# (message format v2; librdkafka and the Java client send v3-v11), Fetch
# from v4 (isolation level and aborted transactions, what both fetch with) to
# v18 (v17 and v18 answer as v16 does)
PRODUCE_REQUEST_VERSIONS = range(3, 13)
PRODUCE_RESPONSE_VERSIONS = PRODUCE_REQUEST_VERSIONS
FETCH_REQUEST_VERSIONS = range(4, 18)
FETCH_RESPONSE_VERSIONS = range(4, 19)


def _field_shape(field, version: int):
    return (field.name, field.type, field.tag, field.is_nullable(version),
            repr(field.default(version)) if field.fields is None else
            tuple(_field_shape(f, version) for f in field.fields if f.present(version)))


def schema_fingerprint(message: Message, versions: range) -> str:
    """A digest of ``message``'s fields (names, types, tags, nullability,
    defaults) at each of ``versions``: what a hand-written twin relies on."""
    shape = tuple(tuple(_field_shape(f, v) for f in message.fields if f.present(v))
                  for v in versions)
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


# the fingerprints ext/produce_fetch.pyx was written and tested for
_WRITTEN_FOR = {
    ("request", ApiKey.PRODUCE): "16d65059eda2558a",
    ("request", ApiKey.FETCH): "27fb4b75f23449c1",
    ("response", ApiKey.FETCH): "cba25ef66c62f13f",        # v17-v18 are v16 (issue 70)
    ("response", ApiKey.PRODUCE): "7e54a92a5bf18f60",
}


def _matches(kind: str, api_key: int, versions: range) -> bool:
    table = REQUESTS if kind == "request" else RESPONSES
    return schema_fingerprint(table[api_key], versions) == _WRITTEN_FOR[(kind, api_key)]


_PRODUCE_OK = _matches("request", ApiKey.PRODUCE, PRODUCE_REQUEST_VERSIONS)
_FETCH_REQUEST_OK = _matches("request", ApiKey.FETCH, FETCH_REQUEST_VERSIONS)
_FETCH_OK = _matches("response", ApiKey.FETCH, FETCH_RESPONSE_VERSIONS)
_PRODUCE_RESPONSE_OK = _matches("response", ApiKey.PRODUCE, PRODUCE_RESPONSE_VERSIONS)


def _empty_body(codec: CompiledMessage) -> dict:
    """What the generated decoder gives for a request of no topics: the
    values of every field the version lacks or a client leaves unset."""
    out: list = []
    codec.encode({"max_wait_ms": 0, "min_bytes": 0}, out.append, None)
    frame = memoryview(b"".join(out))
    body, _ = codec.decode(frame, 0, len(frame), None)
    return body


def install(codec: CompiledMessage) -> bool:
    """Replace ``codec``'s generated decoder or encoder by its compiled twin
    if there is one; whether one was installed."""
    message, version = codec.message, codec.version
    if message.kind == "request" and message.api_key == ApiKey.PRODUCE:
        if _PRODUCE_OK and version in PRODUCE_REQUEST_VERSIONS:
            principal = next(f for f in message.fields if f.name == "request_principal")
            codec.decode = ProduceRequestDecoder(codec.flexible, codec.frames,
                                                 principal.default(version), codec.decode)
            return True
    elif message.kind == "request" and message.api_key == ApiKey.FETCH:
        if _FETCH_REQUEST_OK and version in FETCH_REQUEST_VERSIONS:
            codec.decode = FetchRequestDecoder(version, codec.flexible, _empty_body(codec),
                                               codec.decode)
            return True
    elif message.kind == "response" and message.api_key == ApiKey.PRODUCE:
        if _PRODUCE_RESPONSE_OK and version in PRODUCE_RESPONSE_VERSIONS:
            codec.encode = ProduceResponseEncoder(version, codec.flexible, codec.encode)
            return True
    elif message.kind == "response" and message.api_key == ApiKey.FETCH:
        if _FETCH_OK and version in FETCH_RESPONSE_VERSIONS:
            codec.encode = FetchResponseEncoder(version, codec.flexible, codec.frames, codec.encode,
                                                _byte_length)
            return True
    return False
