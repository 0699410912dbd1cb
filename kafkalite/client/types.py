"""Value types of the client API, shaped like confluent-kafka's.

``Message`` (kafkalite._ext.messages) and ``TopicPartition`` have confluent-kafka's accessors
(``msg.value()``, ``msg.offset()``...), so code written against it reads
the same. Errors are kafkalite.errors.KafkaError instances: ``err.code`` and
``err.name`` are attributes here, not methods.
"""
from __future__ import annotations

# Message is a C type (one allocation per consumed record or delivery
# report), with confluent-kafka's accessors
from kafkalite._ext.messages import Message  # noqa: F401  (re-exported)

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


class TopicPartition:
    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch", "error")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID,
                 metadata: str | None = None, leader_epoch: int | None = None):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error = None

    def _key(self):
        return (self.topic, self.partition)

    def __eq__(self, other):
        return isinstance(other, TopicPartition) and self._key() == other._key() and \
            self.offset == other.offset

    def __hash__(self):
        return hash(self._key())

    def __lt__(self, other):
        return self._key() < other._key()

    def __repr__(self):
        err = f", error={self.error}" if self.error else ""
        return f"TopicPartition({self.topic!r}, {self.partition}, offset={self.offset}{err})"


class BatchDelivery:
    """The delivery report of one ``produce_batch`` call's batch."""

    __slots__ = ("_topic", "_partition", "_offset", "count", "_error")

    def __init__(self, topic, partition, offset, count, error=None):
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self.count = count
        self._error = error

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        """Offset of the batch's first record."""
        return self._offset

    def error(self):
        return self._error

    def __repr__(self):
        return (f"BatchDelivery({self._topic}-{self._partition}@{self._offset}, "
                f"count={self.count}, error={self._error})")


class ConsumerGroupMetadata:
    """A consumer's group membership as a transactional producer hands it to
    ``send_offsets_to_transaction`` (confluent-kafka's
    ``consumer_group_metadata()``): the offsets commit only if the member is
    still the group's at that generation (KIP-447 zombie fencing)."""

    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")

    def __init__(self, group_id: str, generation_id: int = -1, member_id: str = "",
                 group_instance_id: str | None = None):
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self):
        return (f"ConsumerGroupMetadata({self.group_id!r}, generation={self.generation_id}, "
                f"member={self.member_id!r})")
