"""The Kafka listeners of a node: their names, security protocols, ports and
advertised hosts, from Kafka's ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``.

A node may serve Kafka clients on several listeners at once, say PLAINTEXT
on loopback for its own host's applications and SASL_SSL on a public
interface for everyone else. Every broker process of the node (the
supervisor and each worker) opens every listener; a client
is told, in Metadata, DescribeCluster and FindCoordinator answers, the
endpoints of the listener its request arrived on, as Kafka does, so it
stays on that listener (and that security) for every broker it talks to.

``kafka_listeners(config)`` reads the settings:

- ``listeners`` (``NAME://host:port`` comma-separated; empty: one listener
  named after ``kafka_security_protocol``, on ``host`` and ``kafka_port``,
  which is what a node with no listener settings gets). The port is the
  supervisor's; each worker's is ``kafka_worker_base_port`` + its index on
  the first listener and any free port on the others (a worker is a broker
  of its own, so one port per listener cannot serve them all). An empty host
  binds ``host``.
- ``listener_security_protocol_map`` (``NAME:PROTOCOL`` comma-separated;
  empty: Kafka's default, each protocol's name maps to itself).
- ``advertised_listeners`` (``NAME://host:port``): the host clients of
  that listener are told; the port they are told is always the one the
  process listens on.

The first listener is the node's primary one: ``server.json``'s
``kafka.bootstrap.servers`` and ``kafka.security.protocol`` name it, and
every listener's endpoints are in its ``kafka_listeners``. TLS and SASL
settings (``ssl_*``, ``sasl_*``) are shared by the listeners that use them.

Who may call: the config's validation (config.py) and every broker process
at start-up; pure functions of the config.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kafkalite.errors import InvalidConfigurationError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_ENDPOINT = re.compile(r"^([^:/]+)://(\[[^\]]*\]|[^:\[\]]*):(\d+)$")


@dataclass(frozen=True)
class ListenerSpec:
    name: str                      # upper case, as Kafka normalises it
    protocol: str                  # one of SECURITY_PROTOCOLS
    host: str                      # where it binds
    port: int                      # the supervisor's port; 0: any free port
    worker_base_port: int          # worker i binds this + i; 0: any free port
    advertised_host: str | None    # told to clients; None: the node's public host


def _endpoints(setting: str, value: str) -> list[tuple[str, str, int]]:
    """(NAME, host, port) of each ``NAME://host:port`` in ``value``."""
    out = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None or not _NAME.match(m.group(1)):
            raise InvalidConfigurationError(
                f"{setting}: {item!r} is not NAME://host:port (e.g. PLAINTEXT://127.0.0.1:9092, "
                f"SASL_SSL://:9093)")
        port = int(m.group(3))
        if port > 65535:
            raise InvalidConfigurationError(f"{setting}: port {port} of {item!r} is not 0-65535")
        host = m.group(2)
        if host.startswith("["):
            host = host[1:-1]
        out.append((m.group(1).upper(), host, port))
    names = [n for n, _, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidConfigurationError(f"{setting} names listener {twice[0]} more than once")
    return out


def _protocol_map(value: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _NAME.match(name) or protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigurationError(
                f"listener_security_protocol_map: {item!r} is not NAME:PROTOCOL with PROTOCOL "
                f"one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in mapping:
            raise InvalidConfigurationError(
                f"listener_security_protocol_map maps listener {name} more than once")
        mapping[name] = protocol
    return mapping


def kafka_listeners(config) -> list[ListenerSpec]:
    """The node's Kafka listeners, the primary one first; raises
    InvalidConfigurationError with a readable message on bad settings."""
    for name in ("listeners", "advertised_listeners", "listener_security_protocol_map"):
        if not isinstance(getattr(config, name), str):
            raise InvalidConfigurationError(f"{name} must be a string, not {getattr(config, name)!r}")
    if not config.listeners.strip():
        if config.advertised_listeners.strip() or config.listener_security_protocol_map.strip():
            raise InvalidConfigurationError(
                "advertised_listeners and listener_security_protocol_map need listeners")
        return [ListenerSpec(config.kafka_security_protocol, config.kafka_security_protocol,
                             config.host, config.kafka_port, config.kafka_worker_base_port, None)]
    mapping = _protocol_map(config.listener_security_protocol_map)
    advertised = {n: host for n, host, _ in _endpoints("advertised_listeners",
                                                      config.advertised_listeners)}
    declared = _endpoints("listeners", config.listeners)
    unknown = sorted(set(advertised) - {n for n, _, _ in declared})
    if unknown:
        raise InvalidConfigurationError(
            f"advertised_listeners names {unknown[0]}, which is not in listeners")
    ports = [p for _, _, p in declared if p]
    if len(ports) != len(set(ports)):
        raise InvalidConfigurationError(f"listeners share a port: {config.listeners!r}")
    specs = []
    for i, (name, host, port) in enumerate(declared):
        protocol = mapping.get(name, name if name in SECURITY_PROTOCOLS else None)
        if protocol is None:
            raise InvalidConfigurationError(
                f"listener {name} has no security protocol: name it in "
                f"listener_security_protocol_map (e.g. {name}:SASL_SSL)")
        specs.append(ListenerSpec(name, protocol, host or config.host, port,
                                  config.kafka_worker_base_port if i == 0 else 0,
                                  advertised.get(name) or None))
    return specs


def primary(config) -> ListenerSpec:
    return kafka_listeners(config)[0]
