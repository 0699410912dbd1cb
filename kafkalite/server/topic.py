"""Topic names: Kafka's internal topics and the rules a topic's name
follows (Kafka's ``common.internals.Topic``).

Who may call: every broker process (the controller validates and refuses,
the replica manager refuses client writes to internal topics, the
coordinators name their logs). Imports only kafkalite.errors: it sits
below every folder of server/.
"""
from __future__ import annotations

from kafkalite import errors
from kafkalite.errors import InvalidTopicError

# Kafka's internal topics (its Topic.isInternal): the group coordinator's
# committed offsets and group metadata, and the transaction coordinator's
# transaction log. Defined here, below the controller and the coordinators,
# so that every one of them checks the same set.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})
MAX_TOPIC_NAME = 249
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_topic_name(name) -> str:
    """Kafka's topic name rules; InvalidTopicError says which one is broken."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is "
                                f"{MAX_TOPIC_NAME}")
    bad = sorted(set(name) - _LEGAL)
    if bad:
        raise InvalidTopicError(f"topic name {name!r} contains {''.join(bad)!r}: only ASCII "
                                f"letters, digits, '.', '_' and '-' are allowed")
    return name


def refuse_internal(name: str, verb: str) -> None:
    """No client may delete, grow or alter an internal topic (``verb``: what it asked)."""
    if name in INTERNAL_TOPICS:
        raise errors.TopicAuthorizationFailedError(
            f"{name} is an internal topic: only the broker may {verb} it")
