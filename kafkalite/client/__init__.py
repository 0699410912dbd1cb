"""kafkalite's Python clients: Producer, Consumer, ShareConsumer, AdminClient.

Config dicts use Kafka's property names; the call shapes follow
confluent-kafka (``produce(..., on_delivery=)``, ``poll``, ``flush``,
``subscribe``, ``consume``, ``seek``...), plus two bulk paths:
``Producer.produce_batch`` and ``Consumer.consume_batch`` (pyarrow).
Each class states its thread-safety in its module docstring. The names load
on first use (kafkalite/_lazy.py): the ingest gateway needs the Producer,
not the Consumer's pyarrow.
"""
from kafkalite._lazy import lazy_exports
from kafkalite.errors import KafkaError

__all__ = [
    "AdminClient", "AlterConfigOpType", "BatchDelivery", "ClusterMetadata", "ConfigEntry",
    "ConfigResource", "ConfigSource", "Consumer", "ConsumerGroupMetadata", "DeletedRecords",
    "KafkaError", "Message", "NewPartitions",
    "NewTopic", "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "Producer",
    "ResourceType", "ShareConsumer", "AcknowledgeType", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE",
    "TopicPartition",
]
__getattr__, __dir__ = lazy_exports(__name__, {
    "kafkalite.client.admin": ("AdminClient", "AlterConfigOpType", "ClusterMetadata",
                               "ConfigEntry", "ConfigResource", "ConfigSource", "DeletedRecords",
                               "NewPartitions", "NewTopic", "ResourceType"),
    "kafkalite.client.consumer": ("Consumer",),
    "kafkalite.client.producer": ("Producer",),
    "kafkalite.client.share_consumer": ("AcknowledgeType", "ShareConsumer"),
    "kafkalite.client.types": ("OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED",
                               "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME",
                               "TIMESTAMP_NOT_AVAILABLE", "BatchDelivery", "ConsumerGroupMetadata",
                               "Message", "TopicPartition"),
})
