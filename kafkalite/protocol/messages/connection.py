"""Connection setup: version discovery and SASL authentication."""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response

# ApiVersions, API key 18. v1: throttle_time_ms. v3: flexible (KIP-482) and
# the client's software name and version (KIP-511). The response header stays
# v0 in every version so a client can read the error of a version it guessed
# wrong; on UNSUPPORTED_VERSION the broker answers with a v0 body listing its
# versions. v4: the body is v3's; a v4 client can read a supported feature
# whose min_version is 0, which a v3 answer leaves out (KAFKA-17011: older
# Java clients refuse such a range).
ApiVersionsRequest = Request(ApiKey.API_VERSIONS, "0-4", flexible="3+", fields=[
    Field("client_software_name", "string", "3+"),
    Field("client_software_version", "string", "3+"),
])
ApiVersionsResponse = Response(ApiKey.API_VERSIONS, "0-4", flexible="3+", fields=[
    Field("error_code", "int16"),
    Array("api_keys", fields=[
        Field("api_key", "int16"),
        Field("min_version", "int16"),
        Field("max_version", "int16"),
    ]),
    Field("throttle_time_ms", "int32", "1+"),
    Array("supported_features", "3+", tag=0, fields=[
        Field("name", "string"),
        Field("min_version", "int16"),
        Field("max_version", "int16"),
    ]),
    Field("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
    Array("finalized_features", "3+", tag=2, fields=[
        Field("name", "string"),
        Field("max_version_level", "int16"),
        Field("min_version_level", "int16"),
    ]),
    Field("zk_migration_ready", "bool", "3+", tag=3),
])

# SaslHandshake, API key 17. v1: the mechanism is followed by SaslAuthenticate
# requests instead of raw SASL tokens on the socket (KIP-152).
SaslHandshakeRequest = Request(ApiKey.SASL_HANDSHAKE, "0-1", flexible="none", fields=[
    Field("mechanism", "string"),
])
SaslHandshakeResponse = Response(ApiKey.SASL_HANDSHAKE, "0-1", flexible="none", fields=[
    Field("error_code", "int16"),
    Field("mechanisms", "[]string"),
])

# SaslAuthenticate, API key 36. v1: session_lifetime_ms (KIP-368). v2:
# flexible.
SaslAuthenticateRequest = Request(ApiKey.SASL_AUTHENTICATE, "0-2", flexible="2+", fields=[
    Field("auth_bytes", "bytes"),
])
SaslAuthenticateResponse = Response(ApiKey.SASL_AUTHENTICATE, "0-2", flexible="2+", fields=[
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Field("auth_bytes", "bytes"),
    Field("session_lifetime_ms", "int64", "1+"),
])
