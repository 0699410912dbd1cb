"""``kafkalite mirror --source BOOTSTRAP --target BOOTSTRAP --topics REGEX
[--groups REGEX] [--source-alias A]``: MirrorMaker 2 as a ready command.

Runs MirrorSourceConnector, MirrorHeartbeatConnector and (with
``--groups``) MirrorCheckpointConnector (kafkalite/connect/connectors/mirror.py)
in a standalone Connect worker whose producer writes to the target; source
offsets live in the target's compacted ``mm2-offsets.<source alias>.internal``
topic, so a mirror restarted after a crash resumes where its last offset
commit was (at least once). Runs until SIGTERM or Ctrl-C, when the tasks
stop and commit their offsets.

Who calls: the ``kafkalite`` process (cli/__init__.py). Light to import.
"""
from __future__ import annotations

import signal
import threading

DESCRIPTION = ("Mirror topics (records, partition counts, configs) and consumer-group offsets "
               "from a source cluster to a target cluster, like Kafka's MirrorMaker 2: remote "
               "topics are named <source-alias>.<topic>.")
HELP = "mirror topics and group offsets to another cluster (MirrorMaker 2)"


def add_arguments(p) -> None:
    p.add_argument("--source", required=True, metavar="BOOTSTRAP",
                   help="the source cluster's bootstrap servers")
    p.add_argument("--target", required=True, metavar="BOOTSTRAP",
                   help="the target cluster's bootstrap servers")
    p.add_argument("--topics", required=True, metavar="REGEX",
                   help="topics to mirror: regexes, comma separated")
    p.add_argument("--groups", metavar="REGEX",
                   help="consumer groups whose offsets to translate (checkpoints)")
    p.add_argument("--source-alias", default="source", help="default: source")
    p.add_argument("--target-alias", default="target", help="default: target")
    p.add_argument("--identity", action="store_true",
                   help="IdentityReplicationPolicy: remote topics keep their names")
    p.add_argument("--no-sync-group-offsets", action="store_true",
                   help="only write checkpoints, do not commit translated offsets on the target")
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between topic refreshes, checkpoints and group syncs "
                        "(default: 5)")
    p.add_argument("--offset-flush-ms", type=int, default=1000,
                   help="source offset commit interval, ms: the at-least-once window "
                        "(default: 1000)")
    p.add_argument("--tasks", type=int, default=1, help="source tasks (default: 1)")
    p.add_argument("--source-protocol", choices=("native", "kafka"), default="native",
                   help="how the source is reached: native (kafkalite's protocol, the default) "
                        "or kafka (Kafka's protocol: an Apache Kafka cluster, or kafkalite's "
                        "Kafka listener)")


def mirror_configs(args) -> dict:
    from kafkalite.connect.connectors.mirror import connector_configs
    iv = str(args.interval)
    extra = {"refresh.topics.interval.seconds": iv, "emit.checkpoints.interval.seconds": iv,
             "sync.group.offsets.interval.seconds": iv,
             "sync.group.offsets.enabled": str(not args.no_sync_group_offsets).lower(),
             "source.cluster.protocol": args.source_protocol}
    if args.identity:
        extra["replication.policy.class"] = "IdentityReplicationPolicy"
    confs = connector_configs(args.source, args.target, args.topics, args.groups,
                              args.source_alias, args.target_alias, **extra)
    for name, c in confs.items():
        if name.endswith("MirrorSourceConnector"):
            c["tasks.max"] = str(args.tasks)
    return confs


def run(args) -> int:
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import KafkaOffsetStore
    client = {"bootstrap.servers": args.target}
    store = KafkaOffsetStore(client, f"mm2-offsets.{args.source_alias}.internal", 5)
    worker = Worker({**client, "offset.flush.interval.ms": args.offset_flush_ms,
                     "worker.id": f"mirror-{args.source_alias}-{args.target_alias}"}, store)
    worker.start()
    herder = Herder(worker)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        for name, conf in mirror_configs(args).items():
            herder.put_connector_config(name, {**conf, "name": name}, True)
        print(f"mirroring {args.topics!r} from {args.source} ({args.source_alias}) to "
              f"{args.target} ({args.target_alias})", flush=True)
        done.wait()
    finally:
        herder.stop()
        worker.stop()
    return 0
