"""The controller's side of client quotas: DescribeClientQuotas,
AlterClientQuotas (KIP-546), where the quota configs are kept, and how they
reach the workers (Kafka's ClientQuotaControlManager). Enforcement is
quotas.py's, in every process.

On-disk format: ``<data_dir>/quotas.json``, beside the cluster metadata
(with ``--cluster``, the ``kafkalite_quotas`` row of the cluster's
PostgreSQL instead, cluster_store.py), replaced atomically (write, fsync,
rename) at every change::

    {"version": 1, "quotas": [
        {"entity": {"user": "alice", "client-id": null},
         "values": {"producer_byte_rate": 1048576.0}},
        {"entity": {"ip": "10.0.0.7"}, "values": {"connection_creation_rate": 5.0}}, ...]}

An entity has a ``user`` and/or a ``client-id`` part, or an ``ip`` part
alone (KIP-612: IP entities bound connection rates, connection_quotas.py);
a null name is that type's default entity (``/config/users/<default>``,
``/config/ips/<default>``). A change is written before it is answered, so
an acknowledged quota survives a restart.

Every worker gets the whole set on the control channel, as ACLs do
(acl_control.py): a ``quotas`` message after each change (answered once
every live worker confirmed it, or after ``PROPAGATION_TIMEOUT_MS``), and
the set in the ``assign`` that starts a (re)started worker. The
supervisor's own QuotaManager is changed in place.

Validation, with Kafka's codes (INVALID_REQUEST for all of these): an
entity type other than ``user`` / ``client-id`` / ``ip``, a type given
twice, ``ip`` together with ``user`` or ``client-id`` (in an entity or a
describe filter), an ip name that is no IP address, an unknown quota key,
a key of the other kind of entity (``connection_creation_rate`` is the only
key of ``ip``, and only ``ip`` has it), a key given twice, a byte rate or
connection rate that is not a whole number, a value that is not positive
(a connection rate may be 0: that IP may not connect). ``validate_only``
answers as the change would be answered and changes nothing.

Who may call: the supervisor (supervisor.py), on its single thread.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import math
import os

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.server.network.connection_quotas import CONNECTION_CREATION_RATE, IP
from kafkalite.server.network.quotas import (CLIENT_ID, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE,
                                     QUOTA_KEYS, USER)
from kafkalite.server.network.requests import DEFERRED, RequestContext
from kafkalite.storage.checkpoint import write_atomically

log = logging.getLogger("kafkalite.quotas")

QUOTAS_FILE = "quotas.json"
PROPAGATION_TIMEOUT_MS = 10_000
ENTITY_TYPES = (USER, CLIENT_ID, IP)
IP_QUOTA_KEYS = (CONNECTION_CREATION_RATE,)
# Kafka's LONG- and INT-typed quota keys
_WHOLE = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, CONNECTION_CREATION_RATE)
_MAX_CONNECTION_RATE = 2**31 - 1        # Kafka's: an INT
# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# An entity key is (user, client, ip): a name, None for the default, False
# when the entity has no such part; an ip entity has no other part.
Entity = tuple


def entity_from_wire(parts) -> Entity:
    """An AlterClientQuotas entity (list of entity_type/entity_name)."""
    found = {}
    for part in parts:
        kind = part["entity_type"]
        if kind not in ENTITY_TYPES:
            raise errors.InvalidRequestError(
                f"unhandled client quota entity type {kind!r} (kafkalite supports "
                f"{', '.join(ENTITY_TYPES)})")
        if kind in found:
            raise errors.InvalidRequestError(f"duplicate entity type {kind!r} in the entity")
        found[kind] = part["entity_name"]
    if not found:
        raise errors.InvalidRequestError("the quota entity names no entity type")
    if IP in found:
        if len(found) > 1:
            raise errors.InvalidRequestError(
                "invalid quota entity combination: an ip entity may not be combined with a "
                "user or client-id entity")
        if found[IP] is not None:
            check_ip(found[IP])
        return (False, False, found[IP])
    return (found.get(USER, False), found.get(CLIENT_ID, False), False)


def check_ip(name) -> None:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        raise errors.InvalidRequestError(
            f"{name!r} is not a valid IP address (an ip quota entity names one IPv4 or IPv6 "
            f"address, or the default)") from None


def entity_to_wire(entity: Entity) -> list:
    return [{"entity_type": kind, "entity_name": name}
            for kind, name in zip(ENTITY_TYPES, entity) if name is not False]


def entity_text(entity: Entity) -> str:
    """``/config/users/alice/clients/<default>``: Kafka's path of an entity."""
    out = "/config"
    for path, name in zip(("/users/", "/clients/", "/ips/"), entity):
        if name is not False:
            out += path + ("<default>" if name is None else name)
    return out


def quotas_to_json(configs: dict) -> list:
    return [{"entity": {kind: name for kind, name in zip(ENTITY_TYPES, e) if name is not False},
             "values": dict(values)} for e, values in configs.items()]


def quotas_from_json(rows) -> dict:
    out = {}
    for row in rows:
        entity = row["entity"]
        out[tuple(entity.get(kind, False) for kind in ENTITY_TYPES)] = {
            k: float(v) for k, v in row["values"].items()}
    return out


def validate_op(key: str, value: float, entity: Entity = (False, False, False)) -> None:
    if entity[2] is not False:
        if key not in IP_QUOTA_KEYS:
            raise errors.InvalidRequestError(
                f"invalid configuration key {key!r} for an ip entity (its only quota: "
                f"{CONNECTION_CREATION_RATE})")
    elif key not in QUOTA_KEYS:
        raise errors.InvalidRequestError(
            f"invalid configuration key {key!r} for a user/client-id entity" +
            (f" ({key} is the quota of ip entities)" if key in IP_QUOTA_KEYS else "") +
            f" (kafkalite's client quotas: {', '.join(QUOTA_KEYS)})")
    if key == CONNECTION_CREATION_RATE:
        if not math.isfinite(value) or not 0 <= value <= _MAX_CONNECTION_RATE:
            raise errors.InvalidRequestError(
                f"{key} must be a whole number from 0 to {_MAX_CONNECTION_RATE}, not {value!r}")
    elif not math.isfinite(value) or value <= 0:
        raise errors.InvalidRequestError(f"{key} must be a positive number, not {value!r}")
    if key in _WHOLE and abs(value - round(value)) > 1e-6:
        kind = "an Int" if key == CONNECTION_CREATION_RATE else "a Long"
        raise errors.InvalidRequestError(f"configuration {key} must be {kind} value, not {value!r}")


class QuotaStore:
    """The quota configs on disk (format in the module docstring)."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, QUOTAS_FILE)

    def load(self) -> dict:
        try:
            with open(self.path, "rb") as f:
                return quotas_from_json(json.loads(f.read())["quotas"])
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.KafkaStorageError(f"cannot read {self.path}: {exc}") from None

    def save(self, configs: dict) -> None:
        data = json.dumps({"version": 1, "quotas": quotas_to_json(configs)}, indent=1)
        write_atomically(self.path, data.encode())


class PostgresQuotaStore:
    """The quota configs in the cluster's PostgreSQL, through the
    controller's PostgresMetadataStore (its connection, and the lease fence)."""

    def __init__(self, metadata):
        self.metadata = metadata

    def load(self) -> dict:
        return quotas_from_json(self.metadata.read_quotas())

    def save(self, configs: dict) -> None:
        self.metadata.write_quotas(quotas_to_json(configs))


class QuotaControl:
    """``store`` a QuotaStore or PostgresQuotaStore; ``manager`` the
    supervisor's QuotaManager; ``channel`` the controller's BrokerChannel;
    ``live_brokers()`` the ids of the workers that are up."""

    def __init__(self, store, manager, channel, live_brokers):
        self.store = store
        self.manager = manager
        self.channel = channel
        self.live_brokers = live_brokers
        self.configs: dict = store.load()
        manager.replace(dict(self.configs))

    def handlers(self) -> dict:
        return {ApiKey.DESCRIBE_CLIENT_QUOTAS: self._describe,
                ApiKey.ALTER_CLIENT_QUOTAS: self._alter}

    def as_json(self) -> list:
        return quotas_to_json(self.configs)

    # ---- DescribeClientQuotas ----------------------------------------------------------------

    def _describe(self, ctx: RequestContext, body: dict):
        filters = {}
        for c in body["components"]:
            kind, match_type, match = c["entity_type"], c["match_type"], c["match"]
            if kind not in ENTITY_TYPES:
                raise errors.InvalidRequestError(f"unhandled client quota entity type {kind!r}")
            if kind in filters:
                raise errors.InvalidRequestError(f"entity type {kind!r} is filtered twice")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise errors.InvalidRequestError(f"an exact match of {kind} needs a name")
            elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
                if match is not None:
                    raise errors.InvalidRequestError(
                        f"match type {match_type} of {kind} takes no name")
            else:
                raise errors.InvalidRequestError(f"unknown match type {match_type}")
            filters[kind] = (match_type, match)
        if IP in filters and len(filters) > 1:
            raise errors.InvalidRequestError(
                "invalid entity filter combination: an ip filter may not be combined with a "
                "user or client-id filter")
        entries = []
        for entity, values in self.configs.items():
            if self._matches(entity, filters, body["strict"]):
                entries.append({"entity": entity_to_wire(entity), "values": [
                    {"key": k, "value": v} for k, v in sorted(values.items())]})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "entries": entries}

    @staticmethod
    def _matches(entity: Entity, filters: dict, strict: bool) -> bool:
        parts = dict(zip(ENTITY_TYPES, entity))
        for kind, (match_type, match) in filters.items():
            name = parts[kind]
            if name is False:
                return False
            if match_type == MATCH_EXACT and name != match:
                return False
            if match_type == MATCH_DEFAULT and name is not None:
                return False
            if match_type == MATCH_SPECIFIED and name is None:
                return False
        if strict and any(name is not False and kind not in filters
                          for kind, name in parts.items()):
            return False
        return True

    # ---- AlterClientQuotas -------------------------------------------------------------------

    def _alter(self, ctx: RequestContext, body: dict):
        configs = {e: dict(v) for e, v in self.configs.items()}
        results = []
        for entry in body["entries"]:
            result = {"error_code": 0, "error_message": None, "entity": entry["entity"]}
            results.append(result)
            try:
                entity = entity_from_wire(entry["entity"])
                values = dict(configs.get(entity, {}))
                seen = set()
                for op in entry["ops"]:
                    key = op["key"]
                    if key in seen:
                        raise errors.InvalidRequestError(f"quota key {key!r} is altered twice")
                    seen.add(key)
                    if op["remove"]:
                        validate_op(key, 1.0, entity)
                        values.pop(key, None)
                    else:
                        validate_op(key, op["value"], entity)
                        values[key] = float(op["value"])
            except KafkaError as exc:
                result["error_code"], result["error_message"] = exc.code, exc.message
                continue
            if values:
                configs[entity] = values
            else:
                configs.pop(entity, None)
        answer = {"throttle_time_ms": 0, "entries": results}
        if body["validate_only"] or configs == self.configs:
            return answer
        try:
            return self._change(configs, ctx, answer)
        except KafkaError as exc:       # not stored: nothing changed
            for r in results:
                if not r["error_code"]:
                    r["error_code"], r["error_message"] = exc.code, exc.message
            return answer

    def _change(self, configs: dict, ctx: RequestContext, answer: dict):
        """Make ``configs`` the quotas: on disk, here, then in every live
        worker; ``answer`` once the workers have them."""
        self.store.save(configs)         # raises (KafkaStorageError, ...) before any change
        self.configs = configs
        self.manager.replace(dict(configs))
        log.info("client quotas now: %s", "; ".join(
            f"{entity_text(e)} {v}" for e, v in configs.items()) or "none")
        brokers = list(self.live_brokers())
        if not brokers:
            return answer
        message = {"type": "quotas", "quotas": self.as_json()}

        def done(results, timed_out: bool) -> None:
            if timed_out:
                log.warning("quota change: not every worker confirmed within %d ms; they apply "
                            "it when the message arrives", PROPAGATION_TIMEOUT_MS)
            ctx.respond(answer)
        self.channel.send({b: message for b in brokers}, done, PROPAGATION_TIMEOUT_MS)
        return DEFERRED
