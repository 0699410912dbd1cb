"""Where a new partition's replicas go, and the checks of replica sets a
client names (Kafka's ReplicaPlacer and the assignment checks of its
ReplicationControlManager).

Without racks a topic's replicas are placed by metadata.py
(``create_topic``: partition p's replicas start at broker (crc32(name) + p)
mod n); with several racks (a cluster's nodes) ``rack_aware`` spreads them
over distinct racks. Replica sets given by CreateTopics, CreatePartitions
and AlterPartitionReassignments are checked as Kafka checks them
(``assignments``).

Which process runs it: the supervisor holding the controller, on its
single thread, for topic_control.py and replication_control.py. It reads
the broker registrations (cluster_control.py's ``ClusterControl``, passed
in) and imports nothing of the controller.
"""
from __future__ import annotations

import zlib

from kafkalite import errors


class ReplicaPlacer:
    """``cluster`` the ClusterControl: how many brokers there are, and their racks."""

    def __init__(self, config, cluster):
        self.config = config
        self.cluster = cluster

    def rack_aware(self, name: str, partitions: int, rf: int) -> list[list[int]]:
        """Replicas on distinct racks (a cluster's nodes) where there are
        enough: the brokers are taken alternating between racks (the first
        of each rack, then the second of each, ...), and each partition's
        replicas are consecutive in that order, starting where the
        single-rack placement would start."""
        by_rack: dict = {}
        for b in range(len(self.cluster.brokers)):
            by_rack.setdefault(self.cluster.racks.get(b), []).append(b)
        order = [b for k in range(max(len(v) for v in by_rack.values()))
                 for rack in sorted(by_rack, key=str) for b in by_rack[rack][k:k + 1]]
        n = len(order)
        return [[order[(zlib.crc32(name.encode()) + p + k) % n] for k in range(rf)]
                for p in range(partitions)]

    def replication_factor(self, rf: int) -> int:
        rf = self.config.default_replication_factor if rf == -1 else rf
        if not 1 <= rf <= len(self.cluster.brokers):
            raise errors.InvalidReplicationFactorError(
                f"replication factor must be 1 to {len(self.cluster.brokers)} (the number of "
                f"brokers), "
                f"not {rf}")
        return rf

    def assignments(self, given: list[dict], first_index: int) -> list[list[int]]:
        """CreateTopics / CreatePartitions replica assignments, checked as
        Kafka checks them: consecutive partitions, the same number of
        replicas each, distinct existing brokers."""
        out = []
        for n, a in enumerate(given):
            index = a.get("partition_index", first_index + n)
            replicas = list(a.get("broker_ids") or ())
            if index != first_index + n:
                raise errors.InvalidReplicaAssignmentError(
                    f"partitions in the assignment must be consecutive from {first_index}, "
                    f"not {index}")
            if not replicas or len(set(replicas)) != len(replicas):
                raise errors.InvalidReplicaAssignmentError(
                    f"partition {index}: replicas {replicas} must be distinct and not empty")
            bad = [b for b in replicas if not 0 <= b < len(self.cluster.brokers)]
            if bad:
                raise errors.InvalidReplicaAssignmentError(
                    f"partition {index}: brokers {bad} do not exist (brokers are "
                    f"0..{len(self.cluster.brokers) - 1})")
            if out and len(replicas) != len(out[0]):
                raise errors.InvalidReplicaAssignmentError(
                    "every partition must have the same number of replicas")
            out.append(replicas)
        return out
