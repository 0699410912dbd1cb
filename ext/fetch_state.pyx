# cython: language_level=3
"""The Fetch path's per-partition work, in C (issue 72): a consumer's fetch
naming N partitions with nothing new costs the worker near-constant CPU.

``LeaderStates``: per partition this broker leads, what a fetch with
nothing to read is answered from -- the high watermark, the last stable
offset, the log start offset, the leader epoch -- as C structs, one array
per topic indexed by partition number. The replica manager publishes a
partition's state wherever one of them changes (an append, a follower's
fetch, DeleteRecords, retention, a leadership change), and takes it back
when it stops leading it. Each state also lists the long-poll fetches
watching it (their purgatory ids): an append wakes them through the table
rather than a purgatory key per partition per fetch.

A partition is *idle* for a fetch when the table says this broker leads
it, the fetch's current_leader_epoch is unset (< 0) or the leader's, and
its fetch offset is the high watermark (read_uncommitted) or the last
stable offset (read_committed), and not below the log start offset.
The replica manager would answer it with no error, no records, those
three offsets, no preferred read replica and no aborted transactions ([]
for read_committed, null otherwise); so does the plan, inline (produce_fetch.pyx's FetchedPartitions), without a
Python object. Everything else -- data to read, an error, a follower's
fetch, a request the twin decoder left to the generated code -- goes to
the replica manager's Python read, in request order.

``FetchPlan``: a full fetch's partitions split so, then merged back in
request order with the Python read's answers; a consumer's partitions
with new records in the active segment's last batches are read by the
plan too (tail_read.pyx). An incremental fetch session's partitions plan
from the same table: fetch_session_state.pyx (declared in
fetch_state.pxd).

Who may call: the replica manager and its fetch path, on the worker's
event-loop thread. Nothing here is thread-safe.
"""
cimport cython
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memset

from kafkalite._ext.produce_fetch cimport (FetchedEntry, FetchedPartitions, FetchPartitionEntry,
                                           FetchPartitionList)
from kafkalite._ext.tail_read cimport read_tail


@cython.final
cdef class TopicStates:
    """One topic's partition states, indexed by partition number."""

    def __cinit__(self, str name):
        self.name = name
        self.states = NULL
        self.size = 0
        self.partitions = []

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.size):
            free(self.states[i].waiters)
        free(self.states)

    cdef LeaderState* at(self, int32_t partition) noexcept:
        if partition < 0 or partition >= self.size:
            return NULL
        return &self.states[partition]

    cdef LeaderState* make(self, int32_t partition) except NULL:
        cdef Py_ssize_t size
        cdef LeaderState* grown
        if partition < 0:
            raise ValueError(f"partition {partition} of {self.name}")
        if partition >= self.size:
            size = max(partition + 1, self.size * 2)
            grown = <LeaderState*>realloc(self.states, size * sizeof(LeaderState))
            if grown == NULL:
                raise MemoryError()
            memset(grown + self.size, 0, (size - self.size) * sizeof(LeaderState))
            self.partitions.extend([None] * (size - self.size))
            self.states, self.size = grown, size
        return &self.states[partition]


@cython.final
cdef class LeaderStates:
    """The table of the partitions this broker leads (module docstring)."""

    def __cinit__(self):
        self.topics = {}
        self.watching = 0

    cpdef TopicStates topic(self, name):
        """The topic's states, None when no partition of it was ever led here."""
        return self.topics.get(name)

    def publish(self, str topic, int32_t partition, int64_t high_watermark,
                int64_t last_stable_offset, int64_t log_start_offset, int32_t leader_epoch,
                part=None):
        """This broker leads ``topic``-``partition`` with these offsets;
        ``part``: its Partition, whose log a fetch plan may read its new
        records from in C (tail_read.pyx; kept until another is given)."""
        cdef TopicStates ts = self.topics.get(topic)
        if ts is None:
            ts = self.topics[topic] = TopicStates(topic)
        cdef LeaderState* s = ts.make(partition)
        if part is not None:
            ts.partitions[partition] = part
        s.high_watermark = high_watermark
        s.last_stable_offset = last_stable_offset
        s.log_start_offset = log_start_offset
        s.leader_epoch = leader_epoch
        s.leading = 1

    def stop_leading(self, str topic, int32_t partition):
        """Every fetch of it goes to the Python path from now (an error there)."""
        cdef TopicStates ts = self.topics.get(topic)
        cdef LeaderState* s = ts.at(partition) if ts is not None else NULL
        if s != NULL:
            s.leading = 0
            # its Partition not kept alive by the table (a deleted topic's);
            # leading again publishes it again
            ts.partitions[partition] = None

    def state(self, str topic, int32_t partition):
        """(high watermark, last stable offset, log start offset, leader
        epoch) while this broker leads it, else None: for checks."""
        cdef TopicStates ts = self.topics.get(topic)
        cdef LeaderState* s = ts.at(partition) if ts is not None else NULL
        if s == NULL or not s.leading:
            return None
        return (s.high_watermark, s.last_stable_offset, s.log_start_offset, s.leader_epoch)

    def waiters(self, str topic, int32_t partition) -> list:
        """The ids of the fetches watching the partition."""
        cdef TopicStates ts = self.topics.get(topic)
        cdef LeaderState* s = ts.at(partition) if ts is not None else NULL
        cdef int32_t i
        if s == NULL:
            return []
        return [s.waiters[i] for i in range(s.n_waiters)]

    cdef int add_waiter(self, LeaderState* s, int64_t waiter) except -1:
        cdef int32_t cap
        cdef int64_t* grown
        if s.n_waiters == s.cap_waiters:
            cap = max(4, s.cap_waiters * 2)
            grown = <int64_t*>realloc(s.waiters, cap * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            s.waiters, s.cap_waiters = grown, cap
        s.waiters[s.n_waiters] = waiter
        s.n_waiters += 1
        self.watching += 1
        return 0

    cdef void remove_waiter(self, LeaderState* s, int64_t waiter) noexcept:
        cdef int32_t i
        for i in range(s.n_waiters):
            if s.waiters[i] == waiter:
                s.n_waiters -= 1
                s.waiters[i] = s.waiters[s.n_waiters]
                self.watching -= 1
                return


@cython.final
cdef class Watches:
    """The idle partitions of one fetch, for its long poll to watch through
    the table: a topic's states and a partition each, or a topic's states
    and the answer's inline entries (a full fetch's, whose partitions they
    name)."""

    def __cinit__(self):
        self.topics = []
        self.topic_index = {}
        self.topic = NULL
        self.partition = NULL
        self.size = 0
        self.cap = 0
        self.answered = []
        self.inline = 0

    def __dealloc__(self):
        free(self.topic)
        free(self.partition)

    def __len__(self):
        return self.size + self.inline

    cdef int add_inline_of(self, TopicStates ts, FetchedPartitions fp, Py_ssize_t n) except -1:
        self.answered.append((ts, fp))
        self.inline += n
        return 0

    cdef int32_t index_of(self, TopicStates ts) except -1:
        cdef object found = self.topic_index.get(ts)
        if found is not None:
            return found
        self.topics.append(ts)
        self.topic_index[ts] = len(self.topics) - 1
        return len(self.topics) - 1

    cdef int add(self, int32_t topic, int32_t partition) except -1:
        cdef Py_ssize_t cap
        cdef int32_t* grown_t
        cdef int32_t* grown_p
        if self.size == self.cap:
            cap = max(16, self.cap * 2)
            grown_t = <int32_t*>realloc(self.topic, cap * sizeof(int32_t))
            if grown_t == NULL:
                raise MemoryError()
            self.topic = grown_t
            grown_p = <int32_t*>realloc(self.partition, cap * sizeof(int32_t))
            if grown_p == NULL:
                raise MemoryError()
            self.partition, self.cap = grown_p, cap
        self.topic[self.size] = topic
        self.partition[self.size] = partition
        self.size += 1
        return 0

    def watch(self, LeaderStates table, int64_t waiter):
        """``waiter`` (a purgatory id) is woken by appends to these partitions."""
        self.each(table, waiter, True)

    def unwatch(self, LeaderStates table, int64_t waiter):
        self.each(table, waiter, False)

    cdef int each(self, LeaderStates table, int64_t waiter, bint add) except -1:
        cdef Py_ssize_t i
        cdef LeaderState* s
        cdef TopicStates ts
        cdef FetchedPartitions fp
        for i in range(self.size):
            s = (<TopicStates>self.topics[self.topic[i]]).at(self.partition[i])
            if s != NULL:
                if add:
                    table.add_waiter(s, waiter)
                else:
                    table.remove_waiter(s, waiter)
        for ts, fp in self.answered:
            for i in range(fp.size):
                if fp.entries[i].slow < 0:
                    s = ts.at(fp.entries[i].partition_index)
                    if s != NULL:
                        if add:
                            table.add_waiter(s, waiter)
                        else:
                            table.remove_waiter(s, waiter)
        return 0


# ---------------------------------------------------------------- full fetches

cdef enum:
    TOPIC_SLOW = 0       # the whole topic goes to the Python read, as the request has it
    TOPIC_MIXED = 1      # some partitions inline, the others read in Python
    TOPIC_INLINE = 2     # every partition inline


@cython.final
cdef class FetchPlan:
    """A full fetch split (module docstring). ``slow_topics``: the request
    topics the Python read answers, in order; ``merge(their answer)``: the
    response topics, in request order. Partitions with new records read
    in C (``read_count``, ``read_bytes`` in all, ``sent`` by topic) come
    before any the Python read answers, in request order: ``budget`` and
    ``first`` are KIP-74's byte budget left for the Python read and
    whether it still reads the first partition with records."""

    cdef list kinds
    cdef list fetched
    cdef list names
    cdef list request_topics
    cdef list reads                       # by topic: its partitions read in C, as answer dicts
    cdef readonly list slow_topics
    cdef readonly Watches watches
    cdef readonly Py_ssize_t inline_count  # idle and read in C
    cdef readonly Py_ssize_t idle_count
    cdef ReadBudget reading
    cdef readonly dict sent

    @property
    def read_count(self) -> int:
        return self.reading.read_count

    @property
    def read_bytes(self) -> int:
        return self.reading.read_bytes

    @property
    def budget(self) -> int:
        return self.reading.budget

    @property
    def first(self) -> bool:
        return self.reading.first

    def merge(self, list answered) -> list:
        cdef list out = []
        cdef Py_ssize_t i, j = 0
        cdef FetchedPartitions fp
        cdef int kind
        for i in range(len(self.kinds)):
            kind = self.kinds[i]
            if kind == TOPIC_SLOW:
                out.append(answered[j])
                j += 1
                continue
            fp = self.fetched[i]
            if kind == TOPIC_MIXED:
                topic = answered[j]
                j += 1
                fp.dicts = topic["partitions"]
                topic["partitions"] = fp
                out.append(topic)
            else:
                out.append({"topic": self.names[i], "partitions": fp,
                            "topic_id": self.request_topics[i].get("topic_id")})
            if self.reads[i]:
                settle(fp, self.reads[i])
        if j != len(answered):
            raise ValueError(f"{len(answered)} topics answered for {j} asked")
        return out


cdef int settle(FetchedPartitions fp, list reads) except -1:
    """The partitions read in C into the answer's dicts (``slow`` -2 - i:
    ``reads[i]``), in request order with the Python read's."""
    cdef list dicts = []
    cdef Py_ssize_t k
    cdef FetchedEntry* e
    for k in range(fp.size):
        e = &fp.entries[k]
        if e.slow >= 0:
            dicts.append(fp.dicts[e.slow])
        elif e.slow <= -2:
            dicts.append(reads[-2 - e.slow])
        else:
            continue
        e.slow = <int32_t>(len(dicts) - 1)
    fp.dicts = dicts
    return 0


cdef object read_new_records(TopicStates ts, FetchPartitionEntry* e, bint read_committed,
                             ReadBudget* b, dict sent):
    """A consumer's partition with new records, read in C (tail_read.pyx)
    and answered as the Python read answers it, ``b`` and ``sent`` (bytes
    by topic) counting it; None when it is not that kind (the Python read
    answers it)."""
    cdef LeaderState* s = ts.at(e.partition)
    cdef int64_t max_bytes
    if s == NULL or not s.leading:
        return None
    if e.current_leader_epoch >= 0 and e.current_leader_epoch != s.leader_epoch:
        return None
    if e.fetch_offset < s.log_start_offset or e.fetch_offset >= s.high_watermark:
        return None
    if read_committed and s.last_stable_offset != s.high_watermark:
        return None             # an open transaction: the read stops at the LSO
    part = ts.partitions[e.partition]
    if part is None:
        return None
    max_bytes = max(0, min(<int64_t>e.partition_max_bytes, b.budget))
    records = read_tail(part.log, e.fetch_offset, s.high_watermark, max_bytes, b.first,
                        min(b.region_max, b.answer_max - b.read_bytes), read_committed)
    if records is None:
        return None
    cdef Py_ssize_t n = len(records)
    b.budget -= n
    b.first = False
    b.read_bytes += n
    b.read_count += 1
    sent[ts.name] = sent.get(ts.name, 0) + n
    return {"error_code": 0, "high_watermark": s.high_watermark,
            "last_stable_offset": s.last_stable_offset, "log_start_offset": s.log_start_offset,
            "aborted_transactions": [] if read_committed else None,
            "preferred_read_replica": -1, "records": records,
            "partition_index": e.partition}


def plan_full_fetch(LeaderStates table, list topics, list names, bint read_committed,
                    bint consumer, int64_t budget=0, int64_t region_max=0,
                    int64_t answer_max=0) -> FetchPlan:
    """Split a full fetch's ``topics`` (``names``: each one's name, None
    for a topic id this broker does not know). A consumer's partitions
    with new records are read in C while no
    partition before them goes to the Python read, each up to
    ``region_max`` bytes and all up to ``answer_max`` (larger reads are
    sent from the file); ``budget``: the fetch's max_bytes."""
    cdef FetchPlan plan = FetchPlan()
    cdef Py_ssize_t i, k, n_read
    cdef FetchPartitionList fpl
    cdef FetchPartitionEntry* e
    cdef FetchedPartitions fp
    cdef FetchedEntry* fe
    cdef TopicStates ts
    cdef LeaderState* s
    cdef list slow, reads
    cdef dict copy
    # reads in C keep the Python read's order: they stop at the first
    # partition that goes to it
    cdef bint reading = consumer and region_max > 0
    plan.kinds, plan.fetched, plan.names, plan.reads = [], [], names, []
    plan.request_topics, plan.slow_topics = topics, []
    plan.watches = Watches()
    plan.inline_count = plan.idle_count = 0
    plan.sent = {}
    plan.reading = ReadBudget(budget=budget, read_bytes=0, region_max=region_max,
                              answer_max=answer_max, read_count=0, first=True)
    for i in range(len(topics)):
        topic = topics[i]
        parts = topic.get("partitions")
        ts = table.topic(names[i]) if consumer and names[i] is not None else None
        if ts is None or type(parts) is not FetchPartitionList:
            plan.kinds.append(TOPIC_SLOW)
            plan.fetched.append(None)
            plan.reads.append(None)
            plan.slow_topics.append(topic)
            reading = False
            continue
        fpl = <FetchPartitionList>parts
        fp = FetchedPartitions(read_committed)
        fp.reserve(fpl.size)
        slow = []
        reads = []
        # the answer's entries written in place (room reserved above): an
        # idle partition costs this loop's step and no call
        fe = fp.entries
        for k in range(fpl.size):
            e = &fpl.entries[k]
            s = idle_state(ts, e, read_committed)
            fe.partition_index = e.partition
            if s != NULL:
                fe.high_watermark = s.high_watermark
                fe.last_stable_offset = s.last_stable_offset
                fe.log_start_offset = s.log_start_offset
                fe.slow = -1
            else:
                answer = read_new_records(ts, e, read_committed, &plan.reading,
                                          plan.sent) if reading else None
                if answer is not None:
                    fe.slow = <int32_t>(-2 - len(reads))
                    reads.append(answer)
                else:
                    reading = False
                    fe.slow = <int32_t>len(slow)
                    slow.append(fpl.entry_dict(k))
            fe += 1
        fp.size = fpl.size
        if fpl.size > len(slow):
            # the idle partitions and those read in C: a long poll watches them in the table
            plan.watches.add_inline_of(ts, fp, fpl.size - len(slow))
        plan.inline_count += fpl.size - len(slow)
        plan.idle_count += fpl.size - len(slow) - len(reads)
        plan.fetched.append(fp)
        plan.reads.append(reads)
        if slow:
            copy = dict(topic)
            copy["partitions"] = slow
            plan.slow_topics.append(copy)
            plan.kinds.append(TOPIC_MIXED)
        else:
            plan.kinds.append(TOPIC_INLINE)
    return plan
