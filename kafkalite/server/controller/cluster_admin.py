"""The cluster administration APIs of Kafka 4.1 that kafkalite answers from
its own model of the cluster: delegation tokens, UpdateFeatures,
UnregisterBroker, AddRaftVoter and RemoveRaftVoter, ListConfigResources
(protocol/messages/cluster.py).

What kafkalite is decides each answer, as a Kafka broker configured the
same way answers it:

- it issues no delegation tokens: the four token APIs answer
  DELEGATION_TOKEN_AUTH_DISABLED, as a broker without
  ``delegation.token.secret.key`` does;
- its finalized features never change (network/requests.py's
  SUPPORTED_FEATURES and TRANSACTION_VERSION): UpdateFeatures succeeds for
  the level a feature is at and answers INVALID_UPDATE_VERSION for any other;
- its controller quorum is its controller lease, one static voter
  (DescribeQuorum): AddRaftVoter and RemoveRaftVoter answer
  UNSUPPORTED_VERSION with KRaft's message for a static quorum
  (kraft.version 0);
- its brokers are the workers of its nodes: UnregisterBroker knows them
  (BROKER_ID_NOT_REGISTERED for any other id) and refuses to drop one
  (they leave with their node);
- ListConfigResources lists the topics and brokers, the groups that have
  configs of their own, and no client metrics resources (it has none).

Who may call: the supervisor's controller (controller.py), on its thread.
"""
from __future__ import annotations

from typing import Callable, Iterable

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import ConfigResourceType
from kafkalite.server.network.requests import SUPPORTED_FEATURES, TRANSACTION_VERSION, RequestContext

NONE = 0
# the finalized level of each feature a client may name (never changed)
FINALIZED_LEVELS = {"transaction.version": TRANSACTION_VERSION}
# ListConfigResources v1's types when the request names none (KIP-1142)
CONFIG_RESOURCE_TYPES = (ConfigResourceType.TOPIC, ConfigResourceType.BROKER,
                         ConfigResourceType.BROKER_LOGGER, ConfigResourceType.CLIENT_METRICS,
                         ConfigResourceType.GROUP)
_NO_TOKENS = ("delegation tokens are disabled: kafkalite issues none (Kafka: no "
              "delegation.token.secret.key)")
_STATIC_QUORUM = ("Cluster doesn't support {} voter because the kraft.version feature is 0: "
                  "kafkalite's controller quorum is its controller lease, one static voter")


class ClusterAdmin:
    """``topics()`` the topic names, ``brokers()`` the broker ids, and
    ``group_config_names()`` the groups with configs of their own."""

    def __init__(self, cluster_id: Callable[[], str], topics: Callable[[], Iterable[str]],
                 brokers: Callable[[], Iterable[int]],
                 group_config_names: Callable[[], Iterable[str]] = lambda: ()):
        self.cluster_id = cluster_id
        self.topics = topics
        self.brokers = brokers
        self.group_config_names = group_config_names

    def handlers(self) -> dict:
        return {
            ApiKey.CREATE_DELEGATION_TOKEN: self.create_delegation_token,
            ApiKey.RENEW_DELEGATION_TOKEN: self.renew_or_expire_delegation_token,
            ApiKey.EXPIRE_DELEGATION_TOKEN: self.renew_or_expire_delegation_token,
            ApiKey.DESCRIBE_DELEGATION_TOKEN: self.describe_delegation_token,
            ApiKey.UPDATE_FEATURES: self.update_features,
            ApiKey.UNREGISTER_BROKER: self.unregister_broker,
            ApiKey.ADD_RAFT_VOTER: self.add_raft_voter,
            ApiKey.REMOVE_RAFT_VOTER: self.remove_raft_voter,
            ApiKey.LIST_CONFIG_RESOURCES: self.list_config_resources,
        }

    # ---- delegation tokens ---------------------------------------------------------------------

    def create_delegation_token(self, ctx: RequestContext, body: dict) -> dict:
        return {"error_code": errors.DelegationTokenAuthDisabledError.code,
                "principal_type": "User", "principal_name": ctx.principal.partition(":")[2],
                "token_requester_principal_type": "User",
                "token_requester_principal_name": ctx.principal.partition(":")[2],
                "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1, "max_timestamp_ms": -1,
                "token_id": "", "hmac": b"", "throttle_time_ms": 0}

    def renew_or_expire_delegation_token(self, ctx: RequestContext, body: dict) -> dict:
        return {"error_code": errors.DelegationTokenAuthDisabledError.code,
                "expiry_timestamp_ms": -1, "throttle_time_ms": 0}

    def describe_delegation_token(self, ctx: RequestContext, body: dict) -> dict:
        return {"error_code": errors.DelegationTokenAuthDisabledError.code, "tokens": [],
                "throttle_time_ms": 0}

    # ---- features, brokers, the quorum ----------------------------------------------------------

    def update_features(self, ctx: RequestContext, body: dict) -> dict:
        """Each update: its feature at the level it is finalized at succeeds
        (a no-op), any other is INVALID_UPDATE_VERSION; v2 answers the first
        failure at the top, v0-1 one result a feature. Nothing changes."""
        results = []
        for update in body["feature_updates"]:
            name, level = update["feature"], update["max_version_level"]
            code, message = NONE, None
            if FINALIZED_LEVELS.get(name) != level:
                code = errors.InvalidUpdateVersionError.code
                if name in SUPPORTED_FEATURES:
                    message = (f"Invalid update version {level} for feature {name}: kafkalite "
                               f"keeps it finalized at {FINALIZED_LEVELS[name]}")
                else:
                    message = (f"Invalid update version {level} for feature {name}: kafkalite "
                               f"supports only {', '.join(sorted(SUPPORTED_FEATURES))}")
            results.append({"feature": name, "error_code": code, "error_message": message})
        if ctx.api_version >= 2:
            failed = next((r for r in results if r["error_code"]), None)
            return {"throttle_time_ms": 0, "error_code": failed["error_code"] if failed else NONE,
                    "error_message": failed["error_message"] if failed else None, "results": []}
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "results": results}

    def unregister_broker(self, ctx: RequestContext, body: dict) -> dict:
        broker_id = body["broker_id"]
        if broker_id not in set(self.brokers()):
            code = errors.BrokerIdNotRegisteredError.code
            message = f"Broker ID {broker_id} is not currently registered"
        else:
            code = errors.InvalidRequestError.code
            message = (f"broker {broker_id} is a worker of a kafkalite node: its brokers leave "
                       f"with their node, not by UnregisterBroker")
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message}

    def _voter_change(self, body: dict, verb: str) -> dict:
        cluster_id = body.get("cluster_id")
        if cluster_id is not None and cluster_id != self.cluster_id():
            return {"throttle_time_ms": 0, "error_code": errors.InconsistentClusterIdError.code,
                    "error_message": f"cluster id {cluster_id!r} is not this cluster's"}
        return {"throttle_time_ms": 0, "error_code": errors.UnsupportedVersionError.code,
                "error_message": _STATIC_QUORUM.format(verb)}

    def add_raft_voter(self, ctx: RequestContext, body: dict) -> dict:
        return self._voter_change(body, "adding")

    def remove_raft_voter(self, ctx: RequestContext, body: dict) -> dict:
        return self._voter_change(body, "removing")

    # ---- ListConfigResources --------------------------------------------------------------------

    def list_config_resources(self, ctx: RequestContext, body: dict) -> dict:
        """v0 (ListClientMetricsResources): the client metrics resources,
        none. v1: those of each type asked for (all when none is); a type
        without configs is UNSUPPORTED_VERSION, as Kafka answers it."""
        if ctx.api_version == 0:
            return {"throttle_time_ms": 0, "error_code": NONE, "config_resources": []}
        wanted = body.get("resource_types") or [int(t) for t in CONFIG_RESOURCE_TYPES]
        if any(t not in CONFIG_RESOURCE_TYPES for t in wanted):
            return {"throttle_time_ms": 0, "error_code": errors.UnsupportedVersionError.code,
                    "config_resources": []}
        out = []
        if ConfigResourceType.GROUP in wanted:
            out += [(name, ConfigResourceType.GROUP) for name in sorted(self.group_config_names())]
        if ConfigResourceType.BROKER in wanted:
            out += [(str(b), ConfigResourceType.BROKER) for b in sorted(self.brokers())]
        if ConfigResourceType.TOPIC in wanted:
            out += [(name, ConfigResourceType.TOPIC) for name in sorted(self.topics())]
        return {"throttle_time_ms": 0, "error_code": NONE, "config_resources": [
            {"resource_name": name, "resource_type": int(kind)} for name, kind in out]}
