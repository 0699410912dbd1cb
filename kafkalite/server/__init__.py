"""The broker: a supervisor process and its partition worker processes
(``kafkalite server``), or, on a broker node of a cluster, the workers
alone under another node's controller.

The folders, one job each, from the bottom up (the order
tests/test_layers.py checks, SERVER_FOLDERS; each folder's ``__init__``
says what it holds, which process runs it and what it may import):

- auth/: SASL and TLS per listener, the users, logins, the ACL
  authorizer. Every broker process.
- network/: the request pipeline (``RequestDispatcher``), the native and
  Kafka listeners, TLS, the relay, requests between broker processes,
  quotas. Every broker process.
- replica/: the replica manager, partitions, the purgatory, the replica
  fetcher, the ring gateway, the share-partitions. The workers.
- controller/: the controller, the metadata (on disk or in PostgreSQL),
  the ACL, SCRAM and quota managers. The supervisor.
- share/: share groups, the coordinator side. The supervisor.
- group/: the group coordinator, classic and KIP-848 groups, their logs.
  The supervisor.
- txn/: the transaction coordinator and its log. The supervisor.
- node/: the processes' main loops and lives (supervisor, worker, broker
  node, the early spawn); it wires the other folders together.

At this top, modules shared by several folders: ratelimit.py (the name
the listeners import RateLimitedLog by), topic.py (the internal topics'
names and the rules of a topic's name, Kafka's ``Topic``), listeners.py
(the node's named Kafka listeners, read from ``listeners``,
``advertised.listeners`` and ``listener.security.protocol.map``), config.py (``ServerConfig`` and
``SETTINGS``: every process reads it), config_registry.py (the dynamic
configs' rules, the controller's), internal_topic.py (the coordinators'
internal topics on a ``Partition``, the supervisor's) and metrics.py
(counted in every broker process, served over HTTP by the supervisor).

What server/ may import: kafkalite.protocol, kafkalite.storage,
kafkalite.shm, kafkalite.local_socket and the bottom (record, _ext,
errors, ratelimit); never kafkalite.client or a package above it (the CLI
hands the supervisor the web console and the schema registry).
docs/architecture.md maps which process runs which file.
"""
