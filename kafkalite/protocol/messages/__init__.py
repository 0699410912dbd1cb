"""kafkalite's definitions of Kafka's messages, one module per area.

``REQUESTS`` and ``RESPONSES`` map each ApiKey to its schema. Each schema
covers exactly the versions in ``SUPPORTED_VERSIONS`` (checked at import).
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from kafkalite.protocol.messages import (admin, cluster, connection, fetch, groups, metadata,
                                         produce, share_state, shares, transactions)
from kafkalite.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafkalite.protocol.schema import Message

REQUESTS: dict[ApiKey, Message] = {}
RESPONSES: dict[ApiKey, Message] = {}

for _module in (connection, metadata, produce, fetch, groups, transactions, admin, cluster,
                shares, share_state):
    for _message in vars(_module).values():
        if isinstance(_message, Message):
            (REQUESTS if _message.kind == "request" else RESPONSES)[_message.api_key] = _message

for _key, (_low, _high) in SUPPORTED_VERSIONS.items():
    for _table in (REQUESTS, RESPONSES):
        _message = _table.get(_key)
        if _message is None or tuple(_message.versions) != (_low, _high):
            raise AssertionError(f"{_key.name}: definition does not cover versions {_low}-{_high}")
if set(REQUESTS) != set(SUPPORTED_VERSIONS) or set(RESPONSES) != set(SUPPORTED_VERSIONS):
    raise AssertionError("a defined message has no entry in SUPPORTED_VERSIONS")
del _module, _message, _key, _low, _high, _table

__all__ = ["REQUESTS", "RESPONSES", "ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]
