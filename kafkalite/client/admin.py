"""The admin client: topics and configs, with confluent-kafka's call shapes.

Every method returns ``{topic or resource: concurrent.futures.Future}``
like confluent-kafka's AdminClient; here the request is made before the
method returns (against the supervisor), so the futures are already
resolved: ``.result()`` gives the value or raises the KafkaError the
server gave for that topic or resource.

Thread safety: every method may be called from any thread (one lock
around the supervisor connection).
"""
from __future__ import annotations

import enum
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import zmq

from kafkalite import errors
from kafkalite.client.config import ADMIN, resolve
from kafkalite.client.connection import Metadata, parse_bootstrap
from kafkalite.protocol import ApiKey


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(enum.IntEnum):
    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass
class NewTopic:
    topic: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: list | None = None
    config: dict = field(default_factory=dict)


@dataclass
class NewPartitions:
    topic: str
    new_total_count: int
    replica_assignment: list | None = None


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN_CONFIG
    is_read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    incremental_operation: AlterConfigOpType | None = None


class ConfigResource:
    def __init__(self, restype, name: str, set_config: dict | None = None,
                 incremental_configs: list[ConfigEntry] | None = None):
        self.restype = ResourceType(restype) if not isinstance(restype, str) else \
            ResourceType[restype.upper()]
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])

    def set_config(self, name: str, value: str) -> None:
        self.set_config_dict[name] = value

    def add_incremental_config(self, entry: ConfigEntry) -> None:
        self.incremental_configs.append(entry)

    def __hash__(self):
        return hash((self.restype, self.name))

    def __eq__(self, other):
        return isinstance(other, ConfigResource) and (self.restype, self.name) == (
            other.restype, other.name)

    def __repr__(self):
        return f"ConfigResource({self.restype.name}, {self.name!r})"


@dataclass
class BrokerMetadata:
    id: int
    host: str
    port: int


@dataclass
class PartitionMetadata:
    id: int
    leader: int
    replicas: list
    isrs: list
    error: errors.KafkaError | None = None


@dataclass
class TopicMetadata:
    topic: str
    partitions: dict
    error: errors.KafkaError | None = None


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict
    topics: dict


def _err(code: int, message=None):
    return None if not code else errors.error_for_code(code)(message or errors.error_for_code(code).name)


def cluster_metadata(meta: Metadata, topic: str | None = None, timeout: float = 30.0) -> ClusterMetadata:
    """list_topics(): the supervisor's view of workers and topics."""
    resp = meta.refresh(None if topic is None else [topic], False, timeout)
    brokers = {b["node_id"]: BrokerMetadata(b["node_id"], b["host"], b["port"])
               for b in resp["brokers"]}
    topics = {}
    for t in resp["topics"]:
        parts = {p["partition_index"]: PartitionMetadata(p["partition_index"], p["leader_id"],
                                                         p["replica_nodes"], p["isr_nodes"],
                                                         _err(p["error_code"]))
                 for p in t["partitions"]}
        topics[t["name"]] = TopicMetadata(t["name"], parts, _err(t["error_code"]))
    return ClusterMetadata(resp.get("cluster_id"), resp.get("controller_id", -1), brokers, topics)


def _done(value=None, exc=None) -> Future:
    f = Future()
    if exc is not None:
        f.set_exception(exc)
    else:
        f.set_result(value)
    return f


class AdminClient:
    def __init__(self, config: dict | None = None, **kwargs):
        cfg = resolve({**(config or {}), **kwargs}, ADMIN)
        self.config = cfg
        self._ctx = zmq.Context()
        self._meta = Metadata(parse_bootstrap(cfg["bootstrap.servers"]), cfg["client.id"], self._ctx)
        self._lock = threading.Lock()
        self._timeout = cfg["request.timeout.ms"] / 1000.0

    def _request(self, api_key, body, timeout=None):
        with self._lock:
            return self._meta.admin_request(api_key, body, timeout or self._timeout)

    def list_topics(self, topic: str | None = None, timeout: float = 30.0) -> ClusterMetadata:
        with self._lock:
            return cluster_metadata(self._meta, topic, timeout)

    def create_topics(self, new_topics: list[NewTopic], operation_timeout: float = 30.0,
                      request_timeout: float | None = None, validate_only: bool = False) -> dict:
        resp = self._request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": t.topic, "num_partitions": t.num_partitions,
                        "replication_factor": t.replication_factor, "assignments": [],
                        "configs": [{"name": k, "value": str(v)} for k, v in t.config.items()]}
                       for t in new_topics],
            "timeout_ms": int(operation_timeout * 1000), "validate_only": validate_only},
            request_timeout or operation_timeout + 5)
        return {t["name"]: _done(exc=_err(t["error_code"], t["error_message"]))
                for t in resp["topics"]}

    def delete_topics(self, topics: list[str], operation_timeout: float = 30.0,
                      request_timeout: float | None = None) -> dict:
        resp = self._request(ApiKey.DELETE_TOPICS, {
            "topics": [{"name": t} for t in topics],
            "timeout_ms": int(operation_timeout * 1000)}, request_timeout or operation_timeout + 5)
        return {r["name"]: _done(exc=_err(r["error_code"], r["error_message"]))
                for r in resp["responses"]}

    def create_partitions(self, new_partitions: list[NewPartitions], operation_timeout: float = 30.0,
                          request_timeout: float | None = None, validate_only: bool = False) -> dict:
        resp = self._request(ApiKey.CREATE_PARTITIONS, {
            "topics": [{"name": p.topic, "count": p.new_total_count, "assignments": None}
                       for p in new_partitions],
            "timeout_ms": int(operation_timeout * 1000), "validate_only": validate_only},
            request_timeout or operation_timeout + 5)
        return {r["name"]: _done(exc=_err(r["error_code"], r["error_message"]))
                for r in resp["results"]}

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float | None = None) -> dict:
        resp = self._request(ApiKey.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": int(r.restype), "resource_name": r.name,
                           "configuration_keys": None} for r in resources],
            "include_synonyms": False, "include_documentation": False}, request_timeout)
        out = {}
        for r, res in zip(resources, resp["results"]):
            exc = _err(res["error_code"], res["error_message"])
            entries = {c["name"]: ConfigEntry(c["name"], c["value"], ConfigSource(c["config_source"]),
                                              c["read_only"], c["config_source"] == ConfigSource.DEFAULT_CONFIG,
                                              c["is_sensitive"])
                       for c in res["configs"]}
            out[r] = _done(None if exc else entries, exc)
        return out

    def alter_configs(self, resources: list[ConfigResource], request_timeout: float | None = None,
                      validate_only: bool = False) -> dict:
        """Replace each resource's whole set of overrides (Kafka's AlterConfigs)."""
        resp = self._request(ApiKey.ALTER_CONFIGS, {
            "resources": [{"resource_type": int(r.restype), "resource_name": r.name,
                           "configs": [{"name": k, "value": str(v)} for k, v in r.set_config_dict.items()]}
                          for r in resources], "validate_only": validate_only}, request_timeout)
        return {r: _done(exc=_err(res["error_code"], res["error_message"]))
                for r, res in zip(resources, resp["responses"])}

    def incremental_alter_configs(self, resources: list[ConfigResource],
                                  request_timeout: float | None = None,
                                  validate_only: bool = False) -> dict:
        resp = self._request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": int(r.restype), "resource_name": r.name,
                           "configs": [{"name": e.name, "config_operation": int(
                               e.incremental_operation if e.incremental_operation is not None
                               else AlterConfigOpType.SET), "value": e.value}
                               for e in r.incremental_configs]}
                          for r in resources], "validate_only": validate_only}, request_timeout)
        return {r: _done(exc=_err(res["error_code"], res["error_message"]))
                for r, res in zip(resources, resp["responses"])}

    def close(self) -> None:
        with self._lock:
            self._meta.close()
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
