"""What each proxy request asks of the server's authorizer, as the user logged in.

The proxy's clients reach the node with the server's own key pair (a
super user), so the ACLs are applied here, before a Kafka call is made,
as the broker applies them to the same Kafka request from that user
(server/auth/request_authorization.py is the broker's side of the same
rules; webconsole/authorization.py does the same for the console):

- producing (v3 ``POST .../records``, v2 ``POST /topics/{t}``): Write on
  the topic (Produce; it implies the Describe of the producer's Metadata
  and the IdempotentWrite of its InitProducerId, as in Kafka 3.x);
- topics (v3 and v2): Describe to get one, its partitions and their
  replicas, a partition's offsets (Metadata, ListOffsets); the list
  (Metadata of all topics; a broker's partition replicas) leaves out
  those not describable, unaudited; Create on the cluster or the topic to
  create (CreateTopics), Delete to delete (DeleteTopics); DescribeConfigs
  to read its configs, AlterConfigs to change them
  (IncrementalAlterConfigs); a broker's configs and the cluster's broker
  defaults DescribeConfigs / AlterConfigs on the cluster;
- consumer groups: the list (ListGroups) keeps those the user may
  Describe (Describe on the cluster: all), one group, its consumers and
  their assignments, its lags and lag summary Describe on the group
  (DescribeGroups, OffsetFetch), the lags over the topics the user may
  describe (OffsetFetch filters them so);
- v2 consumer instances: an instance acts for the principal that made it
  and no other (another user is refused, not told of it); subscribe and
  records need Read on the group (JoinGroup, SyncGroup, Heartbeat) and on
  each topic (Fetch), checked again at each fetch so that an ACL removed
  takes effect at once; commit Read on the group and each topic
  (OffsetCommit); committed offsets Describe on the group and each topic
  (OffsetFetch); partitions assigned to it Read on each topic (Fetch),
  a move to a time or to an end Describe on each topic (ListOffsets).

A denial is Confluent REST Proxy's: HTTP 403 with error_code 40301 and
Kafka's message of the authorization exception ("Not authorized to access
topics: [t]"), as its KafkaExceptionMapper answers an
AuthorizationException; the authorizer logs and counts it as it does a
Kafka request's. A super user and ``allow_everyone_if_no_acl_found`` are
the authorizer's, so they act as on a Kafka listener.

Where the decision comes from: the login in front of the proxy, through
kafkalite/http_access.py (the one authorization layer of the HTTP apps);
without it (security off, or the authorizer off) everything is allowed.
This module never imports ``kafkalite.server``.

Who may call: the proxy's request threads; an ``Access`` is one request's.
"""
from __future__ import annotations

from kafkalite.http_access import RequestAccess
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.errors import AUTHORIZATION_FAILED, ProxyError


def denied(resource_type: Res, names) -> ProxyError:
    """Confluent's 40301 with Kafka's message of the authorization exception."""
    if resource_type == Res.TOPIC:
        message = f"Not authorized to access topics: [{', '.join(names)}]"
    elif resource_type == Res.GROUP:
        message = f"Not authorized to access group: {', '.join(names)}"
    else:
        message = "Cluster authorization failed."
    return ProxyError(AUTHORIZATION_FAILED, message)


class Access(RequestAccess):
    """One request's decisions for the user of ``environ``."""

    __slots__ = ()
    CLUSTER = Res.CLUSTER

    def require(self, operation: Op, resource_type: Res, *names: str) -> None:
        """403 (40301) unless the user may do ``operation`` on each of ``names``."""
        refused = [n for n in names if not self.may(operation, resource_type, n)]
        if refused:
            raise denied(resource_type, refused)

    def require_cluster(self, operation: Op) -> None:
        """403 (40301) unless the user may do ``operation`` on the cluster."""
        if not self.may_cluster(operation):
            raise denied(Res.CLUSTER, ())

    def require_topic_create(self, topic: str) -> None:
        """CreateTopics: Create on the cluster, or on the topic."""
        if not self.may_cluster(Op.CREATE, audit=False):
            self.require(Op.CREATE, Res.TOPIC, topic)
