"""Kafka's error codes as exceptions, shared by every layer.

Each class carries the wire ``code``, Kafka's ``name`` for it and whether a
client may retry (``retriable``), so that storage can raise
``CorruptRecordError("batch at position 0: CRC mismatch")`` and the protocol
layer answers with error code 2 without a translation table of its own.

``error_for_code(code)`` gives the class for a code read off the wire.
"""
from __future__ import annotations


class KafkaError(Exception):
    """Base of every kafkalite error that has a Kafka error code."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    # A transactional producer's view of an error (confluent-kafka's
    # KafkaError.fatal() / txn_requires_abort()): fatal means the producer
    # cannot go on (fenced by a newer instance); txn_requires_abort means the
    # open transaction is lost but abort_transaction() recovers.
    fatal: bool = False
    txn_requires_abort: bool = False
    # KIP-467: the records of a refused batch that caused it, as (index in
    # the batch, message); Produce answers them in record_errors.
    record_errors: list = []

    def __init__(self, message: str | None = None):
        super().__init__(message or self.name)
        self.message = message or self.name

    def __str__(self) -> str:
        return f"[{self.name}] {self.message}"


# (class name, code, Kafka name, retriable)
_ERRORS = [
    ("UnknownServerError", -1, "UNKNOWN_SERVER_ERROR", False),
    ("OffsetOutOfRangeError", 1, "OFFSET_OUT_OF_RANGE", False),
    ("CorruptRecordError", 2, "CORRUPT_MESSAGE", True),
    ("UnknownTopicOrPartitionError", 3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    ("InvalidFetchSizeError", 4, "INVALID_FETCH_SIZE", False),
    ("LeaderNotAvailableError", 5, "LEADER_NOT_AVAILABLE", True),
    ("NotLeaderOrFollowerError", 6, "NOT_LEADER_OR_FOLLOWER", True),
    ("RequestTimedOutError", 7, "REQUEST_TIMED_OUT", True),
    ("BrokerNotAvailableError", 8, "BROKER_NOT_AVAILABLE", False),
    ("ReplicaNotAvailableError", 9, "REPLICA_NOT_AVAILABLE", True),
    ("MessageTooLargeError", 10, "MESSAGE_TOO_LARGE", False),
    ("StaleControllerEpochError", 11, "STALE_CONTROLLER_EPOCH", False),
    ("OffsetMetadataTooLargeError", 12, "OFFSET_METADATA_TOO_LARGE", False),
    ("NetworkError", 13, "NETWORK_EXCEPTION", True),
    ("CoordinatorLoadInProgressError", 14, "COORDINATOR_LOAD_IN_PROGRESS", True),
    ("CoordinatorNotAvailableError", 15, "COORDINATOR_NOT_AVAILABLE", True),
    ("NotCoordinatorError", 16, "NOT_COORDINATOR", True),
    ("InvalidTopicError", 17, "INVALID_TOPIC_EXCEPTION", False),
    ("RecordListTooLargeError", 18, "RECORD_LIST_TOO_LARGE", False),
    ("NotEnoughReplicasError", 19, "NOT_ENOUGH_REPLICAS", True),
    ("NotEnoughReplicasAfterAppendError", 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    ("InvalidRequiredAcksError", 21, "INVALID_REQUIRED_ACKS", False),
    ("IllegalGenerationError", 22, "ILLEGAL_GENERATION", False),
    ("InconsistentGroupProtocolError", 23, "INCONSISTENT_GROUP_PROTOCOL", False),
    ("InvalidGroupIdError", 24, "INVALID_GROUP_ID", False),
    ("UnknownMemberIdError", 25, "UNKNOWN_MEMBER_ID", False),
    ("InvalidSessionTimeoutError", 26, "INVALID_SESSION_TIMEOUT", False),
    ("RebalanceInProgressError", 27, "REBALANCE_IN_PROGRESS", False),
    ("InvalidCommitOffsetSizeError", 28, "INVALID_COMMIT_OFFSET_SIZE", False),
    ("TopicAuthorizationFailedError", 29, "TOPIC_AUTHORIZATION_FAILED", False),
    ("GroupAuthorizationFailedError", 30, "GROUP_AUTHORIZATION_FAILED", False),
    ("ClusterAuthorizationFailedError", 31, "CLUSTER_AUTHORIZATION_FAILED", False),
    ("InvalidTimestampError", 32, "INVALID_TIMESTAMP", False),
    ("UnsupportedSaslMechanismError", 33, "UNSUPPORTED_SASL_MECHANISM", False),
    ("IllegalSaslStateError", 34, "ILLEGAL_SASL_STATE", False),
    ("UnsupportedVersionError", 35, "UNSUPPORTED_VERSION", False),
    ("TopicAlreadyExistsError", 36, "TOPIC_ALREADY_EXISTS", False),
    ("InvalidPartitionsError", 37, "INVALID_PARTITIONS", False),
    ("InvalidReplicationFactorError", 38, "INVALID_REPLICATION_FACTOR", False),
    ("InvalidReplicaAssignmentError", 39, "INVALID_REPLICA_ASSIGNMENT", False),
    ("InvalidConfigurationError", 40, "INVALID_CONFIG", False),
    ("NotControllerError", 41, "NOT_CONTROLLER", True),
    ("InvalidRequestError", 42, "INVALID_REQUEST", False),
    ("UnsupportedForMessageFormatError", 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False),
    ("PolicyViolationError", 44, "POLICY_VIOLATION", False),
    ("OutOfOrderSequenceNumberError", 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
    ("DuplicateSequenceNumberError", 46, "DUPLICATE_SEQUENCE_NUMBER", False),
    ("InvalidProducerEpochError", 47, "INVALID_PRODUCER_EPOCH", False),
    ("InvalidTxnStateError", 48, "INVALID_TXN_STATE", False),
    ("InvalidProducerIdMappingError", 49, "INVALID_PRODUCER_ID_MAPPING", False),
    ("InvalidTransactionTimeoutError", 50, "INVALID_TRANSACTION_TIMEOUT", False),
    ("ConcurrentTransactionsError", 51, "CONCURRENT_TRANSACTIONS", True),
    ("TransactionCoordinatorFencedError", 52, "TRANSACTION_COORDINATOR_FENCED", False),
    ("TransactionalIdAuthorizationFailedError", 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
    ("SecurityDisabledError", 54, "SECURITY_DISABLED", False),
    ("OperationNotAttemptedError", 55, "OPERATION_NOT_ATTEMPTED", False),
    ("KafkaStorageError", 56, "KAFKA_STORAGE_ERROR", True),
    ("LogDirNotFoundError", 57, "LOG_DIR_NOT_FOUND", False),
    ("SaslAuthenticationFailedError", 58, "SASL_AUTHENTICATION_FAILED", False),
    ("UnknownProducerIdError", 59, "UNKNOWN_PRODUCER_ID", False),
    ("ReassignmentInProgressError", 60, "REASSIGNMENT_IN_PROGRESS", False),
    ("NonEmptyGroupError", 68, "NON_EMPTY_GROUP", False),
    ("GroupIdNotFoundError", 69, "GROUP_ID_NOT_FOUND", False),
    ("FetchSessionIdNotFoundError", 70, "FETCH_SESSION_ID_NOT_FOUND", True),
    ("InvalidFetchSessionEpochError", 71, "INVALID_FETCH_SESSION_EPOCH", True),
    ("ListenerNotFoundError", 72, "LISTENER_NOT_FOUND", True),
    ("TopicDeletionDisabledError", 73, "TOPIC_DELETION_DISABLED", False),
    ("FencedLeaderEpochError", 74, "FENCED_LEADER_EPOCH", True),
    ("UnknownLeaderEpochError", 75, "UNKNOWN_LEADER_EPOCH", True),
    ("UnsupportedCompressionTypeError", 76, "UNSUPPORTED_COMPRESSION_TYPE", False),
    ("StaleBrokerEpochError", 77, "STALE_BROKER_EPOCH", False),
    ("OffsetNotAvailableError", 78, "OFFSET_NOT_AVAILABLE", True),
    ("MemberIdRequiredError", 79, "MEMBER_ID_REQUIRED", False),
    ("PreferredLeaderNotAvailableError", 80, "PREFERRED_LEADER_NOT_AVAILABLE", True),
    ("GroupMaxSizeReachedError", 81, "GROUP_MAX_SIZE_REACHED", False),
    ("FencedInstanceIdError", 82, "FENCED_INSTANCE_ID", False),
    ("EligibleLeadersNotAvailableError", 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True),
    ("ElectionNotNeededError", 84, "ELECTION_NOT_NEEDED", True),
    ("NoReassignmentInProgressError", 85, "NO_REASSIGNMENT_IN_PROGRESS", False),
    ("GroupSubscribedToTopicError", 86, "GROUP_SUBSCRIBED_TO_TOPIC", False),
    ("InvalidRecordError", 87, "INVALID_RECORD", False),
    ("UnstableOffsetCommitError", 88, "UNSTABLE_OFFSET_COMMIT", True),
    ("ThrottlingQuotaExceededError", 89, "THROTTLING_QUOTA_EXCEEDED", True),
    ("ProducerFencedError", 90, "PRODUCER_FENCED", False),
    ("ResourceNotFoundError", 91, "RESOURCE_NOT_FOUND", False),
    ("DuplicateResourceError", 92, "DUPLICATE_RESOURCE", False),
    ("UnacceptableCredentialError", 93, "UNACCEPTABLE_CREDENTIAL", False),
    # delegation tokens, which kafkalite does not issue (KIP-48)
    ("DelegationTokenAuthDisabledError", 61, "DELEGATION_TOKEN_AUTH_DISABLED", False),
    ("DelegationTokenRequestNotAllowedError", 64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False),
    ("DelegationTokenAuthorizationFailedError", 65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
     False),
    ("InvalidPrincipalTypeError", 67, "INVALID_PRINCIPAL_TYPE", False),
    ("InvalidUpdateVersionError", 95, "INVALID_UPDATE_VERSION", False),
    ("UnknownTopicIdError", 100, "UNKNOWN_TOPIC_ID", True),
    ("BrokerIdNotRegisteredError", 102, "BROKER_ID_NOT_REGISTERED", False),
    ("InconsistentTopicIdError", 103, "INCONSISTENT_TOPIC_ID", True),
    ("InconsistentClusterIdError", 104, "INCONSISTENT_CLUSTER_ID", False),
    # an incremental fetch naming topics otherwise than its session does (KIP-516)
    ("FetchSessionTopicIdError", 106, "FETCH_SESSION_TOPIC_ID_ERROR", True),
    # a follower's fetch below a tiered leader's local log start (KIP-405)
    ("OffsetMovedToTieredStorageError", 109, "OFFSET_MOVED_TO_TIERED_STORAGE", False),
    ("FencedMemberEpochError", 110, "FENCED_MEMBER_EPOCH", False),
    ("UnreleasedInstanceIdError", 111, "UNRELEASED_INSTANCE_ID", False),
    ("UnsupportedAssignorError", 112, "UNSUPPORTED_ASSIGNOR", False),
    ("StaleMemberEpochError", 113, "STALE_MEMBER_EPOCH", False),
    ("MismatchedEndpointTypeError", 114, "MISMATCHED_ENDPOINT_TYPE", False),
    ("UnsupportedEndpointTypeError", 115, "UNSUPPORTED_ENDPOINT_TYPE", False),
    ("TransactionalIdNotFoundError", 105, "TRANSACTIONAL_ID_NOT_FOUND", False),
    ("TransactionAbortableError", 120, "TRANSACTION_ABORTABLE", False),
    # share groups (KIP-932)
    ("InvalidRecordStateError", 121, "INVALID_RECORD_STATE", False),
    ("ShareSessionNotFoundError", 122, "SHARE_SESSION_NOT_FOUND", True),
    ("InvalidShareSessionEpochError", 123, "INVALID_SHARE_SESSION_EPOCH", True),
    ("FencedStateEpochError", 124, "FENCED_STATE_EPOCH", False),
    ("InvalidRegularExpressionError", 128, "INVALID_REGULAR_EXPRESSION", False),
]

_BY_CODE: dict[int, type[KafkaError]] = {}
__all__ = ["KafkaError", "error_for_code"]

for _cls_name, _code, _name, _retriable in _ERRORS:
    _cls = type(_cls_name, (KafkaError,), {
        "code": _code, "name": _name, "retriable": _retriable,
        "__doc__": f"Kafka error {_code} {_name}.", "__module__": __name__,
    })
    globals()[_cls_name] = _cls
    _BY_CODE[_code] = _cls
    __all__.append(_cls_name)
del _cls_name, _code, _name, _retriable, _cls


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code (UnknownServerError if unknown)."""
    return _BY_CODE.get(code, _BY_CODE[-1])


def error_or_none(code: int, message: str | None = None) -> KafkaError | None:
    """None for code 0, else an instance of the code's exception (with
    ``message``, or Kafka's name for the code): how a response's error_code
    becomes the ``error`` of a result object."""
    if not code:
        return None
    cls = error_for_code(code)
    return cls(message or cls.name)


# Names the rest of the package imports directly; listed so linters and
# readers can see them (they are created from the table above).
UnknownServerError: type[KafkaError]
OffsetOutOfRangeError: type[KafkaError]
CorruptRecordError: type[KafkaError]
MessageTooLargeError: type[KafkaError]
RecordListTooLargeError: type[KafkaError]
InvalidTimestampError: type[KafkaError]
InvalidConfigurationError: type[KafkaError]
InvalidRequestError: type[KafkaError]
UnsupportedForMessageFormatError: type[KafkaError]
KafkaStorageError: type[KafkaError]
UnsupportedCompressionTypeError: type[KafkaError]
InvalidRecordError: type[KafkaError]
InvalidTopicError: type[KafkaError]
