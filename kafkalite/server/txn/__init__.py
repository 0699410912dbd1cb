"""Transactions (KIP-98): the transaction coordinator and producer ids
(Kafka's ``transaction-coordinator`` module).

What it holds:

- txn_coordinator.py: ``TransactionCoordinator``, InitProducerId,
  AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and the transaction admin
  APIs, ending transactions with WriteTxnMarkers to the workers;
- txn_log.py: transaction state in ``__transaction_state``.

Which process runs it: the supervisor (in a cluster, the controller
node's), on its event loop.

What it may import: controller/ (producer ids), server/topic.py (the
internal topics' names),
internal_topic.py, network/ (the request context, WriteTxnMarkers) and the
folders below them; kafkalite.protocol, kafkalite.storage and the bottom.
"""
