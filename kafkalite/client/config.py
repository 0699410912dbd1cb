"""Client configuration: Kafka's property names, checked up front.

Each client takes a dict of Kafka/librdkafka property names; unknown
names and bad values raise ValueError naming the property, so a typo does
not silently fall back to a default.
"""
from __future__ import annotations

import os

_BOOL = {"true": True, "false": False, "1": True, "0": False}


def _to_bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in _BOOL:
        return _BOOL[v.lower()]
    raise ValueError


def _to_int(v):
    if isinstance(v, bool):
        raise ValueError
    return int(v)


def _acks(v):
    if str(v).lower() == "all":
        return -1
    v = int(v)
    if v not in (0, 1, -1):
        raise ValueError
    return v


CONVERTERS = {"int": _to_int, "bool": _to_bool, "str": str, "acks": _acks, "any": lambda v: v}

COMMON = {
    "bootstrap.servers": ("str", None),
    "client.id": ("str", "kafkalite"),
    "request.timeout.ms": ("int", 30_000),
    "retry.backoff.ms": ("int", 100),
    "metadata.max.age.ms": ("int", 300_000),
    "socket.timeout.ms": ("int", 60_000),
    "error_cb": ("any", None),
    # CURVE on the native protocol (client/connection.py): the server's public
    # key and this client's key pair, each Z85 text or a key file
    # (`kafkalite curve keygen`); all unset: no CURVE
    "curve.server.key": ("str", None),
    "curve.public.key": ("str", None),
    "curve.secret.key": ("str", None),
    # a SASL login on the native protocol, with the names Kafka's clients
    # use for the Kafka listeners (client/connection.py): SASL_PLAINTEXT or
    # SASL_SSL logs in (over CURVE, so curve.server.key is needed: the
    # password is never sent in the clear); unset or PLAINTEXT: no login
    "security.protocol": ("str", None),
    "sasl.mechanism": ("str", None), "sasl.mechanisms": ("str", None),
    "sasl.username": ("str", None),
    "sasl.password": ("str", None),
}

PRODUCER = {
    **COMMON,
    "acks": ("acks", -1), "request.required.acks": ("acks", None),
    "linger.ms": ("int", 5), "queue.buffering.max.ms": ("int", None),
    "batch.size": ("int", 1_000_000), "batch.num.messages": ("int", 10_000),
    "max.request.size": ("int", 1_048_576), "message.max.bytes": ("int", None),
    "compression.type": ("str", "none"), "compression.codec": ("str", None),
    "compression.level": ("int", -1),
    "retries": ("int", 2_147_483_647), "message.send.max.retries": ("int", None),
    "delivery.timeout.ms": ("int", 300_000), "message.timeout.ms": ("int", None),
    "max.in.flight.requests.per.connection": ("int", 5), "max.in.flight": ("int", None),
    "queue.buffering.max.messages": ("int", 100_000),
    "queue.buffering.max.kbytes": ("int", 1_048_576),
    "partitioner": ("str", "murmur2_random"),
    "enable.idempotence": ("bool", True),
    "transactional.id": ("str", None),
    "transaction.timeout.ms": ("int", 60_000),
    # 2: transactions v2 (KIP-890 part 2), 1: Kafka 3.x's protocol
    "kafkalite.transaction.version": ("int", 2),
    "on_delivery": ("any", None),
    "allow.auto.create.topics": ("bool", True),
    # "tcp", "zmq", "shm" (a shared-memory ring), "auto" (a ring on this
    # host, else ZeroMQ); unset: tcp_link.resolve_transport chooses
    "kafkalite.transport": ("str", None),
    # a tcp link to a worker in this network namespace goes over its Unix-
    # domain socket (kafkalite/local_socket.py); false: always TCP
    "kafkalite.local.socket": ("bool", True),
    "kafkalite.shm.ring.bytes": ("int", 64 << 20),
    # a proxy's: the principal its Produce requests are made for (the
    # ingest gateway's, with the server's own CURVE key; others are refused)
    "kafkalite.request.principal": ("str", None),
}

# librdkafka aliases -> the canonical name used internally
PRODUCER_ALIASES = {
    "request.required.acks": "acks", "queue.buffering.max.ms": "linger.ms",
    "compression.codec": "compression.type", "message.send.max.retries": "retries",
    "message.timeout.ms": "delivery.timeout.ms", "max.in.flight": "max.in.flight.requests.per.connection",
    "message.max.bytes": "max.request.size",
}

CONSUMER = {
    **COMMON,
    "group.id": ("str", None),
    "group.instance.id": ("str", None),
    "auto.offset.reset": ("str", "latest"),
    "enable.auto.commit": ("bool", True),
    "auto.commit.interval.ms": ("int", 5_000),
    "enable.partition.eof": ("bool", False),
    "fetch.min.bytes": ("int", 1),
    "fetch.wait.max.ms": ("int", None), "fetch.max.wait.ms": ("int", 500),
    "fetch.max.bytes": ("int", 52_428_800),
    "max.partition.fetch.bytes": ("int", 1_048_576),
    "isolation.level": ("str", "read_uncommitted"),
    "session.timeout.ms": ("int", 45_000),
    "heartbeat.interval.ms": ("int", 3_000),
    "max.poll.interval.ms": ("int", 300_000),
    "partition.assignment.strategy": ("str", "range,roundrobin"),
    # "classic": JoinGroup/SyncGroup (group.py); "consumer": KIP-848's
    # ConsumerGroupHeartbeat (consumer_membership.py), assigned by the
    # coordinator's group.remote.assignor (uniform, range; unset: its default)
    "group.protocol": ("str", "classic"),
    "group.remote.assignor": ("str", None),
    "on_commit": ("any", None),
    "allow.auto.create.topics": ("bool", False),
    # the fetch links: "zmq", or "tcp" (client/tcp_link.py: the worker's
    # PLAINTEXT Kafka listener, written to from the caller's thread); unset:
    # tcp_link.resolve_transport chooses
    "kafkalite.transport": ("str", None),
    # a tcp link to a worker in this network namespace goes over its Unix-
    # domain socket (kafkalite/local_socket.py); false: always TCP
    "kafkalite.local.socket": ("bool", True),
}
CONSUMER_ALIASES = {"fetch.wait.max.ms": "fetch.max.wait.ms"}

# The share consumer (share_consumer.py, KIP-932): a share group's member.
SHARE_CONSUMER = {
    **COMMON,
    "group.id": ("str", None),
    # "implicit": what poll() returned is accepted at the next poll (or
    # commit, close) unless acknowledge() said otherwise; "explicit": only
    # what acknowledge() names is acknowledged
    "share.acknowledgement.mode": ("str", "implicit"),
    "fetch.min.bytes": ("int", 1),
    "fetch.max.wait.ms": ("int", 500),
    "fetch.max.bytes": ("int", 52_428_800),
    "max.partition.fetch.bytes": ("int", 1_048_576),
    # a member that does not poll this long leaves the group (its heartbeats
    # go from a thread), and rejoins at its next poll
    "max.poll.interval.ms": ("int", 300_000),
    # (offsets: {(topic, partition): [(offset, AcknowledgeType)]}, error or
    # None) per acknowledgement answer, Kafka's AcknowledgementCommitCallback
    "on_commit": ("any", None),
}

# Set by the coordinator for a KIP-848 group: librdkafka refuses them with
# group.protocol=consumer, and so does this client (its words).
GROUP_PROTOCOLS = ("classic", "consumer")
CLASSIC_ONLY = {
    "session.timeout.ms": "It is defined broker side",
    "heartbeat.interval.ms": "It is defined broker side",
    "partition.assignment.strategy": "Use `group.remote.assignor` instead",
}


def check_group_protocol(given: dict, cfg: dict) -> None:
    """InvalidConfigurationError for an unknown ``group.protocol`` or a
    classic-only property set (in ``given``, the caller's own config) with
    ``group.protocol=consumer``."""
    from kafkalite.errors import InvalidConfigurationError
    protocol = cfg["group.protocol"]
    if protocol not in GROUP_PROTOCOLS:
        raise InvalidConfigurationError(
            f"invalid value {protocol!r} for configuration property 'group.protocol': "
            f"use {' or '.join(GROUP_PROTOCOLS)}")
    if protocol == "consumer":
        for key, hint in CLASSIC_ONLY.items():
            if key in given:
                raise InvalidConfigurationError(
                    f"`{key}` is not supported for `group.protocol=consumer`. {hint}")
    elif cfg.get("group.remote.assignor"):
        raise InvalidConfigurationError(
            "`group.remote.assignor` is only used with `group.protocol=consumer`")


ADMIN = dict(COMMON)

OFFSET_RESETS = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
                 "latest": "latest", "largest": "latest", "end": "latest", "error": "error"}


def resolve(config: dict | None, schema: dict, aliases: dict | None = None) -> dict:
    """Defaults overlaid with ``config``; ValueError naming a bad property."""
    out = {k: v for k, (_, v) in schema.items() if v is not None}
    for key, raw in (config or {}).items():
        if key not in schema:
            raise ValueError(f"unknown configuration property {key!r}")
        kind = schema[key][0]
        try:
            value = CONVERTERS[kind](raw)
        except (TypeError, ValueError):
            raise ValueError(f"invalid value {raw!r} for configuration property {key!r} "
                             f"(expected {kind})") from None
        out[(aliases or {}).get(key, key)] = value
    if not out.get("bootstrap.servers"):
        raise ValueError("configuration property 'bootstrap.servers' is required "
                         "(host:port of a kafkalite server)")
    return out


def owner_config(server_info: dict) -> dict:
    """The CURVE settings a tool of a server's owner connects with: with
    security on and no key file the native ports take only the key pair the
    server wrote, 0600, into its data directory, and its server.json names
    (``owner.key_file``; server/auth/security.py). {} when there is none, or it
    cannot be read by this process (another user's server)."""
    path = server_info.get("owner.key_file")
    if not path or not os.access(path, os.R_OK):
        return {}
    return {"curve.server.key": path, "curve.public.key": path, "curve.secret.key": path}
