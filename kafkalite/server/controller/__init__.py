"""The controller: cluster metadata and the admin APIs (Kafka's
``controller`` and ``metadata`` modules, one ``*_control`` module per
concern as Kafka has one ``*ControlManager``).

What it holds:

- controller.py: ``Controller`` (Kafka's QuorumController), the admin
  APIs' handler table, Metadata, DescribeCluster, DescribeQuorum and the
  wiring of the managers below;
- cluster_control.py: broker registrations, fencing, the brokers'
  endpoints (ClusterControlManager);
- replication_control.py: leaders, ISR changes, elections, reassignment,
  and the assigns that tell the brokers (ReplicationControlManager);
- placement.py: where new replicas go (ReplicaPlacer);
- topic_control.py: CreateTopics, DeleteTopics, CreatePartitions;
- config_control.py: topic and broker configs and their APIs
  (ConfigurationControlManager);
- metadata.py: the metadata on disk (``cluster-metadata.json``);
- cluster_store.py: the metadata and the controller lease in PostgreSQL
  (``--cluster``), and the cluster's users mirrored to each node;
- acl_control.py, scram_control.py, quota_control.py: ACLs, SCRAM
  credentials and client quotas: their APIs, their store, and how they
  reach the workers;
- producer_ids.py: producer id blocks (``ProducerIdManager``, Kafka's
  ProducerIdControlManager), also used by the transaction coordinator.

Which process runs it: the supervisor (in a cluster, the supervisor of
the node holding the controller lease), on its event loop. A broker node
uses cluster_store.py (its broker ids, the users mirror); a worker reads
quota_control.py's ``quotas_from_json``.

What it may import: network/, auth/, replica/ (the Produce and
DeleteRecords shapes and blank answers, for the partitions this process
does not host), server/config.py, config_registry.py and internal_topic.py;
kafkalite.protocol, kafkalite.storage and the bottom.
"""
