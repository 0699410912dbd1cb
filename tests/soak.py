"""How long each crash, fault, fuzz and soak loop of the suite runs.

Every loop takes its length from ``setting(NAME)``: the environment variable
NAME when it is set, else the long setting under ``tools/soak`` (which sets
KAFKALITE_SOAK=1 and runs the tests marked ``slow``), else the short one
that the default run (and CI) uses. The short settings keep every loop's
checker able to catch its planted fault (each checker's own test plants
one at the short setting); the long ones are what a soak before a release
runs. ``tools/soak --list`` prints this table.
"""
from __future__ import annotations

import os

# name: (short, long, what it sets)
SETTINGS: dict[str, tuple[float, float, str]] = {
    "KAFKALITE_CRASH_ITERATIONS": (3, 500, "kill -9 of a log writer (tests/storage/test_recovery.py)"),
    "KAFKALITE_DAMAGE_TRIALS": (50, 2000, "damaged copies of a log (tests/storage/test_recovery.py)"),
    "KAFKALITE_CLEANER_KILLS": (3, 100, "kill -9 during cleaning (tests/storage/test_cleaner.py)"),
    "KAFKALITE_TIERED_KILLS": (3, 50,
                               "kill -9 while copying to remote storage (tests/storage/test_tiered_log.py)"),
    "KAFKALITE_TIERED_KILL_ROUNDS": (3, 50,
                                    "kill -9 of the worker copying a tiered partition to S3 "
                                    "(tests/server/test_tiered_faults.py)"),
    "KAFKALITE_TIERED_OUTAGE_SECONDS": (20, 120,
                                        "seconds of S3 outage the tiered worker serves through "
                                        "(tests/server/test_tiered_faults.py)"),
    "KAFKALITE_ICEBERG_TOPIC_KILLS": (3, 50,
                                      "kill -9 of the workers committing an Iceberg topic's table "
                                      "(tests/server/test_iceberg_topics_kills.py)"),
    "KAFKALITE_ICEBERG_TOPIC_KILL_MODES": (1, 2,
                                           "iceberg.modes the Iceberg topic kill test covers: 1, "
                                           "one chosen by KAFKALITE_ICEBERG_SEED; 2, both"),
    "KAFKALITE_PRODUCER_CRASHES": (3, 100,
                                   "kill -9 of six idempotent writers (tests/storage/test_producer_state.py)"),
    "KAFKALITE_RING_KILL_ROUNDS": (2, 50, "kill -9 of a ring's worker (tests/shm/test_ring.py)"),
    "KAFKALITE_FUZZ_INPUTS": (20_000, 1_000_000,
                              "fuzzed native, ingest and ring inputs (tests/fuzzing.py)"),
    "KAFKALITE_FUZZ_FRAMES": (20_000, 1_000_000,
                              "fuzzed Kafka frames (tests/server/test_kafka_fuzz.py)"),
    "KAFKALITE_CONTROL_FUZZ": (3000, 300_000,
                               "fuzzed control-channel messages (tests/security/test_control_channel.py)"),
    "KAFKALITE_ACL_FUZZ_FRAMES": (1500, 50_000, "fuzzed frames under ACLs (tests/compat/test_acls.py)"),
    "KAFKALITE_EOS_KILLS": (5, 200,
                            "kills in the exactly-once pipeline (tests/server/test_exactly_once.py)"),
    "KAFKALITE_REPLICATION_KILLS": (2, 50,
                                    "leader and follower kills (tests/server/test_replication.py)"),
    "KAFKALITE_PARTITION_ROUNDS": (1, 10,
                                   "network cuts of a cluster node (tests/server/test_cluster_partitions.py)"),
    "KAFKALITE_ORDER_ROUNDS": (1, 20,
                               "cut/heal rounds under a plain acks=1 writer "
                               "(tests/server/test_cluster_partition_order.py)"),
    "KAFKALITE_INGEST_BACKLOG_RECORDS": (50_000, 1_000_000,
                                         "records of one burst through the ingest gateway "
                                         "(tests/client/test_ingest_backlog.py)"),
    "KAFKALITE_KILL_READ_ROUNDS": (1, 30,
                                   "kill -9 during acks=all writes over 16 KB segments, then a "
                                   "read_uncommitted read back (tests/server/test_kill_reads.py)"),
    "KAFKALITE_RESTART_ROUNDS": (5, 200,
                                 "faults of the restart matrix (tests/compat/test_restart_matrix.py)"),
    "KAFKALITE_TXN_SUPERVISOR_KILLS": (3, 50,
                                       "supervisor kills under a transactional producer "
                                       "(tests/server/test_adoption.py)"),
    "KAFKALITE_GROUP_SUPERVISOR_KILLS": (2, 30,
                                         "supervisor kills, 8-25 s apart, under a librdkafka "
                                         "consumer group (tests/server/test_adoption.py)"),
    "KAFKALITE_CLUSTER_KILLS": (2, 20, "node kills of a cluster (tests/server/test_cluster_nodes.py)"),
    "KAFKALITE_SHARE_RECORDS": (1000, 30_000,
                                "records through share groups (tests/server/test_share_groups.py)"),
    "KAFKALITE_PRODUCER_FAULT_SECONDS": (4, 300,
                                         "seconds of producer faults (tests/client/test_producer_faults.py)"),
    "KAFKALITE_STREAMS_KILLS": (2, 20,
                                "kill -9 of a Streams application (tests/streams/test_streams_exactly_once.py)"),
    "KAFKALITE_STREAMS_WORKER_KILLS": (2, 20,
                                       "kill -9 of partition workers under Streams "
                                       "(tests/streams/test_streams_worker_kills.py)"),
    "KAFKALITE_CDC_TXNS": (30, 1000, "PostgreSQL transactions through CDC (tests/connect/test_connect_cdc.py)"),
    "ICEBERG_FAILOVER_ROWS": (200, 20_000,
                              "rows per wave of the Iceberg failover (tests/connect/test_connect_iceberg_distributed.py)"),
    "ICEBERG_EOS_RECORDS": (1200, 10_000,
                            "records through the Iceberg sink's crashes "
                            "(tests/connect/test_connect_iceberg_exactly_once.py)"),
    "ICEBERG_EOS_CRASHES": (2, 20, "Iceberg sink crashes (tests/connect/test_connect_iceberg_exactly_once.py)"),
    "KAFKALITE_PROXY_ROUND_TRIP": (10_000, 100_000,
                                   "JSON records produced over REST v3 and read back over v2 "
                                   "(tests/rest_proxy/test_v2_consumers.py)"),
    "KAFKALITE_PROXY_WRITE_FIRST": (20_000, 1_000_000,
                                    "records streamed over REST v3 by a client that writes the whole "
                                    "body before reading (tests/rest_proxy/test_v3_records.py)"),
    "QUOTA_TEST_SECONDS": (6, 60, "seconds a quota is measured over (tests/compat/test_client_quotas.py)"),
}


def soak() -> bool:
    return os.environ.get("KAFKALITE_SOAK", "") not in ("", "0")


def setting(name: str):
    """The length of loop ``name``: its environment variable, else the long
    setting under tools/soak, else the short one (an int where both are)."""
    short, long, _ = SETTINGS[name]
    kind = int if isinstance(short, int) and isinstance(long, int) else float
    if os.environ.get(name):
        return kind(os.environ[name])
    return kind(long if soak() else short)
