"""Topology: the processor graph a StreamsBuilder built, cut into
sub-topologies.

Nodes (processors.py) are descriptions shared by every task; what changes
per task (stores, stream time) lives in the task (task.py). A sub-topology
is a connected part of the graph: its source topics are read by one task per
partition, so they must be co-partitioned (the same partition count),
which ``check_copartitioning`` tells the runtime before anything runs. A
repartition topic cuts the graph: its sink belongs to the upstream
sub-topology and its source starts a downstream one, as in Kafka Streams.

Internal topic names (repartition and changelog topics) are suffixes here;
the runtime prefixes them with ``application.id``.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class TopologyException(Exception):
    """A topology that cannot run as built (Kafka Streams' TopologyException)."""


@dataclass
class StoreSpec:
    """A state store the topology needs; one instance per task."""
    name: str
    kind: str                  # "rocksdb" | "in_memory"
    value_serde: object
    logged: bool = True
    window_size_ms: int | None = None   # window stores
    retention_ms: int | None = None     # window stores: entries older than stream time - this go
    time_suffix: int = 8                # window stores: 8 (window start) or 16 (timestamp + seq)

    def changelog(self, application_id: str) -> str:
        return f"{application_id}-{self.name}-changelog"


@dataclass
class GlobalTableSpec:
    """A GlobalKTable: every instance reads every partition of ``topic``
    into its own copy of ``store`` (keyed by the topic's key bytes; the
    topic is the store's changelog, so the store is not logged)."""
    topic: str
    store: StoreSpec


@dataclass
class SubTopology:
    id: int
    nodes: list = field(default_factory=list)
    sources: dict = field(default_factory=dict)    # topic (or internal suffix) -> SourceNode
    stores: dict = field(default_factory=dict)     # name -> StoreSpec


class Topology:
    def __init__(self):
        self.nodes: list = []
        self.stores: dict[str, StoreSpec] = {}
        self.internal_topics: set[str] = set()      # suffixes: "<name>-repartition"
        self.global_tables: dict[str, GlobalTableSpec] = {}    # store name -> spec
        self._counter = 0
        self._subtopologies: list[SubTopology] | None = None

    def next_name(self, prefix: str) -> str:
        name = f"{prefix}-{self._counter:010d}"
        self._counter += 1
        return name

    def add(self, node, parents=()):
        if self._subtopologies is not None:
            raise TopologyException("the topology was already built: build a new one")
        self.nodes.append(node)
        for p in parents:
            p.children.append(node)
            node.parents.append(p)
        return node

    def add_global_table(self, topic: str, spec: StoreSpec) -> GlobalTableSpec:
        if spec.name in self.stores or spec.name in self.global_tables:
            raise TopologyException(f"a store named {spec.name!r} already exists")
        if any(g.topic == topic for g in self.global_tables.values()):
            raise TopologyException(f"topic {topic!r} is read by two global tables")
        self.global_tables[spec.name] = g = GlobalTableSpec(topic, spec)
        return g

    def add_store(self, spec: StoreSpec) -> StoreSpec:
        if spec.name in self.stores or spec.name in self.global_tables:
            raise TopologyException(f"a store named {spec.name!r} already exists")
        self.stores[spec.name] = spec
        return spec

    # ---- structure ----
    def subtopologies(self) -> list[SubTopology]:
        if self._subtopologies is None:
            seen: dict[int, int] = {}
            subs: list[SubTopology] = []
            # nodes that share a store (a stream-table join and the table) run
            # in one task, so they are one sub-topology, as in Kafka Streams
            users: dict[str, list] = {}
            for node in self.nodes:
                for s in getattr(node, "store_names", ()):
                    users.setdefault(s, []).append(node)
            for node in self.nodes:
                if id(node) in seen:
                    continue
                sub = SubTopology(len(subs))
                stack = [node]
                while stack:
                    n = stack.pop()
                    if id(n) in seen:
                        continue
                    seen[id(n)] = sub.id
                    sub.nodes.append(n)
                    stack.extend(n.children)
                    stack.extend(n.parents)
                    for s in getattr(n, "store_names", ()):
                        stack.extend(users[s])
                subs.append(sub)
            for sub in subs:
                sub.nodes.sort(key=self.nodes.index)
                for n in sub.nodes:
                    for t in getattr(n, "topics", ()):
                        if any(g.topic == t for g in self.global_tables.values()):
                            raise TopologyException(f"topic {t!r} is read by a global table "
                                                    f"and a source")
                        if t in sub.sources or any(t in s.sources for s in subs):
                            raise TopologyException(f"topic {t!r} is read by two sources")
                        sub.sources[t] = n
                    for s in getattr(n, "store_names", ()):
                        sub.stores[s] = self.stores[s]
            self._subtopologies = subs
        return self._subtopologies

    def source_topics(self, application_id: str) -> dict[str, int]:
        """{topic name: sub-topology id} of every source, internal ones named."""
        return {self.topic_name(t, application_id): sub.id
                for sub in self.subtopologies() for t in sub.sources}

    def topic_name(self, topic: str, application_id: str) -> str:
        return f"{application_id}-{topic}" if topic in self.internal_topics else topic

    def check_copartitioning(self, partitions: dict[str, int], application_id: str) -> dict:
        """{sub-topology id: partition count}, from the source topics'
        partition counts (internal repartition topics may be missing: they
        get the count of the sub-topology that writes them, or of the input
        with the most partitions, as in Kafka Streams)."""
        counts = {}
        for sub in self.subtopologies():
            known = {t: partitions[self.topic_name(t, application_id)] for t in sub.sources
                     if t not in self.internal_topics}
            if known and len(set(known.values())) > 1:
                raise TopologyException(
                    f"sub-topology {sub.id} reads topics that are not co-partitioned: "
                    + ", ".join(f"{t} has {n} partitions" for t, n in sorted(known.items()))
                    + "; a task per partition needs the same partition count on each (a join "
                    "reads both sides in one task: repartition one side to match)")
            if known:
                counts[sub.id] = next(iter(known.values()))
        default = max(counts.values(), default=1)
        for sub in self.subtopologies():
            counts.setdefault(sub.id, default)
        return counts

    def describe(self) -> str:
        """Kafka Streams' TopologyDescription, as text."""
        lines = ["Topologies:"]
        for name, g in self.global_tables.items():
            lines.append(f"   Global store: {name} (topic: {g.topic})")
        for sub in self.subtopologies():
            lines.append(f"   Sub-topology: {sub.id}")
            for n in sub.nodes:
                lines.append(f"    {n.describe()}")
                if n.children:
                    lines.append(f"      --> {', '.join(c.name for c in n.children)}")
                if n.parents:
                    lines.append(f"      <-- {', '.join(p.name for p in n.parents)}")
        return "\n".join(lines) + "\n"
