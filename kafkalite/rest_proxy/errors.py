"""Confluent REST Proxy's error codes and error bodies.

An error answer is ``{"error_code": N, "message": "..."}``; its HTTP
status is N itself when N is an HTTP status (404, 406, 415) and N's first
three digits otherwise (40401 is a 404, 42201 a 422), as Confluent's
``RestException`` does (confluent_http.ConfluentError, shared with the
schema registry). In v3's streaming mode an error of one record is
that record's answer and the HTTP status stays 200.

Who may call: any module of the proxy, from any thread.
"""
from __future__ import annotations

from kafkalite.confluent_http import ConfluentError

# Confluent's codes (kafka-rest's Errors and v3's error codes)
BAD_REQUEST = 400
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
NOT_ACCEPTABLE = 406
PAYLOAD_TOO_LARGE = 413
UNSUPPORTED_MEDIA_TYPE = 415
INVALID_CONSUMER_CONFIG_CONSTRAINT = 40001   # a consumer setting out of its range
TOPIC_ALREADY_EXISTS = 40002
KAFKA_BAD_REQUEST = 40002       # rest-utils' KAFKA_BAD_REQUEST_ERROR_CODE (an invalid config ...)
AUTHORIZATION_FAILED = 40301    # rest-utils' KAFKA_AUTHORIZATION_ERROR_CODE: HTTP 403
TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CONSUMER_INSTANCE_NOT_FOUND = 40403
CONSUMER_FORMAT_MISMATCH = 40601
CONSUMER_ALREADY_EXISTS = 40902
ILLEGAL_STATE = 40903           # kafka-rest's ILLEGAL_STATE_ERROR_CODE: HTTP 409
UNPROCESSABLE_ENTITY = 422      # rest-utils' RestConstraintViolationException.DEFAULT_ERROR_CODE
INVALID_CONSUMER_CONFIG = 42204
INVALID_BINARY_DATA = 42205      # v2 produce: data not base64
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003
INTERNAL_ERROR = 500


class ProxyError(ConfluentError):
    """An error answered as Confluent's body."""


class ConstraintViolation(ProxyError):
    """rest-utils' RestConstraintViolationException: HTTP 422 whatever its
    error_code (ConstraintViolationExceptionMapper answers every one 422)."""

    @property
    def http_status(self) -> int:
        return UNPROCESSABLE_ENTITY


def topic_not_found(topic: str) -> ProxyError:
    return ProxyError(TOPIC_NOT_FOUND, f"This server does not host this topic-partition. "
                                       f"Topic not found: {topic}")


# the errors rest-utils' KafkaExceptionMapper answers 400 (KAFKA_BAD_REQUEST_ERROR_CODE)
_BAD_REQUESTS = frozenset(("InvalidConfigurationError", "InvalidRequestError",
                           "PolicyViolationError", "InvalidPartitionsError",
                           "InvalidReplicationFactorError", "TopicAlreadyExistsError",
                           "UnsupportedVersionError"))


def from_kafka(exc: Exception) -> ProxyError:
    """A kafkalite client error as Confluent answers it: retriable ones 50003,
    the others 50002, an unknown topic 40401, a request Kafka refused as
    invalid (a config, a policy) 40002."""
    name = type(exc).__name__
    if name == "UnknownTopicOrPartitionError":
        return ProxyError(TOPIC_NOT_FOUND, str(exc) or "Topic not found.")
    if name in _BAD_REQUESTS:
        return ProxyError(KAFKA_BAD_REQUEST, f"{name}: {exc}")
    retriable = bool(getattr(exc, "retriable", False))
    return ProxyError(KAFKA_RETRIABLE_ERROR if retriable else KAFKA_ERROR, f"{name}: {exc}")
