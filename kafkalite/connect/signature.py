"""Signed internal requests between the workers of a Connect cluster
(Kafka's KIP-507: SessionKey, InternalRequestSignature).

The group's leader generates a session key and writes it to the config
topic, key ``session-key``, value ``{"key": <base64>, "algorithm":
<inter.worker.key.generation.algorithm>, "creation-timestamp": <ms>}``;
every worker reads it there. An internal request (a connector's owner
handing its task configs to the leader, ``POST /connectors/{name}/tasks``)
carries the HMAC of its body under that key: header ``SIGNATURE_HEADER``
(base64) and ``ALGORITHM_HEADER`` (``inter.worker.signature.algorithm``).
The receiver refuses a request without them (400, Kafka's "Internal request
missing required signature"), signed with an algorithm outside
``inter.worker.verification.algorithms`` (400) or with another key (403,
"Internal request contained invalid signature."). The leader makes a new
key every ``inter.worker.key.ttl.ms`` (default one hour); a request signed
with the old one meets a 403 and its sender signs it again once it has read
the new key.

HMAC through the standard library's hmac/hashlib; Kafka's Java algorithm
names map to hashlib digests (``ALGORITHMS``). The key is as secret as the
config topic is (Kafka keeps it there too).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from kafkalite.connect.errors import BadRequestException, ForbiddenException

SIGNATURE_HEADER = "X-Connect-Authorization"
ALGORITHM_HEADER = "X-Connect-Request-Signature-Algorithm"
SESSION_KEY = "session-key"          # the config topic's key of the session key record

# Kafka's (javax.crypto) Mac names -> hashlib digests
ALGORITHMS = {"HmacSHA1": hashlib.sha1, "HmacSHA224": hashlib.sha224,
              "HmacSHA256": hashlib.sha256, "HmacSHA384": hashlib.sha384,
              "HmacSHA512": hashlib.sha512}
DEFAULT_ALGORITHM = "HmacSHA256"
DEFAULT_KEY_TTL_MS = 3_600_000

MISSING_SIGNATURE = "Internal request missing required signature"
INVALID_SIGNATURE = "Internal request contained invalid signature."


@dataclass(frozen=True)
class SessionKey:
    """The cluster's current key (Kafka's SessionKey)."""
    key: bytes
    algorithm: str
    creation_timestamp: int          # ms since the epoch

    @classmethod
    def generate(cls, algorithm: str = DEFAULT_ALGORITHM, size_bits: int | None = None,
                 now_ms: int | None = None) -> "SessionKey":
        """A random key of ``inter.worker.key.size`` bits (None: the
        digest's output size, 256 bits for HmacSHA256 as in Kafka)."""
        digest = _digest(algorithm)
        size = size_bits // 8 if size_bits else digest().digest_size
        return cls(secrets.token_bytes(size), algorithm,
                   int(time.time() * 1000) if now_ms is None else now_ms)

    def record(self) -> dict:
        return {"key": base64.b64encode(self.key).decode(), "algorithm": self.algorithm,
                "creation-timestamp": self.creation_timestamp}

    @classmethod
    def from_record(cls, value: dict) -> "SessionKey":
        return cls(base64.b64decode(value["key"]), value["algorithm"],
                   int(value["creation-timestamp"]))

    def expired(self, ttl_ms: int, now_ms: int | None = None) -> bool:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return now_ms >= self.creation_timestamp + ttl_ms


def _digest(algorithm: str):
    try:
        return ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"unknown signature algorithm {algorithm!r}: one of "
                         f"{', '.join(ALGORITHMS)}") from None


def sign(key: SessionKey, algorithm: str, body: bytes) -> dict:
    """The headers of an internal request with ``body``."""
    mac = hmac.new(key.key, body, _digest(algorithm)).digest()
    return {SIGNATURE_HEADER: base64.b64encode(mac).decode(), ALGORITHM_HEADER: algorithm}


def verify(key: SessionKey | None, headers, body: bytes, accepted: list[str]) -> None:
    """Refuse an internal request not signed with ``key`` (Kafka's
    DistributedHerder.requestNotSignedProperly): BadRequestException (400)
    without a signature or with an algorithm outside ``accepted``,
    ForbiddenException (403) for a wrong one (or while this worker has read
    no key yet: nothing it could check the request against)."""
    signature, algorithm = headers.get(SIGNATURE_HEADER), headers.get(ALGORITHM_HEADER)
    if not signature or not algorithm:
        raise BadRequestException(MISSING_SIGNATURE)
    if algorithm not in accepted:
        raise BadRequestException(
            f"This worker does not support the '{algorithm}' key signing algorithm used by "
            f"other workers. This worker is currently configured to use: {accepted}. Check "
            f"that all workers' configuration files permit the same set of signature "
            f"algorithms, and correct any misconfigured worker and restart it.")
    try:
        given = base64.b64decode(signature, validate=True)
    except ValueError:
        raise ForbiddenException(INVALID_SIGNATURE) from None
    if key is None or algorithm not in ALGORITHMS or not hmac.compare_digest(
            hmac.new(key.key, body, ALGORITHMS[algorithm]).digest(), given):
        raise ForbiddenException(INVALID_SIGNATURE)
