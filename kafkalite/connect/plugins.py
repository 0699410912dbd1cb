"""Plugin lookup: a class named in a config (``connector.class``,
``transforms.X.type``, ``key.converter``) by Kafka's Java class name, its
short name (the part after the last dot, without ``Connector``), or a
Python path (``package.module:Class`` or ``package.module.Class``).

Who calls: the herder, the worker, converters and transforms.
"""
from __future__ import annotations

import importlib

from kafkalite.connect.errors import ConnectException

CONNECTORS = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector":
        "kafkalite.connect.connectors.file:FileStreamSourceConnector",
    "org.apache.kafka.connect.file.FileStreamSinkConnector":
        "kafkalite.connect.connectors.file:FileStreamSinkConnector",
    "io.confluent.connect.jdbc.JdbcSourceConnector":
        "kafkalite.connect.connectors.jdbc:JdbcSourceConnector",
    "io.confluent.connect.jdbc.JdbcSinkConnector":
        "kafkalite.connect.connectors.jdbc:JdbcSinkConnector",
    "io.debezium.connector.postgresql.PostgresConnector":
        "kafkalite.connect.connectors.cdc:PostgresCdcSourceConnector",
    "org.apache.iceberg.connect.IcebergSinkConnector":
        "kafkalite.connect.connectors.iceberg:IcebergSinkConnector",
    "kafkalite.connect.ParquetSinkConnector":
        "kafkalite.connect.connectors.parquet:ParquetSinkConnector",
    "org.apache.kafka.connect.mirror.MirrorSourceConnector":
        "kafkalite.connect.connectors.mirror:MirrorSourceConnector",
    "org.apache.kafka.connect.mirror.MirrorCheckpointConnector":
        "kafkalite.connect.connectors.mirror:MirrorCheckpointConnector",
    "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector":
        "kafkalite.connect.connectors.mirror:MirrorHeartbeatConnector",
}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def load_class(name: str, known: dict) -> type:
    """The class for ``name`` among ``known`` {java name: class or "module:Class"},
    else imported from its Python path."""
    name = str(name).strip()
    hit = known.get(name)
    if hit is None:
        for java, target in known.items():
            short = _short(java)
            if name in (short, short.removesuffix("Connector")):
                hit = target
                break
    if hit is None:
        hit = name
    if not isinstance(hit, str):
        return hit
    module, sep, attr = hit.partition(":")
    if not sep:
        module, _, attr = hit.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConnectException(f"Failed to find any class that implements {name}: {e}") from None


def connector_class(name: str) -> type:
    return load_class(name, CONNECTORS)


def connector_plugins() -> list[tuple[str, type]]:
    """(Kafka class name, class) of the connectors shipped."""
    return [(java, load_class(java, CONNECTORS)) for java in CONNECTORS]
