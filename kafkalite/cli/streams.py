"""``kafkalite streams describe|reset <application.id>``: a Streams
application seen from the broker, and Kafka's application reset tool.

describe: the topology (with ``--topology module:attribute``, a Topology,
a StreamsBuilder or a function returning one), the group's state and
members, its tasks (with a topology: ``<sub-topology>_<partition>``, Kafka's
task ids; without: one per input partition) with their partitions'
committed offsets, log ends and lag, and the application's internal topics
(``<application.id>-...-changelog`` / ``-repartition``). With ``--state-dir``
(an instance's ``state.dir``, on its host), also the local state of each task
there: per store its changelog partition, the checkpointed offset and the
log end (what a restart would restore), and the last restore's progress
(restored of total, done or in progress), from the task directory's
``.checkpoint`` and ``.restore`` files (kafkalite/streams/restore.py).

reset (kafka-streams-application-reset): refused while the group has
members; the committed offsets of the input topics go to each partition's
log start (``--input-topics``, default: every non-internal topic the group
committed), those of the repartition topics to 0 (the topics are created
again empty), and the internal topics are deleted. With ``--dry-run`` only
the plan is printed. Local state needs no cleaning: a task rebuilds its
stores from the changelog (now empty) when it starts, since a checkpoint
beyond a changelog's end is not trusted.

Who calls: the ``kafkalite`` process (cli/__init__.py). Errors raise
(ValueError, KafkaError): the package's main prints one line and exits
non-zero. This module stays light to import (no pyarrow unless
``--topology`` is given).
"""
from __future__ import annotations

import importlib
import sys

from kafkalite.cli.arguments import client_args

DESCRIPTION = ("A Kafka Streams application on the broker: describe its topology, tasks, lag and "
               "internal topics, or reset it (like kafka-streams-application-reset).")
HELP = "describe or reset a Streams application"


def add_arguments(sub) -> None:
    """The ``describe`` and ``reset`` actions under a ``streams`` parser."""
    ssub = sub.add_subparsers(dest="action", required=True)
    d = ssub.add_parser("describe", help="topology, members, tasks with lag, internal topics")
    d.add_argument("application_id", metavar="APPLICATION_ID")
    d.add_argument("--topology", metavar="MODULE:ATTRIBUTE",
                   help="where the application's Topology (or StreamsBuilder, or a function "
                        "returning one) is, to print it and name the tasks")
    d.add_argument("--state-dir", metavar="DIR",
                   help="an instance's state.dir: print its tasks' checkpoints and restore "
                        "progress")
    r = ssub.add_parser("reset", help="committed offsets to the inputs' start, internal topics "
                                      "deleted (refused while instances run)")
    r.add_argument("application_id", metavar="APPLICATION_ID")
    r.add_argument("--input-topics", metavar="T1,T2",
                   help="input topics to rewind (default: every non-internal topic with "
                        "committed offsets)")
    r.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    for p in ssub.choices.values():
        client_args(p)


def load_topology(spec: str):
    """A Topology from ``module:attribute``."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise ValueError(f"--topology {spec!r} is not MODULE:ATTRIBUTE")
    from kafkalite.streams import StreamsBuilder, Topology
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--topology {spec!r}: {exc}") from None
    if callable(obj) and not isinstance(obj, (Topology, StreamsBuilder)):
        obj = obj()
    if isinstance(obj, StreamsBuilder):
        obj = obj.build()
    if not isinstance(obj, Topology):
        raise ValueError(f"--topology {spec!r} is a {type(obj).__name__}, not a Topology or "
                         f"StreamsBuilder")
    return obj


def _internal(app: str, name: str) -> bool:
    return name.startswith(f"{app}-") and name.endswith(("-changelog", "-repartition"))


def run(args) -> int:
    from kafkalite.client import AdminClient
    from kafkalite.cli.client_config import client_config
    from kafkalite.cli.output import print_table
    admin = AdminClient(client_config(args))
    try:
        if args.action == "describe":
            return describe(args, admin, print_table)
        return reset(args, admin, print_table)
    finally:
        admin.close()


def describe(args, admin, table) -> int:
    app = args.application_id
    topology = load_topology(args.topology) if args.topology else None
    if topology is not None:
        sys.stdout.write(topology.describe())
    group = admin.describe_consumer_groups([app])[app].result()
    print(f"Application {app}: group state {group.state}, {len(group.members)} member(s)")
    for m in group.members:
        parts = ", ".join(f"{tp.topic}-{tp.partition}" for tp in
                          sorted(m.assignment, key=lambda tp: (tp.topic, tp.partition)))
        print(f"  member {m.member_id} ({m.client_id}, {m.host}): {parts or 'no partitions'}")
    subs = topology.source_topics(app) if topology is not None else {}
    tasks: dict = {}
    for p in admin.describe_group_offsets(app):
        if _internal(app, p.topic) and p.topic.endswith("-changelog"):
            continue
        task = f"{subs[p.topic]}_{p.partition}" if p.topic in subs else f"{p.topic}-{p.partition}"
        tasks.setdefault(task, []).append(p)
    rows = []
    for task, parts in sorted(tasks.items()):
        lags = [p.lag for p in parts]
        rows.append([task, ", ".join(f"{p.topic}-{p.partition}" for p in parts),
                     ", ".join("-" if p.committed < 0 else str(p.committed) for p in parts),
                     ", ".join(str(p.log_end) for p in parts),
                     None if None in lags else sum(lags),
                     next((p.client_id for p in parts if p.client_id), None)])
    print("Tasks:")
    table(rows, ["TASK", "PARTITIONS", "COMMITTED", "LOG-END", "LAG", "OWNER"])
    meta = admin.list_topics(timeout=args.timeout)
    internal = sorted(t for t in meta.topics if _internal(app, t))
    print("Internal topics:" + ("" if internal else " none"))
    for t in internal:
        print(f"  {t} ({len(meta.topics[t].partitions)} partitions)")
    if args.state_dir:
        local_state(args.state_dir, app, admin, table)
    return 0


def local_state(state_dir: str, app: str, admin, table) -> None:
    """The tasks under ``<state_dir>/<app>``: checkpoints and restore progress."""
    import os

    from kafkalite.streams.restore import read_checkpoint, read_progress
    root = os.path.join(state_dir, app)
    if not os.path.isdir(root):
        raise ValueError(f"--state-dir {state_dir!r} holds no state of application {app!r}")
    rows, wanted = [], {}
    for task in sorted(os.listdir(root)):
        d = os.path.join(root, task)
        if task == "global" or not os.path.isdir(d):
            continue
        checkpoint, progress = read_checkpoint(d), read_progress(d)
        stores = {name: (e["changelog"], e["partition"]) for name, e in progress.items()}
        for (topic, partition) in checkpoint:
            if (topic, partition) not in stores.values():
                name = topic[len(app) + 1:-len("-changelog")]
                stores[name] = (topic, partition)
        for name, tp in sorted(stores.items()):
            wanted[tp] = -1
            rows.append((task, name, tp, checkpoint.get(tp), progress.get(name)))
    ends = admin.list_offsets(wanted) if wanted else {}
    out = []
    for task, name, (topic, partition), ckpt, prog in rows:
        end = ends.get((topic, partition), -1)
        restore = "-" if prog is None else (
            f"{prog['restored']} of {max(prog['end'] - prog['start'], 0)} from {prog['start']} "
            + ("done" if prog["done"] else "in progress"))
        out.append([task, name, f"{topic}-{partition}", "-" if ckpt is None else ckpt,
                    end, "-" if ckpt is None or end < 0 else max(end - ckpt, 0), restore])
    print(f"Local state in {root}:")
    table(out, ["TASK", "STORE", "CHANGELOG", "CHECKPOINT", "LOG-END", "TAIL", "LAST-RESTORE"])


def reset(args, admin, table) -> int:
    from kafkalite.client import TopicPartition
    app = args.application_id
    desc = admin.describe_consumer_groups([app])[app]
    if desc.exception() is None and desc.result().members:
        raise ValueError(f"application {app!r} has {len(desc.result().members)} running "
                         f"member(s); stop every instance before resetting it")
    committed = [tp for tp in admin.list_consumer_group_offsets(app).result() if tp.offset >= 0]
    meta = admin.list_topics(timeout=args.timeout)
    if args.input_topics:
        inputs = [t.strip() for t in args.input_topics.split(",") if t.strip()]
        missing = [t for t in inputs if t not in meta.topics]
        if missing:
            raise ValueError(f"input topics {missing} do not exist")
    else:
        inputs = sorted({tp.topic for tp in committed if not _internal(app, tp.topic)})
    plan = admin.plan_offset_reset(app, inputs, "to-earliest") if inputs else []
    plan += [TopicPartition(tp.topic, tp.partition, 0) for tp in committed
             if _internal(app, tp.topic) and tp.topic in meta.topics]
    internal = sorted(t for t in meta.topics if _internal(app, t))
    if not plan and not internal:
        raise ValueError(f"application {app!r} has no committed offsets and no internal topics: "
                         f"nothing to reset")
    table([[tp.topic, tp.partition, tp.offset] for tp in plan],
          ["TOPIC", "PARTITION", "NEW-OFFSET"])
    for t in internal:
        print(f"delete internal topic {t}")
    if args.dry_run:
        print("Dry run: nothing changed.")
        return 0
    if plan:
        admin.alter_consumer_group_offsets(app, plan).result()
    if internal:
        for f in admin.delete_topics(internal, operation_timeout=args.timeout).values():
            f.result()
    print(f"Reset application {app}: {len(plan)} committed offset(s) rewound, "
          f"{len(internal)} internal topic(s) deleted.")
    return 0
