"""kafkalite's native protocol over ZeroMQ: the framing rules shared by the
supervisor, the workers and the clients (full description: docs/protocol.md).

A request is a ZeroMQ multipart message from a DEALER to a ROUTER:

    frame 0      Kafka request header + body (kafkalite.protocol), in which
                 every `records` field holds an INT32 frame index (-1: null)
    frames 1..n  the record batch bytes those indexes name, untouched

A response mirrors it: [Kafka response header + body, record frames...].
Requests with acks=0 get no response.

Two additions to Kafka's protocol:
- error reply: when the server cannot answer in the request's own schema
  (unknown API, unsupported version, an internal failure), it replies with
  two frames: the 1-byte frame b"!" and INT32 correlation id, INT16 error
  code, UTF-8 message. A normal response's frame 0 is never 1 byte long.
- extension requests (API key 32000): INT16 api key, INT16 version (0),
  INT32 correlation id, then a UTF-8 JSON object with an "op" field;
  answered with INT32 correlation id + a JSON object ({"error_code": 0, ...}).
  Used for what Kafka has no message for, such as attaching a shared-memory
  ring ({"op": "shm_attach", "ring": "<name>"}).

Finding the native endpoint from a Kafka listener's address: every Kafka
listener answers DescribeConfigs of a BROKER resource with the read-only
config ``NATIVE_BOOTSTRAP_CONFIG`` (the supervisor's native host:port), so
a native client given ``host:9092`` asks there and connects to the native
port (client/bootstrap.py). Which protocol an address speaks shows in its
first bytes: a ZeroMQ peer sends the ZMTP signature as soon as a TCP
connection opens (``zmtp_signature``), a Kafka broker sends nothing until
asked, and a ZMTP signature's first byte (0xFF) would be a negative Kafka
frame size.
"""
from __future__ import annotations

import json
import struct

EXTENSION_API_KEY = 32000
ERROR_FRAME = b"!"
_EXT_HEADER = struct.Struct(">hhi")
_ERROR_HEADER = struct.Struct(">ih")
_CORRELATION = struct.Struct(">i")

# The read-only broker config (DescribeConfigs, resource type BROKER) that
# names the native protocol's bootstrap address, host:port.
NATIVE_BOOTSTRAP_CONFIG = "kafkalite.native.bootstrap.servers"
# ZMTP 3 (rfc.zeromq.org/spec/23): a greeting opens with a 10-byte signature,
# 0xFF, 8 padding bytes, 0x7F; libzmq tells a ZMTP >= 2 peer by byte 0 being
# 0xFF and bit 0 of byte 9 being set.
ZMTP_SIGNATURE_SIZE = 10


def zmtp_signature(buf) -> bool | None:
    """Whether ``buf`` (the first bytes read from a TCP peer) opens with a
    ZMTP signature; None while too few bytes have come to tell."""
    if not buf or buf[0] != 0xFF:
        return False
    if len(buf) < ZMTP_SIGNATURE_SIZE:
        return None
    return bool(buf[9] & 0x01)


# The whole ZMTP 3 greeting: signature, version (3.x), the security mechanism's
# name padded to 20 bytes, as-server, filler. A peer sends the rest of its own
# once it has read another's signature and major version (GREETING_START):
# sent alone, they ask a peer its mechanism without offering one (libzmq,
# reading a whole greeting whose mechanism differs from its own at once,
# closes before its own greeting's rest is out).
ZMTP_GREETING_SIZE = 64
GREETING_START = b"\xff" + bytes(8) + b"\x7f" + b"\x03"


def zmtp_mechanism(greeting) -> str | None:
    """The security mechanism a ZMTP 3 peer's ``greeting`` names ("NULL",
    "PLAIN", "CURVE"), or None if it is not a whole ZMTP 3 greeting."""
    if len(greeting) < ZMTP_GREETING_SIZE or not zmtp_signature(greeting) or greeting[10] < 3:
        return None
    return bytes(greeting[12:32]).rstrip(b"\x00").decode("ascii", "replace")


def encode_error(correlation_id: int, code: int, message: str = "") -> bytes:
    return _ERROR_HEADER.pack(correlation_id, code) + message.encode("utf-8", "replace")


def decode_error(buf) -> tuple[int, int, str]:
    correlation_id, code = _ERROR_HEADER.unpack_from(buf)
    return correlation_id, code, bytes(buf[_ERROR_HEADER.size:]).decode("utf-8", "replace")


def is_extension_request(buf) -> bool:
    return len(buf) >= 2 and buf[0] == (EXTENSION_API_KEY >> 8) and buf[1] == (EXTENSION_API_KEY & 0xFF)


def encode_extension_request(correlation_id: int, body: dict) -> bytes:
    return _EXT_HEADER.pack(EXTENSION_API_KEY, 0, correlation_id) + json.dumps(body).encode()


def decode_extension_request(payload: bytes) -> tuple[int, dict]:
    """(correlation id, JSON body); ValueError/struct.error when malformed."""
    _, version, correlation_id = _EXT_HEADER.unpack_from(payload)
    body = json.loads(payload[_EXT_HEADER.size:])
    if not isinstance(body, dict) or not isinstance(body.get("op"), str):
        raise ValueError("an extension request is a JSON object with an \"op\"")
    return correlation_id, body


def encode_extension_response(correlation_id: int, body: dict) -> bytes:
    return _CORRELATION.pack(correlation_id) + json.dumps(body).encode()


def decode_extension_response(buf) -> tuple[int, dict]:
    (correlation_id,) = _CORRELATION.unpack_from(buf)
    return correlation_id, json.loads(bytes(buf[4:]))
