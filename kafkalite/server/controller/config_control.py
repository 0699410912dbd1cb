"""Topic, broker and group configs: where their values are, DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs (Kafka's
ConfigurationControlManager).

What each config is (type, default, scope, synonyms, sensitivity) and the
rules of the three config APIs are config_registry.py's; here is where the
values are: topics' own configs and the dynamic broker configs in the
metadata (``broker_configs``: "" for the cluster-wide defaults, a broker id
for its own; ``group_configs``: each group's own, group_config.py), the
server's settings, and what the brokers are (ids, listeners, racks:
cluster_control.py). A group's configs change nothing on the brokers: its
coordinator, in this process, reads them from the metadata at each use.

A change is stored here and answered by the controller once the brokers
have the partitions it touches with their new configs: the Alter APIs
return the partitions to send (``(topic, broker or None)``), as Kafka's
manager returns records that the brokers then read from the metadata log,
and controller.py sends them (replication_control.py's assigns).

Which process runs it: the supervisor holding the controller, on its
single thread, through controller.py's ``Controller``. It imports
cluster_control.py and metadata.py of the controller, config_registry.py
and network/ (the listeners); replication_control.py imports its
``log_config`` and ``dynamic_topic_defaults``.
"""
from __future__ import annotations

import logging

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol.enums import AlterConfigOp, ConfigResourceType
from kafkalite.protocol.native import NATIVE_BOOTSTRAP_CONFIG
from kafkalite.server import config_registry as registry
from kafkalite.server import group_config
from kafkalite.server.controller.cluster_control import KAFKA_CONTROLLER_ID, bracket
from kafkalite.server.controller.metadata import TopicMetadata
from kafkalite.server.topic import refuse_internal
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.network.requests import Listener, RequestContext

log = logging.getLogger("kafkalite.controller")


def dynamic_topic_defaults(broker_configs: dict, broker_id: int | None) -> dict[str, str]:
    """The topic configs the dynamic broker configs (the metadata's
    ``broker_configs``) set on that broker (None: cluster-wide only)."""
    if not broker_configs:
        return {}
    return {**registry.dynamic_topic_defaults(broker_configs.get("", {})),
            **registry.dynamic_topic_defaults(
                broker_configs.get(str(broker_id), {}) if broker_id is not None else {})}


def log_config(config, broker_configs: dict, topic: TopicMetadata, broker_id: int | None = None):
    """``topic``'s effective LogConfig (on ``broker_id``; None: as the
    cluster-wide settings make it)."""
    return config.log_config({**dynamic_topic_defaults(broker_configs, broker_id),
                              **topic.configs})


def _unsupported(resource_type: int, verb: str) -> KafkaError:
    return errors.InvalidRequestError(
        f"unsupported resource type {resource_type}: kafkalite {verb} "
        f"topic ({int(ConfigResourceType.TOPIC)}), broker "
        f"({int(ConfigResourceType.BROKER)}) and group ({int(ConfigResourceType.GROUP)}) "
        f"configs")


class ConfigurationControl:
    """``cluster`` the ClusterControl, whose brokers' listeners and racks
    are their read-only configs."""

    def __init__(self, config, metadata, cluster):
        self.config = config
        self.metadata = metadata
        self.cluster = cluster

    def validated_configs(self, configs: dict, topic: str) -> dict[str, str]:
        """A new topic's configs, checked against every topic config Kafka
        has (config_registry.py); INVALID_CONFIG names the one refused."""
        return registry.check_topic_configs(
            configs, self.config.log_config(), topic,
            tiered_storage=self.config.remote_log_storage_system_enable,
            iceberg_unshared=self.config.iceberg_unshared)

    def _broker_info(self, broker_id: int) -> registry.BrokerInfo:
        """One broker's own read-only configs: its listeners as it binds
        and advertises them, its rack, and the node's native address."""
        native = self.cluster.controller_node(Listener.NATIVE)
        bind, told = [], []
        for spec in kafka_listeners(self.config):
            if broker_id == KAFKA_CONTROLLER_ID:
                host, port = self.cluster.kafka_listeners.get(spec.name,
                                                              (None, self.cluster.kafka_port))
                endpoint = (host or self.config.public_host, port)
                bind_host = spec.host
            else:
                b = self.cluster.brokers[broker_id]
                endpoint = self.cluster.kafka_endpoint(b, spec.name if b.kafka_listeners else None)
                bind_host = b.host or spec.host
            if endpoint is None:
                continue
            bind.append(f"{spec.name}://{bracket(bind_host)}:{endpoint[1]}")
            told.append(f"{spec.name}://{bracket(endpoint[0])}:{endpoint[1]}")
        return registry.BrokerInfo(broker_id, ",".join(bind), ",".join(told),
                                   self.cluster.racks.get(broker_id),
                                   f"{bracket(native['host'])}:{native['port']}")

    def _broker_id(self, resource_name: str) -> int | None:
        """A broker resource's id (None: "", the cluster-wide defaults);
        INVALID_REQUEST for anything else than a broker of this cluster, as
        Kafka answers a name that is not its own id."""
        if resource_name == "":
            return None
        try:
            broker_id = int(resource_name)
        except ValueError:
            raise errors.InvalidRequestError(
                f"Broker id must be an integer, but it is: {resource_name}") from None
        if broker_id != KAFKA_CONTROLLER_ID and not 0 <= broker_id < len(self.cluster.brokers):
            raise errors.InvalidRequestError(
                f"Unexpected broker id {resource_name}: the brokers are 0.."
                f"{len(self.cluster.brokers) - 1} and {KAFKA_CONTROLLER_ID} "
                f"(or \"\" for every broker)")
        return broker_id

    def layers(self, broker_id: int | None) -> registry.Layers:
        """Broker ``broker_id``'s config values by level (None: the cluster's
        view, without any one broker's dynamic or own configs)."""
        dynamic = self.metadata.broker_configs
        info = None if broker_id is None else self._broker_info(broker_id)
        return registry.Layers(
            dict(dynamic.get(str(broker_id), {})) if broker_id is not None else {},
            dict(dynamic.get("", {})), registry.static_configs(self.config, info))

    def _config_entries(self, topic: TopicMetadata, keys, broker_id: int | None,
                        synonyms: bool, documentation: bool) -> list[dict]:
        """A topic's configs as broker ``broker_id`` (the one the client
        asked; None: the controller) has them, as Kafka's answering broker
        describes them with its own dynamic configs."""
        layers = self.layers(broker_id)
        effective = registry.effective_log_config(self.config, layers, topic.configs)
        return registry.describe_topic(topic.configs, effective, layers, keys, synonyms,
                                       documentation)

    def _broker_config_entries(self, resource_name: str, keys, synonyms: bool = False,
                               documentation: bool = False) -> list[dict]:
        """A broker's configs: every broker config with its source, as
        Kafka's DescribeConfigs of a broker id; for "", the cluster-wide
        dynamic defaults, as Kafka's. Both carry kafkalite's native
        bootstrap address (``NATIVE_BOOTSTRAP_CONFIG``: every broker and the
        controller answer the same, the one address of this controller), by
        which kafkalite's clients given a Kafka listener's address find the
        native port (protocol/native.py, client/bootstrap.py)."""
        broker_id = self._broker_id(resource_name)
        if broker_id is not None:
            return registry.describe_broker(self.layers(broker_id), keys, synonyms,
                                            documentation)
        layers = self.layers(None)
        entries = registry.describe_broker(layers, keys, synonyms, documentation,
                                           cluster_default=True)
        native = self._broker_info(KAFKA_CONTROLLER_ID).native_bootstrap
        entries += registry.describe_broker(
            registry.Layers({}, {}, {NATIVE_BOOTSTRAP_CONFIG: native}),
            [NATIVE_BOOTSTRAP_CONFIG], synonyms, documentation)
        return [e for e in entries if not keys or e["name"] in keys]

    def describe_configs(self, ctx: RequestContext, body: dict):
        synonyms = bool(body.get("include_synonyms"))
        documentation = bool(body.get("include_documentation"))
        # the broker the client addressed, whose dynamic configs a topic's
        # values include (a request to this process: the cluster's defaults)
        via = ctx.relayed_from if ctx.relayed_from is not None \
            and 0 <= ctx.relayed_from < len(self.cluster.brokers) else None
        results = []
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"], "configs": []}
            try:
                keys = r.get("configuration_keys")
                if r["resource_type"] == ConfigResourceType.BROKER:
                    out["configs"] = self._broker_config_entries(r["resource_name"], keys,
                                                                 synonyms, documentation)
                elif r["resource_type"] == ConfigResourceType.TOPIC:
                    topic = self.metadata.get(r["resource_name"])
                    out["configs"] = self._config_entries(topic, keys, via, synonyms,
                                                          documentation)
                elif r["resource_type"] == ConfigResourceType.GROUP:
                    out["configs"] = group_config.describe_group(
                        self.config, self.metadata.group_configs.get(r["resource_name"], {}),
                        keys, synonyms, documentation)
                else:
                    raise _unsupported(r["resource_type"], "describes")
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
            results.append(out)
        return {"throttle_time_ms": 0, "results": results}

    def _apply_configs(self, body: dict, new_configs) -> tuple[list[dict], list[tuple]]:
        """Both Alter APIs: ``new_configs(resource, current, is_topic,
        default_of)`` -> the resource's configs as they become (``default_of``:
        a config's value where the resource has none of its own). Returns
        the responses and the partitions to send their brokers again:
        ``(topic, broker)`` (broker None: every replica of the topic). Topic
        configs are checked as CreateTopics checks them (INVALID_CONFIG),
        broker configs as Kafka's DynamicBrokerConfig does
        (INVALID_REQUEST). Kafka's request-level rules first: a resource
        named twice, or a config twice in one resource, is INVALID_REQUEST."""
        responses, resend = [], []
        named = [(r["resource_type"], r["resource_name"]) for r in body["resources"]]
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"]}
            responses.append(out)
            try:
                if named.count((r["resource_type"], r["resource_name"])) > 1:
                    raise errors.InvalidRequestError("Each resource must appear at most once.")
                names = [c["name"] for c in r["configs"]]
                if len(set(names)) != len(names):
                    raise errors.InvalidRequestError("Error due to duplicate config keys")
                if r["resource_type"] == ConfigResourceType.TOPIC:
                    self._alter_topic_configs(r, body.get("validate_only"), new_configs,
                                              resend)
                elif r["resource_type"] == ConfigResourceType.BROKER:
                    self._alter_broker_configs(r, body.get("validate_only"), new_configs,
                                               resend)
                elif r["resource_type"] == ConfigResourceType.GROUP:
                    self._alter_group_configs(r, body.get("validate_only"), new_configs)
                else:
                    raise _unsupported(r["resource_type"], "alters")
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        return responses, resend

    def _alter_topic_configs(self, r: dict, validate_only: bool, new_configs,
                             resend: list) -> None:
        name = r["resource_name"]
        refuse_internal(name, "alter")
        topic = self.metadata.get(name)
        cluster_view = self.config.log_config(
            dynamic_topic_defaults(self.metadata.broker_configs, None)).to_properties()
        configs = registry.check_topic_configs(
            new_configs(r, dict(topic.configs), True, cluster_view.get), self.config.log_config(),
            name, topic.configs, tiered_storage=self.config.remote_log_storage_system_enable,
            iceberg_unshared=self.config.iceberg_unshared)
        if validate_only:
            return
        before = dict(topic.configs)
        self.metadata.set_configs(topic.name, configs)
        log.info("topic %s: configs %s -> %s", topic.name, before or "{}", configs or "{}")
        resend.append((topic, None))

    def _alter_broker_configs(self, r: dict, validate_only: bool, new_configs,
                              resend: list) -> None:
        """Dynamic broker configs of one broker or ("") of every broker.
        Those that are topic defaults go to the brokers at once: every
        partition of a topic without its own value of one that changed is
        sent to its replicas on the brokers concerned with its new configs."""
        broker_id = self._broker_id(r["resource_name"])
        resource = "" if broker_id is None else str(broker_id)
        before = dict(self.metadata.broker_configs.get(resource, {}))

        def default_of(name: str):
            return registry.broker_config(name).default if registry.broker_config(name) else None
        configs = new_configs(r, dict(before), False, default_of)
        registry.check_broker_configs(configs, per_broker=broker_id is not None)
        if validate_only:
            return
        self.metadata.set_broker_configs(resource, configs)
        log.info("dynamic configs of %s: %s -> %s",
                 f"broker {broker_id}" if broker_id is not None else "every broker (default)",
                 registry.loggable(before, False) or "{}",
                 registry.loggable(configs, False) or "{}")
        old, new = registry.dynamic_topic_defaults(before), registry.dynamic_topic_defaults(configs)
        changed = {k for k in {*old, *new} if old.get(k) != new.get(k)}
        if not changed:
            return
        for topic in self.metadata.topics.values():
            if changed - set(topic.configs):
                resend.append((topic, broker_id))

    def _alter_group_configs(self, r: dict, validate_only: bool, new_configs) -> None:
        """A group's own configs (it need not exist, as in Kafka); its
        coordinator reads them at its members' next heartbeat."""
        group = r["resource_name"]
        before = dict(self.metadata.group_configs.get(group, {}))
        configs = group_config.check_group_configs(group, new_configs(
            r, dict(before), False, lambda name: group_config.server_default(self.config, name)
            if name in group_config.GROUP_CONFIGS else None))
        if validate_only:
            return
        self.metadata.set_group_configs(group, configs)
        log.info("configs of group %s: %s -> %s", group, before or "{}", configs or "{}")

    def alter_configs(self, body: dict) -> tuple[list[dict], list[tuple]]:
        # Legacy AlterConfigs replaces the resource's whole set of configs.
        def replace(r, current, is_topic, default_of):
            nulls = [c["name"] for c in r["configs"] if c["value"] is None]
            if nulls:
                raise errors.InvalidRequestError(
                    f"Null value not supported for : {', '.join(nulls)}")
            return {c["name"]: c["value"] for c in r["configs"]}
        return self._apply_configs(body, replace)

    def incremental_alter_configs(self, body: dict) -> tuple[list[dict], list[tuple]]:
        def apply(r, current, is_topic, default_of):
            nulls = [c["name"] for c in r["configs"]
                     if c["value"] is None and c["config_operation"] != AlterConfigOp.DELETE]
            if nulls:
                raise errors.InvalidRequestError(
                    f"Null value not supported for : {', '.join(nulls)}")
            for c in r["configs"]:
                op, name, value = c["config_operation"], c["name"], c["value"]
                if op == AlterConfigOp.SET:
                    current[name] = value
                elif op == AlterConfigOp.DELETE:
                    current.pop(name, None)
                elif op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                    if not registry.is_list(is_topic, name):
                        raise errors.InvalidConfigurationError(
                            f"Can't {AlterConfigOp(op).name} to key {name} because its type is "
                            f"not LIST.")
                    # from the resource's own value, else the one it has now
                    # (a topic: the server's default; SUBTRACTing the last
                    # cleanup.policy leaves an empty list, as Kafka 4 allows)
                    start = current[name] if name in current else (default_of(name) or "")
                    items = [v.strip() for v in start.split(",") if v.strip()]
                    for v in (x.strip() for x in value.split(",")):
                        if op == AlterConfigOp.APPEND and v and v not in items:
                            items.append(v)
                        elif op == AlterConfigOp.SUBTRACT and v in items:
                            items.remove(v)
                    current[name] = ",".join(items)
                else:
                    raise errors.InvalidRequestError(f"unknown config operation {op}")
            return current
        return self._apply_configs(body, apply)
