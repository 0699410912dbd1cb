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


def load_class(name: str, known: dict, base: type | None = None) -> type:
    """The class for ``name`` among ``known`` {java name: class or "module:Class"},
    else imported from its Python path; with ``base``, only a subclass of it
    (a connector config names classes, and whoever may write one must not
    make the worker build any other class it can import)."""
    cls = _load_class(name, known)
    if base is not None and not (isinstance(cls, type) and issubclass(cls, base)):
        raise NotAPlugin(name, base)
    return cls


def _load_class(name: str, known: dict) -> type:
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
        imported = importlib.import_module(module)
    except ModuleNotFoundError as e:
        # the module named is not there at all (``com.example``), as opposed to a module
        # that is there and fails on an import of its own, whose cause must show
        if e.name and module.startswith(e.name):
            raise ClassNotFound(name) from None
        raise ConnectException(f"Failed to load {name}: {e}") from None
    except (ImportError, ValueError) as e:
        raise ConnectException(f"Failed to load {name}: {e}") from None
    try:
        return getattr(imported, attr)
    except AttributeError:
        raise ClassNotFound(name) from None


class ClassNotFound(ConnectException):
    """No plugin and no Python class of the name given."""

    def __init__(self, name: str):
        super().__init__(f"Failed to find any class that implements {name}")
        self.name = name


class NotAPlugin(ClassNotFound):
    """A class that is there but not of the kind the config asks for."""

    def __init__(self, name: str, base: type):
        ConnectException.__init__(self, f"Class {str(name).strip()} does not implement "
                                        f"{base.__name__}")
        self.name = name


def plugin_desc(java: str, cls: type) -> str:
    """One plugin as Kafka's PluginDesc.toString lists it."""
    version = cls().version()
    return (f"PluginDesc{{klass=class {java}, name='{java}', version='{version}', "
            f"encodedVersion={version}, type={cls.TYPE}, typeName='{cls.TYPE}', "
            f"location='{cls.__module__}'}}")


def connector_class(name: str) -> type:
    """The connector class of ``connector.class``; an unknown name raises
    Kafka's message, which lists the connectors there are."""
    from kafkalite.connect.api import Connector
    try:
        return load_class(name, CONNECTORS, Connector)
    except ClassNotFound:
        raise ConnectException(
            f"Failed to find any class that implements Connector and which name matches "
            f"{str(name).strip()}, available connectors are: "
            + ", ".join(plugin_desc(java, cls) for java, cls in connector_plugins())) from None


def connector_plugins() -> list[tuple[str, type]]:
    """(Kafka class name, class) of the connectors shipped."""
    return [(java, load_class(java, CONNECTORS)) for java in CONNECTORS]
