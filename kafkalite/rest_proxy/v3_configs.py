"""v3's configs: a topic's, a broker's, and the cluster's broker defaults.

Three scopes, one set of handlers (Confluent's TopicConfigsResource,
BrokerConfigsResource and ClusterConfigsResource, with their
``configs:alter`` batch actions):

| scope | paths | Kafka resource | ACL to read / to change |
| --- | --- | --- | --- |
| topic | ``.../topics/{t}/configs`` | TOPIC t | DescribeConfigs / AlterConfigs on t |
| broker | ``.../brokers/{b}/configs`` | BROKER b | DescribeConfigs / AlterConfigs on the cluster |
| cluster | ``.../broker-configs`` | BROKER "" (the dynamic default) | the same |

Each scope answers ``GET`` (the list, sorted by name), ``GET /{name}``,
``PUT /{name}`` with ``{"value": v}`` (IncrementalAlterConfigs SET),
``DELETE /{name}`` (DELETE: back to the default) and ``POST
...configs:alter`` with ``{"data": [{"name", "value", "operation": "SET"
| "DELETE"}], "validate_only": bool}``; a change is 204. A config the
resource does not have is 404 ("Config x cannot be found for ...", as
Confluent's AbstractConfigManager checks before it alters), one Kafka
refuses 400 with error_code 40002 (rest-utils' KafkaExceptionMapper for
InvalidConfigurationException).

Who may call: the proxy's request threads.
"""
from __future__ import annotations

from dataclasses import dataclass

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.cluster_view import ClusterView
from kafkalite.rest_proxy.errors import BAD_REQUEST, NOT_FOUND, ProxyError, from_kafka
from kafkalite.rest_proxy.http import Answer

TOPIC, BROKER, CLUSTER = "topic", "broker", "cluster"
OPERATIONS = ("SET", "DELETE")


@dataclass
class _Scope:
    """One resource whose configs are read or changed."""
    kind: str                 # Confluent's "kind" of one config
    restype: str              # the Kafka ConfigResource type
    name: str                 # its name ("" for the cluster's broker defaults)
    path: str                 # after /v3/clusters/: the configs' collection
    crn: str                  # the CRN's path to a config, before its name
    fields: dict              # what identifies it in each answer
    acl: tuple                # (ResourceType, name) the ACLs are asked on


class ConfigResources(ClusterView):
    """The v3 config handlers; each takes its scope first (app.py binds it)."""

    def _scope(self, req, scope: str, cluster_id: str, owner: str | None = None) -> _Scope:
        self.check(cluster_id)
        c = cluster_id
        if scope == TOPIC:
            self.topic_metadata(req, owner)
            return _Scope("KafkaTopicConfig", "TOPIC", owner, f"{c}/topics/{owner}/configs",
                          f"{c}/topic={owner}/config=", {"topic_name": owner},
                          (Res.TOPIC, owner))
        if scope == BROKER:
            if not owner.isdigit() or int(owner) not in self.metadata().brokers:
                raise ProxyError(NOT_FOUND, f"Broker {owner} cannot be found.")
            return _Scope("KafkaBrokerConfig", "BROKER", owner, f"{c}/brokers/{owner}/configs",
                          f"{c}/broker={owner}/config=", {"broker_id": int(owner)},
                          (Res.CLUSTER, "kafka-cluster"))
        return _Scope("KafkaClusterConfig", "BROKER", "", f"{c}/broker-configs",
                      f"{c}/broker-config=", {"config_type": "BROKER"},
                      (Res.CLUSTER, "kafka-cluster"))

    def _require(self, req, s: _Scope, operation: Op) -> None:
        resource_type, name = s.acl
        if resource_type == Res.CLUSTER:
            req.access.require_cluster(operation)
        else:
            req.access.require(operation, resource_type, name)

    def _entries(self, req, s: _Scope) -> dict:
        from kafkalite.client import ConfigResource
        self._require(req, s, Op.DESCRIBE_CONFIGS)
        res = ConfigResource(s.restype, s.name)
        try:
            return self.admin.describe_configs([res])[res].result()
        except Exception as exc:
            raise from_kafka(exc) from None

    def _config(self, req, s: _Scope, cluster_id: str, e) -> dict:
        return {"kind": s.kind, "metadata": self.meta(req, f"{s.path}/{e.name}", s.crn + e.name),
                "cluster_id": cluster_id, **s.fields, "name": e.name,
                "value": None if e.is_sensitive else e.value, "is_default": e.is_default,
                "is_read_only": e.is_read_only, "is_sensitive": e.is_sensitive,
                "source": e.source.name if hasattr(e.source, "name") else str(e.source),
                "synonyms": []}

    # ---- reads --------------------------------------------------------------------------------

    def list(self, scope: str, req, cluster_id, owner=None) -> Answer:
        s = self._scope(req, scope, cluster_id, owner)
        entries = self._entries(req, s)
        return Answer(200, self.listing(req, s.kind, [
            self._config(req, s, cluster_id, e)
            for e in sorted(entries.values(), key=lambda e: e.name)]))

    def list_every_broker(self, req, cluster_id) -> Answer:
        """``GET .../brokers/-/configs``: every broker's configs, by broker."""
        self.check(cluster_id)
        data = []
        for b in sorted(self.metadata().brokers):
            s = self._scope(req, BROKER, cluster_id, str(b))
            data += [self._config(req, s, cluster_id, e) for e in sorted(
                self._entries(req, s).values(), key=lambda e: e.name)]
        return Answer(200, self.listing(req, "KafkaBrokerConfig", data))

    def get(self, scope: str, req, cluster_id, *owner_and_name) -> Answer:
        *owner, name = owner_and_name
        s = self._scope(req, scope, cluster_id, *owner)
        e = self._entries(req, s).get(name)
        if e is None:
            raise ProxyError(NOT_FOUND, _missing(name, s, cluster_id))
        return Answer(200, self._config(req, s, cluster_id, e))

    # ---- changes ------------------------------------------------------------------------------

    def put(self, scope: str, req, cluster_id, *owner_and_name) -> Answer:
        *owner, name = owner_and_name
        body = req.json({})
        if not isinstance(body, dict) or not isinstance(body.get("value"), (str, type(None))):
            raise ProxyError(BAD_REQUEST, "the body is {\"value\": \"...\"}")
        s = self._scope(req, scope, cluster_id, *owner)
        return self._alter(req, s, cluster_id, [(name, body.get("value"), "SET")])

    def delete(self, scope: str, req, cluster_id, *owner_and_name) -> Answer:
        *owner, name = owner_and_name
        s = self._scope(req, scope, cluster_id, *owner)
        return self._alter(req, s, cluster_id, [(name, None, "DELETE")])

    def alter(self, scope: str, req, cluster_id, owner=None) -> Answer:
        body = req.json(None)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(
                isinstance(d, dict) and isinstance(d.get("name"), str)
                and str(d.get("operation") or "SET").upper() in OPERATIONS for d in data):
            raise ProxyError(BAD_REQUEST, "the body is {\"data\": [{\"name\", \"value\", "
                                          "\"operation\": \"SET\" | \"DELETE\"}], "
                                          "\"validate_only\": false}")
        s = self._scope(req, scope, cluster_id, owner)
        changes = [(d["name"], d.get("value"), str(d.get("operation") or "SET").upper())
                   for d in data]
        return self._alter(req, s, cluster_id, changes, bool(body.get("validate_only")))

    def _alter(self, req, s: _Scope, cluster_id: str, changes: list,
               validate_only: bool = False) -> Answer:
        from kafkalite.client import ConfigResource
        from kafkalite.client.admin import AlterConfigOpType, ConfigEntry
        known = self._entries(req, s)
        self._require(req, s, Op.ALTER_CONFIGS)
        for name, _, operation in changes:
            # the cluster's defaults name only what was set: any broker config may be
            if name not in known and s.fields != {"config_type": "BROKER"}:
                raise ProxyError(NOT_FOUND, _missing(name, s, cluster_id))
        res = ConfigResource(s.restype, s.name, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType[operation])
            for name, value, operation in changes])
        try:
            self.admin.incremental_alter_configs([res], validate_only=validate_only)[res].result()
        except Exception as exc:
            raise from_kafka(exc) from None
        return Answer(204)


def _missing(name: str, s: _Scope, cluster_id: str) -> str:
    what = {"TOPIC": "TOPIC"}.get(s.restype, "BROKER")
    return f"Config {name} cannot be found for {what} {s.name} in cluster {cluster_id}."
