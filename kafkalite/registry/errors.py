"""Confluent Schema Registry's error codes, as one exception type.

A REST answer's error body is ``{"error_code": N, "message": "..."}``,
its HTTP status N's first three digits (40401 -> 404): the body and the
status are confluent_http.ConfluentError's, shared with the REST proxy.

Who may call: every module of the registry; rest.py turns them into
answers.
"""
from __future__ import annotations

from kafkalite.confluent_http import ConfluentError

# error_code -> what Confluent's reference calls it (and so the HTTP status)
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMA_VERSION_SOFT_DELETED = 40406
SCHEMA_VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_LEVEL_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
STORE_ERROR = 50001
STORE_TIMEOUT = 50002
FORWARDING_ERROR = 50003           # "Error while forwarding the request to the primary"
UNKNOWN_LEADER = 50004             # the write reached a registry that no longer leads
INTERNAL_ERROR = 500               # rest-utils' answer to an unexpected exception


class RegistryError(ConfluentError):
    """An answer with Confluent's ``error_code`` and a readable message."""


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version) -> RegistryError:
    return RegistryError(VERSION_NOT_FOUND, f"Version {version} not found in subject '{subject}'.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(SCHEMA_NOT_FOUND, what)
