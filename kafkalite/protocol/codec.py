"""Encoding and decoding whole requests and responses (header + body).

Main entry points: ``encode_request`` / ``decode_request`` (what a client
sends and a broker reads) and ``encode_response`` / ``decode_response``
(the way back; ``encode_response_parts`` for a TCP broker that splices
file regions into fetch responses), plus the consumer protocol's embedded Subscription and
Assignment. Output and input are one frame without the int32 size prefix of
the TCP wire; framing is the transport's job.

Compiled codecs are cached per (api key, version, records mode), filled on
first use; a message without records fields shares one codec between modes.
ProduceRequest's decoder and FetchResponse's encoder run compiled twins of
the generated code (ext_codecs.py), falling back to it for what they do not take.
Callable from any thread: a race at most compiles a codec twice.
"""
from __future__ import annotations

import struct

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.compiler import DECODE_ERRORS, ENCODE_ERRORS, CompiledMessage
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.ext_codecs import install as install_compiled_twin
from kafkalite.protocol.headers import RequestHeader, request_header_version, response_header_version
from kafkalite.protocol.messages import (
    REQUESTS,
    RESPONSES,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafkalite.protocol.schema import Message
from kafkalite.protocol.types import skip_tagged_fields

_REQUEST_PREFIX = struct.Struct(">hhih")  # api key, api version, correlation id, client_id length
_pack_request_prefix = struct.Struct(">hhi").pack
_unpack_request_prefix = _REQUEST_PREFIX.unpack_from
_unpack_prefix = struct.Struct(">hhi").unpack_from
_pack_int16 = struct.Struct(">h").pack
_pack_int32 = struct.Struct(">i").pack
_pack_int32_into = struct.Struct(">i").pack_into
_SIZE_PLACEHOLDER = b"\0\0\0\0"     # encode_response_wire writes the size there
_unpack_int16 = struct.Struct(">h").unpack_from
_unpack_int32 = struct.Struct(">i").unpack_from

_API_KEYS = {int(key): key for key in ApiKey}
_new_tuple = tuple.__new__

# (api key, version, records in frames) -> CompiledMessage
_REQUEST_CODECS: dict[tuple[int, int, bool], CompiledMessage] = {}
_RESPONSE_CODECS: dict[tuple[int, int, bool], CompiledMessage] = {}
_DATA_CODECS: dict[tuple[str, int], CompiledMessage] = {}


def _has_records(fields) -> bool:
    return any(f.type == "records" or (f.fields is not None and _has_records(f.fields)) for f in fields)


def _compile(cache, table, api_key: int, api_version: int, frames: bool, header=None) -> CompiledMessage:
    message = table.get(api_key)
    if message is None:
        raise ProtocolError(f"unknown API key {api_key}", header=header, unsupported_version=True)
    if api_version not in message.versions:
        raise ProtocolError(
            f"{message.name} v{api_version} is not supported (kafkalite implements "
            f"v{message.versions.low}-{message.versions.high})",
            header=header, unsupported_version=True)
    if frames and not _has_records(message.fields):
        codec = _compile(cache, table, api_key, api_version, False)
    else:
        codec = CompiledMessage(message, api_version, frames)
        install_compiled_twin(codec)
        if message.kind == "request":
            codec.header_version = request_header_version(api_key, api_version)
        else:
            codec.header_version = response_header_version(api_key, api_version)
    cache[(api_key, api_version, frames)] = codec
    return codec


def _view(buf) -> memoryview:
    view = buf if type(buf) is memoryview else memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _skip_header_tags(view: memoryview, pos: int, end: int, what: str, header=None) -> int:
    if pos < end and view[pos] == 0:
        return pos + 1
    try:
        return skip_tagged_fields(view, pos, end)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"{what}: bad tagged fields at byte {pos} ({exc or 'truncated'})",
                            header=header) from exc


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: dict, *, records_out: list | None = None) -> bytes:
    """Request header + body. With ``records_out``, records values are
    appended to it and the frame carries their indexes instead."""
    frames = records_out is not None
    codec = (_REQUEST_CODECS.get((api_key, api_version, frames))
             or _compile(_REQUEST_CODECS, REQUESTS, api_key, api_version, frames))
    try:
        out = [_pack_request_prefix(api_key, api_version, correlation_id)]
        if client_id is None:
            out.append(b"\xff\xff")
        else:
            encoded = client_id.encode()
            out.append(_pack_int16(len(encoded)))
            out.append(encoded)
    except ENCODE_ERRORS as exc:
        raise ProtocolError(f"{codec.label}: cannot encode request header: {exc}") from exc
    if codec.header_version == 2:
        out.append(b"\x00")
    _encode_body(codec, body, out, records_out)
    return b"".join(out)


def decode_request(buf, *, records_in: list | None = None,
                   ignore_trailing: bool = False) -> tuple[RequestHeader, dict]:
    """(header, body) of one request frame. With ``records_in``, records
    fields hold frame indexes and decode to ``records_in[index]``.
    ``ignore_trailing`` accepts bytes after the body, as Kafka's broker does
    (librdkafka 2.x sends Metadata v11+ with a stray field and tag)."""
    view = _view(buf)
    end = len(view)
    try:
        api_key, api_version, correlation_id, size = _unpack_request_prefix(view, 0)
    except struct.error:
        raise ProtocolError(f"request header truncated: {end} bytes, at least 10 needed") from None
    pos = 10
    if size >= 0:
        pos += size
        if pos > end:
            raise ProtocolError(f"request header: client_id of {size} bytes runs past the end ({end} bytes)")
        try:
            client_id = str(view[10:pos], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"request header: client_id is not UTF-8 ({exc.reason})") from exc
    elif size == -1:
        client_id = None
    else:
        raise ProtocolError(f"request header: invalid client_id length {size}")
    frames = records_in is not None
    codec = _REQUEST_CODECS.get((api_key, api_version, frames))
    if codec is None:
        header = RequestHeader(_API_KEYS.get(api_key, api_key), api_version, correlation_id, client_id)
        codec = _compile(_REQUEST_CODECS, REQUESTS, api_key, api_version, frames, header=header)
    header = RequestHeader(codec.message.api_key, api_version, correlation_id, client_id)
    if codec.header_version == 2:
        pos = _skip_header_tags(view, pos, end, f"{codec.label} header", header)
    return header, _decode_body(codec, view, pos, end, records_in, header, ignore_trailing)


def peek_request_header(buf) -> RequestHeader | None:
    """The api key, version and correlation id of a request frame, read
    from its first 8 bytes without decoding anything else (client_id is
    None); None when the frame is shorter. A broker uses it to route a
    request it will not decode itself."""
    if len(buf) < 8:
        return None
    api_key, api_version, correlation_id = _unpack_prefix(buf, 0)
    # made as a tuple: a NamedTuple's generated __new__ is a Python call, and
    # a broker peeks at every request it reads
    return _new_tuple(RequestHeader, (_API_KEYS.get(api_key, api_key), api_version,
                                      correlation_id, None))


def _response_parts(api_key: int, api_version: int, correlation_id: int, body: dict,
                    records_out: list | None) -> list:
    frames = records_out is not None
    codec = (_RESPONSE_CODECS.get((api_key, api_version, frames))
             or _compile(_RESPONSE_CODECS, RESPONSES, api_key, api_version, frames))
    try:
        out = [_pack_int32(correlation_id)]
    except ENCODE_ERRORS as exc:
        raise ProtocolError(f"{codec.label}: cannot encode correlation id: {exc}") from exc
    if codec.header_version == 1:
        out.append(b"\x00")
    _encode_body(codec, body, out, records_out)
    return out


def encode_response(api_key: int, api_version: int, correlation_id: int, body: dict, *,
                    records_out: list | None = None) -> bytes:
    """Response header + body; ``records_out`` as for ``encode_request``."""
    return b"".join(_response_parts(api_key, api_version, correlation_id, body, records_out))


def encode_response_parts(api_key: int, api_version: int, correlation_id: int,
                          body: dict) -> tuple[list, int]:
    """(parts, total size) of a response for the TCP wire, records inline.

    Unlike ``encode_response`` the parts are not joined: each records value
    is one part, as given, after its length prefix. That is how a broker
    sends fetched batches without copying them: a records value may be a
    file region (an object with ``length`` and ``sendfile(fd)``, such as
    ``kafkalite.storage.segment.FileRegion``), which the transport writes
    with sendfile. Every other part is bytes-like.
    """
    out = _response_parts(api_key, api_version, correlation_id, body, None)
    total = 0
    for part in out:
        total += len(part) if type(part) is bytes else _part_length(part)
    return out, total


def encode_response_wire(api_key: int, api_version: int, correlation_id: int, body: dict) -> list:
    """A response as the TCP wire carries it: the int32 size, then the
    response header and body, records inline.

    When no records value is a file region -- every response but a fetch
    served from segment files -- it is one ``bytearray``, joined in a
    single copy with its size written in place: a broker answering many
    small requests (librdkafka's Produce requests carry a few partitions
    each) spends nothing per part in Python. Otherwise the parts are as
    ``encode_response_parts`` gives them, after the size prefix.
    """
    out = [_SIZE_PLACEHOLDER]
    out += _response_parts(api_key, api_version, correlation_id, body, None)
    try:
        frame = bytearray().join(out)
    except TypeError:       # a file region: not bytes-like, left to the transport
        total = 0
        for part in out:
            total += len(part) if type(part) is bytes else _part_length(part)
        out[0] = _pack_int32(total - 4)
        return out
    _pack_int32_into(frame, 0, len(frame) - 4)
    return [frame]


def _part_length(part) -> int:
    if hasattr(part, "sendfile"):   # a file region: no exception raised per region to tell
        return part.length
    return memoryview(part).nbytes


def decode_response(api_key: int, api_version: int, buf, *,
                    records_in: list | None = None) -> tuple[int, dict]:
    """(correlation id, body) of one response frame to a request of this
    API and version; ``records_in`` as for ``decode_request``."""
    frames = records_in is not None
    codec = (_RESPONSE_CODECS.get((api_key, api_version, frames))
             or _compile(_RESPONSE_CODECS, RESPONSES, api_key, api_version, frames))
    view = _view(buf)
    end = len(view)
    try:
        correlation_id, = _unpack_int32(view, 0)
    except struct.error:
        raise ProtocolError(f"{codec.label}: response header truncated: {end} bytes") from None
    pos = 4
    if codec.header_version == 1:
        pos = _skip_header_tags(view, pos, end, f"{codec.label} header")
    try:
        return correlation_id, _decode_body(codec, view, pos, end, records_in, None)
    except ProtocolError:
        # A broker that does not support the ApiVersions version asked for
        # answers UNSUPPORTED_VERSION with a v0 body (KIP-511); like Kafka's
        # client, fall back to reading v0 when the version asked for fails.
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        fallback = _RESPONSE_CODECS.get((api_key, 0, False)) or _compile(
            _RESPONSE_CODECS, RESPONSES, api_key, 0, False)
        return correlation_id, _decode_body(fallback, view, pos, end, None, None)


def _encode_body(codec: CompiledMessage, body: dict, out: list, records_out: list | None) -> None:
    mark = len(records_out) if records_out is not None else 0
    try:
        codec.encode(body, out.append, records_out)
    except ENCODE_ERRORS as exc:
        if records_out is not None:
            del records_out[mark:]
        raise codec.error(exc, encoding=True) from exc


def _decode_body(codec: CompiledMessage, view: memoryview, pos: int, end: int, records_in, header,
                 ignore_trailing: bool = False) -> dict:
    try:
        body, pos = codec.decode(view, pos, end, records_in)
    except DECODE_ERRORS as exc:
        raise codec.error(exc, encoding=False, buf_len=end, header=header) from exc
    if pos != end and not ignore_trailing:
        raise ProtocolError(f"{codec.label}: {end - pos} unexpected bytes after the body at byte {pos}",
                            header=header)
    return body


# The consumer protocol's embedded schemas: int16 version, then the body.

def _data_codec(message: Message, version: int) -> CompiledMessage:
    codec = _DATA_CODECS.get((message.name, version))
    if codec is None:
        if version not in message.versions:
            raise ProtocolError(f"{message.name} v{version} does not exist "
                                f"(v{message.versions.low}-{message.versions.high})")
        codec = _DATA_CODECS[(message.name, version)] = CompiledMessage(message, version, False)
    return codec


def _encode_data(message: Message, version: int, body: dict) -> bytes:
    codec = _data_codec(message, version)
    out = [_pack_int16(version)]
    _encode_body(codec, body, out, None)
    return b"".join(out)


def _decode_data(message: Message, buf) -> tuple[int, dict]:
    view = _view(buf)
    end = len(view)
    try:
        version, = _unpack_int16(view, 0)
    except struct.error:
        raise ProtocolError(f"{message.name}: truncated version ({end} bytes)") from None
    if version < message.versions.low:
        raise ProtocolError(f"{message.name}: invalid version {version}")
    # A newer version only appends fields: read it as our newest, ignore the rest.
    codec = _data_codec(message, min(version, message.versions.high))
    try:
        body, _ = codec.decode(view, 2, end, None)
    except DECODE_ERRORS as exc:
        raise codec.error(exc, encoding=False, buf_len=end) from exc
    return version, body


def encode_subscription(version: int, body: dict) -> bytes:
    """A consumer protocol Subscription (JoinGroup protocol metadata)."""
    return _encode_data(ConsumerProtocolSubscription, version, body)


def decode_subscription(buf) -> tuple[int, dict]:
    """(version, body) of a Subscription; versions above 3 read as v3."""
    return _decode_data(ConsumerProtocolSubscription, buf)


def encode_assignment(version: int, body: dict) -> bytes:
    """A consumer protocol Assignment (SyncGroup member assignment)."""
    return _encode_data(ConsumerProtocolAssignment, version, body)


def decode_assignment(buf) -> tuple[int, dict]:
    """(version, body) of an Assignment; versions above 3 read as v3."""
    return _decode_data(ConsumerProtocolAssignment, buf)


def encode_data(message: Message, version: int, body: dict) -> bytes:
    """A standalone versioned structure (int16 version + fields), such as
    the records of ``__consumer_offsets`` (messages/group_records.py)."""
    return _encode_data(message, version, body)


def decode_data(message: Message, buf) -> tuple[int, dict]:
    """(version, body) of a structure written by ``encode_data``; a newer
    version than ``message`` knows is read as its newest."""
    return _decode_data(message, buf)
