"""Connect's exceptions (Kafka Connect's org.apache.kafka.connect.errors).

Who may raise them: connectors, tasks, converters and transforms. The
worker tells a RetriableException (try the same call again) from the others
(the task fails, or with ``errors.tolerance=all`` the record is skipped).
"""


# Kafka's answer (HTTP 409) to a request the group cannot serve right now: a worker
# rebalance moved what it needs, or it reached a worker that is no longer the leader
REBALANCE_CONFLICT = ("Cannot complete request because of a conflicting operation (e.g. worker "
                      "rebalance)")


class ConnectException(Exception):
    """A failure of a connector, task or the framework."""


class DataException(ConnectException):
    """A record that cannot be converted or transformed."""


class RetriableException(ConnectException):
    """A transient failure: the worker calls again (poll, put) later."""


class NotFoundException(ConnectException):
    """An unknown connector, task or plugin (REST: 404)."""


class AlreadyExistsException(ConnectException):
    """A connector name already in use (REST: 409)."""


class BadRequestException(ConnectException):
    """A request the herder refuses as it stands (REST: 400)."""


class RebalanceNeededException(ConnectException):
    """A request that needs a unit's owner while the group is moving it
    (REST: 409, as Kafka's; the client tries again after the rebalance)."""


class NotLeaderException(ConnectException):
    """A config write asked of a worker that is not the Connect group's
    leader (Kafka's NotLeaderException): the REST layer forwards the
    request to ``leader_url``, or answers 409 when no leader is known or
    the request was forwarded already. ``settled()`` (optional) waits until
    this worker's view shows what the leader wrote."""

    def __init__(self, message: str, leader_url: str | None, settled=None):
        super().__init__(message)
        self.leader_url = leader_url
        self.settled = settled


class ForbiddenException(ConnectException):
    """An internal request signed with a key other than the cluster's
    session key (REST: 403, as Kafka's)."""
