"""kafkalite's Python clients: Producer, Consumer, AdminClient.

Config dicts use Kafka's property names; the call shapes follow
confluent-kafka (``produce(..., on_delivery=)``, ``poll``, ``flush``,
``subscribe``, ``consume``, ``seek``...), plus two bulk paths:
``Producer.produce_batch`` and ``Consumer.consume_batch`` (pyarrow).
Each class states its thread-safety in its module docstring.
"""
from kafkalite.client.admin import (AdminClient, AlterConfigOpType, ClusterMetadata, ConfigEntry,
                                    ConfigResource, ConfigSource, DeletedRecords, NewPartitions,
                                    NewTopic, ResourceType)
from kafkalite.client.consumer import Consumer
from kafkalite.client.producer import Producer
from kafkalite.client.types import (OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED,
                                    TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
                                    TIMESTAMP_NOT_AVAILABLE, BatchDelivery, ConsumerGroupMetadata,
                                    Message, TopicPartition)
from kafkalite.errors import KafkaError

__all__ = [
    "AdminClient", "AlterConfigOpType", "BatchDelivery", "ClusterMetadata", "ConfigEntry",
    "ConfigResource", "ConfigSource", "Consumer", "ConsumerGroupMetadata", "DeletedRecords",
    "KafkaError", "Message", "NewPartitions",
    "NewTopic", "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "Producer",
    "ResourceType", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE",
    "TopicPartition",
]
