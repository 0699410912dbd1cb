"""Request and response headers, and which header version each API uses.

    RequestHeader v1  => request_api_key int16, request_api_version int16,
                         correlation_id int32, client_id NULLABLE_STRING
    RequestHeader v2  => v1, then a tagged-field section
    ResponseHeader v0 => correlation_id int32
    ResponseHeader v1 => correlation_id int32, then a tagged-field section

A request uses header v2 in the API's flexible versions and v1 otherwise
(v0, without client_id, only ever served ControlledShutdown v0, which
kafkalite does not implement). ``client_id`` keeps its int16 length even in
v2, so any broker can read the header of an ApiVersions request newer than
it knows. A response uses header v1 in flexible versions and v0 otherwise,
except ApiVersions, whose response header is v0 in every version (KIP-511):
a client must be able to read the error of a version the broker rejected.

The rule depends only on where flexible versions start, so it is defined
for versions beyond the supported range too (that is how a broker parses
the header of a too-new ApiVersions request to answer it).
"""
from __future__ import annotations

from typing import NamedTuple

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages import REQUESTS, RESPONSES


class RequestHeader(NamedTuple):
    """A decoded request header; ``api_key`` is an ApiKey when known."""

    api_key: ApiKey | int
    api_version: int
    correlation_id: int
    client_id: str | None


def _flexible_from(table, api_key: int) -> int | None:
    message = table.get(api_key)
    if message is None:
        raise ProtocolError(f"unknown API key {api_key}")
    flexible = message.flexible
    return flexible.low if flexible.low <= flexible.high else None


def request_header_version(api_key: int, api_version: int) -> int:
    """1 or 2: the RequestHeader version of this API at this version."""
    flexible_from = _flexible_from(REQUESTS, api_key)
    return 2 if flexible_from is not None and api_version >= flexible_from else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 or 1: the ResponseHeader version of this API at this version."""
    flexible_from = _flexible_from(RESPONSES, api_key)
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if flexible_from is not None and api_version >= flexible_from else 0
