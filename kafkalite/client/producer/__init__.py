"""The producer (Kafka's ``clients.producer`` package): confluent-kafka's
call shapes over kafkalite's native protocol.

What it holds:

- api.py: ``Producer``, what the application calls (produce,
  produce_batch, poll, flush, the transaction calls), its configuration
  (``idempotence``) and its side of the record accumulator, whose
  per-record path is Cython (kafkalite._ext.accumulator: ``Accumulator``,
  ``ProducerBatch``, Kafka's RecordAccumulator and ProducerBatch);
- sender.py: ``Sender``, the background thread that sends the batches and
  turns the answers into delivery reports;
- transaction_manager.py: ``TransactionManager``, the producer's side of
  its transactions.

Which process runs it: the application's, and those of kafkalite's
services that are clients of the broker (Connect's workers, Streams, the
REST proxy, the Spark sink); on the caller's threads and the producer's
sender thread.

What it may import: the rest of client/, kafkalite.protocol,
kafkalite.record, kafkalite._ext, kafkalite.errors and kafkalite.ratelimit;
never kafkalite.server or kafkalite.storage.
"""
from kafkalite.client.producer.api import Producer, idempotence

__all__ = ["Producer", "idempotence"]
