"""What each REST catalog request asks of the server's authorizer, as the user logged in.

A table of the catalog is an Iceberg topic's (``kafkalite.<topic>``), and
holds what a read_committed consumer of the topic reads, so it is guarded
as the topic is, with the operations Kafka asks of the nearest Kafka
request:

- the list of a namespace's tables keeps the tables whose topic the user
  may Describe, the others left out unaudited (Metadata of all topics);
- whether a table exists (HEAD): Describe on its topic (Metadata of one
  topic), asked before the catalog is: a user who may not describe the
  topic learns nothing of whether its table exists;
- loading a table (its metadata, which names every data file): Read on its
  topic (Fetch), which implies Describe;
- the config and the namespaces: any user who logged in (the one
  namespace is ``kafkalite``, the name of no resource);
- a write: refused to every user, super users included (app.py), since
  the partition leaders own the tables.

A denial is the spec's 403 ForbiddenException with Kafka's message of the
authorization exception ("Not authorized to access topics: [t]"), logged
and counted by the authorizer as a Kafka request's is. A super user and
``allow_everyone_if_no_acl_found`` are the authorizer's.

Where the decision comes from: the login in front of the catalog, through
kafkalite/http_access.py (the one authorization layer of the HTTP apps);
without it (security off: anonymous access; or the authorizer off)
everything is allowed. This module never imports ``kafkalite.server``.

Who may call: app.py, on the HTTP server's threads; an ``Access`` is one
request's.
"""
from __future__ import annotations

from kafkalite.http_access import RequestAccess
from kafkalite.iceberg_rest.errors import FORBIDDEN, IcebergError
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res


class Access(RequestAccess):
    """One request's decisions for the user of ``environ``: a table is its topic."""

    __slots__ = ()
    CLUSTER = Res.CLUSTER

    def require(self, operation: Op, topic: str) -> None:
        """403 unless the user may do ``operation`` on ``topic``."""
        if not self.may(operation, Res.TOPIC, topic):
            raise IcebergError(FORBIDDEN, f"Not authorized to access topics: [{topic}]")

    def require_describe(self, table: str) -> None:
        self.require(Op.DESCRIBE, table)

    def require_read(self, table: str) -> None:
        self.require(Op.READ, table)

    def sees_table(self, table: str) -> bool:
        """Whether a list keeps ``table`` (a filter is not an attempt: not audited)."""
        return self.may(Op.DESCRIBE, Res.TOPIC, table, audit=False)
