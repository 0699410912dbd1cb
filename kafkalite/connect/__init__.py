"""Connect: Kafka Connect's framework, REST API and connectors, in Python.

What it is for: moving data between topics and other systems (files,
SQLite, PostgreSQL) without custom code. Connectors and tasks have Kafka
Connect's API in snake_case (api.py); a Worker runs their tasks in threads
with kafkalite's own Producer and Consumer (worker.py); a Herder keeps the
connectors' configs, states and lifecycle (herder.py; its config
validation connector_validation.py, its KIP-875 offsets endpoints
connector_offsets.py, a connector's context connector_context.py) behind
Kafka Connect's REST API (rest.py). Records pass through converters
(converters.py) and single message transforms (transforms.py) configured
with Kafka's keys (``key.converter``, ``transforms=...``), with Kafka's error
tolerance and dead-letter queue (tolerance.py). Source offsets live in a
local file (standalone mode) or a compacted ``connect-offsets`` topic
(offsets.py); sink tasks commit their consumer group ``connect-<name>``
after flush. Distributed mode (distributed/): workers in a Connect group
share the connectors and their tasks, with configs, task configs and status
in compacted topics.
Exactly-once source tasks (KIP-618, ``exactly.once.source.support``) write
records and source offsets in one transaction (worker.py). A source task
may hand a SourceRecordBatch and a sink task take a SinkRecordBatch
(``put_batch``): the worker's bulk path, with no object per record
(api.py).

The worker's clients are kafkalite's native ones, or with
``kafkalite.client.protocol=kafka`` confluent-kafka's and a Kafka-protocol
group client of its own, so a worker runs against any Kafka-speaking
cluster (clients.py, kafka_group.py). On a secured cluster the REST API
asks for logins, checked by a SASL login to the brokers (rest_login.py),
and a connector's clients log in as the user who created it (creator.py).

What it may import: kafkalite.client (distributed/ also names the group
requests by kafkalite.protocol's ApiKey, as the client's own group code
does; kafka_group.py encodes them with kafkalite.protocol's codecs),
confluent_kafka (clients.py only, and the mirror's source), kafkalite.record,
kafkalite.errors, kafkalite.ratelimit and libraries -- never kafkalite.server
or kafkalite.storage (Connect is a client of the broker).
"""
from kafkalite.connect.api import (ConnectRecord, Connector, SinkConnector, SinkRecord,
                                   SinkRecordBatch, SinkTask, SourceConnector, SourceRecord,
                                   SourceRecordBatch, SourceTask, Task)
from kafkalite.connect.config import ConfigDef, ConfigException
from kafkalite.connect.data import Schema, SchemaBuilder
from kafkalite.connect.errors import ConnectException, DataException, RetriableException
from kafkalite.connect.herder import Herder
from kafkalite.connect.worker import Worker

__all__ = [
    "ConfigDef", "ConfigException", "ConnectException", "ConnectRecord", "Connector",
    "DataException", "Herder", "RetriableException", "Schema", "SchemaBuilder", "SinkConnector",
    "SinkRecord", "SinkRecordBatch", "SinkTask", "SourceConnector", "SourceRecord",
    "SourceRecordBatch", "SourceTask", "Task", "Worker",
]
