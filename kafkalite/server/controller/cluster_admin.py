"""The cluster administration APIs of Kafka 4.1 that kafkalite answers from
its own model of the cluster: delegation tokens, UpdateFeatures,
UnregisterBroker, AddRaftVoter and RemoveRaftVoter, ListConfigResources
(protocol/messages/cluster.py).

What kafkalite is decides each answer, as a Kafka broker configured the
same way answers it:

- it issues no delegation tokens: the four token APIs answer
  DELEGATION_TOKEN_AUTH_DISABLED, as a broker without
  ``delegation.token.secret.key`` does, once Kafka's earlier checks pass:
  a token request on a PLAINTEXT listener, or from an anonymous
  principal (1-way SSL, the native port without CURVE), is
  DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (KafkaApis.allowTokenRequests), and
  a renewer that is not a User INVALID_PRINCIPAL_TYPE (a token for another
  owner without CREATE_TOKENS on that user is the authorizer's:
  server/auth/request_authorization.py);
- its finalized features never change (network/requests.py's
  SUPPORTED_FEATURES and TRANSACTION_VERSION): UpdateFeatures succeeds for
  the level a feature is at and answers INVALID_UPDATE_VERSION for any
  other, and for an upgrade type Kafka does not define; as Kafka's
  QuorumController, an error is answered at the top alone (v0-1 list the
  features only on success);
- its controller quorum is its controller lease, one static voter
  (DescribeQuorum) on the node's primary Kafka listener: AddRaftVoter and
  RemoveRaftVoter answer UNSUPPORTED_VERSION with KRaft's message for a
  static quorum (kraft.version 0), after KafkaRaftClient's checks of the
  request (INCONSISTENT_CLUSTER_ID; INVALID_REQUEST for a voter without an
  id or a directory id, or added without an endpoint on that listener);
- its brokers are the workers of its nodes: UnregisterBroker knows them
  (BROKER_ID_NOT_REGISTERED for any other id) and refuses to drop one
  (they leave with their node);
- ListConfigResources lists the topics and brokers, the groups that have
  configs of their own, and no client metrics resources (it has none).

Who may call: the supervisor's controller (controller.py), on its thread.
"""
from __future__ import annotations

import uuid
from typing import Callable, Iterable

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import ConfigResourceType
from kafkalite.server.network.requests import (
    ANONYMOUS,
    SUPPORTED_FEATURES,
    TRANSACTION_VERSION,
    Listener,
    RequestContext,
)

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
_NO_DIRECTORY = uuid.UUID(int=0)          # KRaft's ReplicaKey.NO_DIRECTORY_ID
_UPGRADE_TYPES = (1, 2, 3)                # upgrade, safe downgrade, unsafe downgrade
_RPC = {"adding": "Add", "removing": "Remove"}


class ClusterAdmin:
    """``topics()`` the topic names, ``brokers()`` the broker ids, and
    ``group_config_names()`` the groups with configs of their own;
    ``listeners`` each Kafka listener's security protocol by name, the
    primary listener first (listeners.py)."""

    def __init__(self, cluster_id: Callable[[], str], topics: Callable[[], Iterable[str]],
                 brokers: Callable[[], Iterable[int]],
                 group_config_names: Callable[[], Iterable[str]] = lambda: (),
                 listeners: dict | None = None):
        self.cluster_id = cluster_id
        self.topics = topics
        self.brokers = brokers
        self.group_config_names = group_config_names
        self.listeners = dict(listeners or {"PLAINTEXT": "PLAINTEXT"})

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

    def token_error(self, ctx: RequestContext) -> int:
        """Kafka's answer to a token request before it looks for tokens:
        none on a PLAINTEXT listener or from an anonymous principal (its
        allowTokenRequests; kafkalite's native port without CURVE is such
        a one), and without a token secret, no tokens at all."""
        if ctx.listener is Listener.KAFKA:
            protocol = self.listeners.get(ctx.listener_name or "",
                                          next(iter(self.listeners.values())))
        else:
            protocol = "NATIVE"
        if protocol == "PLAINTEXT" or (protocol in ("SSL", "NATIVE") and
                                       ctx.principal == ANONYMOUS):
            return errors.DelegationTokenRequestNotAllowedError.code
        return errors.DelegationTokenAuthDisabledError.code

    def create_delegation_token(self, ctx: RequestContext, body: dict) -> dict:
        code = self.token_error(ctx)
        requester = ctx.principal.partition(":")
        owner = requester
        if body.get("owner_principal_name"):
            owner = (body["owner_principal_type"] or "", ":", body["owner_principal_name"])
        if code == errors.DelegationTokenAuthDisabledError.code and any(
                r["principal_type"] != "User" for r in body["renewers"]):
            code = errors.InvalidPrincipalTypeError.code
        return {"error_code": code, "principal_type": owner[0], "principal_name": owner[2],
                "token_requester_principal_type": requester[0],
                "token_requester_principal_name": requester[2],
                "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1, "max_timestamp_ms": -1,
                "token_id": "", "hmac": b"", "throttle_time_ms": 0}

    def renew_or_expire_delegation_token(self, ctx: RequestContext, body: dict) -> dict:
        return {"error_code": self.token_error(ctx), "expiry_timestamp_ms": -1,
                "throttle_time_ms": 0}

    def describe_delegation_token(self, ctx: RequestContext, body: dict) -> dict:
        return {"error_code": self.token_error(ctx), "tokens": [], "throttle_time_ms": 0}

    # ---- features, brokers, the quorum ----------------------------------------------------------

    def update_features(self, ctx: RequestContext, body: dict) -> dict:
        """Each update: its feature at the level it is finalized at succeeds
        (a no-op), any other is INVALID_UPDATE_VERSION, as is an upgrade
        type Kafka does not define. As Kafka's QuorumController answers: the
        first failure at the top and no per-feature results; on success v0-1
        one result a feature. Nothing changes."""
        for update in body["feature_updates"]:
            name, level = update["feature"], update["max_version_level"]
            message = None
            if ctx.api_version >= 1 and update["upgrade_type"] not in _UPGRADE_TYPES:
                message = "The controller does not support the given upgrade type."
            elif FINALIZED_LEVELS.get(name) == level:
                continue
            elif name in SUPPORTED_FEATURES:
                message = f"kafkalite keeps it finalized at {FINALIZED_LEVELS[name]}"
            else:
                message = f"kafkalite supports only {', '.join(sorted(SUPPORTED_FEATURES))}"
            return {"throttle_time_ms": 0, "error_code": errors.InvalidUpdateVersionError.code,
                    "error_message": ("The update failed for all features since the following "
                                      f"feature had an error: Invalid update version {level} "
                                      f"for feature {name}. {message}"), "results": []}
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "results": [
            {"feature": u["feature"], "error_code": NONE, "error_message": None}
            for u in body["feature_updates"]] if ctx.api_version <= 1 else []}

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
        """KafkaRaftClient's checks, in its order, then the static quorum's answer."""
        cluster_id = body.get("cluster_id")
        quorum_listener = next(iter(self.listeners))
        if cluster_id is not None and cluster_id != self.cluster_id():
            code, message = (errors.InconsistentClusterIdError.code,
                             f"cluster id {cluster_id!r} is not this cluster's")
        elif body["voter_id"] < 0 or body["voter_directory_id"] == _NO_DIRECTORY:
            code, message = (errors.InvalidRequestError.code,
                             f"{_RPC[verb]} voter request didn't include a valid voter")
        elif "listeners" in body and quorum_listener not in {
                listener["name"].upper() for listener in body["listeners"]}:
            code, message = (errors.InvalidRequestError.code,
                             f"Add voter request didn't include the endpoint for the default "
                             f"listener {quorum_listener}")
        else:
            code, message = errors.UnsupportedVersionError.code, _STATIC_QUORUM.format(verb)
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message}

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
