"""Connect's exceptions (Kafka Connect's org.apache.kafka.connect.errors).

Who may raise them: connectors, tasks, converters and transforms. The
worker tells a RetriableException (try the same call again) from the others
(the task fails, or with ``errors.tolerance=all`` the record is skipped).
"""


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
