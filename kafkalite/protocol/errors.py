"""ProtocolError: what every malformed, truncated or unsupported frame raises.

It is a ``kafkalite.errors.InvalidRequestError`` (Kafka error 42), so a
server that lets it propagate answers the way Kafka does for a request it
cannot parse. Two attributes help a server answer better:

``header``
    The ``RequestHeader`` when the request header itself could be read (the
    failure was in the body, or the API version is unsupported), else None.
    Kafka answers an ApiVersions request of an unknown version with an
    ApiVersions v0 response carrying UNSUPPORTED_VERSION; that needs the
    correlation id from this header.
``code`` / ``name``
    42 INVALID_REQUEST, except 35 UNSUPPORTED_VERSION for a request of an
    API key kafkalite does not know or a version of it kafkalite does not
    implement: the bytes may be fine, this broker just does not speak them.
"""
from __future__ import annotations

from kafkalite.errors import InvalidRequestError

UNSUPPORTED_VERSION_CODE = 35


class ProtocolError(InvalidRequestError):
    """Malformed or truncated protocol bytes, or an unknown API key/version."""

    def __init__(self, message: str, *, header=None, unsupported_version: bool = False):
        super().__init__(message)
        self.header = header
        if unsupported_version:
            self.code = UNSUPPORTED_VERSION_CODE
            self.name = "UNSUPPORTED_VERSION"


class MalformedInput(Exception):
    """Raised inside decoders; the codec turns it into a located ProtocolError."""
