"""The Kafka protocol codec: request and response frames to dicts and back.

Used by kafkalite's native transport (Kafka request/response bodies in
ZeroMQ multipart messages) and by the Kafka wire protocol over TCP. The
message definitions (``messages/``) are kafkalite's own, written from
Kafka's JSON message specs in a small DSL (``schema.py``); ``compiler.py``
turns each message version into generated straight-line Python.

Bodies
    Plain dicts keyed by the snake_case of Kafka's field names
    ("TopicData" -> "topic_data"); arrays of structs are lists of dicts,
    arrays of primitives are lists. Encoding, a missing field takes its
    default (the schema's, else None where the version allows null, else
    0 / False / "" / b"" / [] / the zero UUID / a struct of defaults),
    fields the version lacks are ignored, and a key the schema does not
    have in any version raises ProtocolError (a typo must not become a
    silently wrong answer). Decoding returns every field of
    the schema: those the version lacks hold their defaults, so callers read
    any field whatever the version. Unknown tagged fields are skipped; a
    tagged field is written only when its value differs from its default.

Types
    int8..int64, uint16, uint32, float64 -> int / float; bool -> bool;
    string -> str; bytes -> bytes (encode accepts any bytes-like); uuid ->
    ``uuid.UUID`` (encode also accepts 16 raw bytes); records -> see below.

Records and frames
    ``records`` fields (Produce request, Fetch response) hold record batches.
    Without ``records_out``/``records_in`` they are encoded as Kafka does
    (nullable bytes, compact when flexible) and decode to a memoryview slice
    of the input: no copy. Over ZeroMQ the batches travel in frames of their
    own: pass a list as ``records_out`` and the encoder appends each records
    value to it (as given, uncopied) and writes its index in that list as an
    int32 in place of the bytes (-1 for None), in every version; send the
    list's items as the frames after the body frame. On receipt pass those
    frames as ``records_in`` and each index decodes to ``records_in[index]``
    (the very object given: a zmq.Frame buffer stays uncopied).
    ``encode_response_parts`` keeps records inline but unjoined, and also
    accepts a file region (``length`` + ``sendfile``) as a records value, so
    a TCP transport can sendfile fetched batches straight from the log;
    ``encode_response_wire`` gives the same with the TCP wire's size
    prefix, joined into one buffer when no records value is a file region.

Frames
    Encoders return the header followed by the body, without the int32 size
    prefix of the TCP wire; decoders expect the same and reject trailing
    bytes. Header versions follow Kafka (see ``headers.py``): ApiVersions
    responses always use header v0.

Errors
    Malformed or truncated input, unknown API keys and unsupported versions
    raise ``ProtocolError`` (a ``kafkalite.errors.InvalidRequestError``) whose
    message names the message, field and byte offset; it never surfaces as
    IndexError or struct.error, and no length or count in the input is
    trusted before it is checked against the bytes present. ``.header``
    carries the request header when it could be read, ``.code`` is 35
    (UNSUPPORTED_VERSION) for a version kafkalite does not implement.
    Encoding a body that does not fit the schema raises ProtocolError too.
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from kafkalite.protocol.codec import (
    decode_assignment,
    decode_request,
    decode_response,
    decode_subscription,
    encode_assignment,
    encode_request,
    encode_response,
    encode_response_parts,
    encode_response_wire,
    encode_subscription,
    peek_request_header,
)
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.headers import RequestHeader, request_header_version, response_header_version

__all__ = [
    "ApiKey",
    "SUPPORTED_VERSIONS",
    "RequestHeader",
    "encode_request",
    "decode_request",
    "peek_request_header",
    "encode_response",
    "encode_response_parts",
    "encode_response_wire",
    "decode_response",
    "request_header_version",
    "response_header_version",
    "ProtocolError",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
]
