# cython: language_level=3
"""An incremental fetch session's partitions (KIP-227; the session itself
is server/replica/fetch_session.py), in C (issue 72): looking at 10,000
idle ones costs microseconds.

``SessionPartitions``: the request parameters last sent, and the high
watermark and log start offset last answered, which decide whether an
idle partition is in the next incremental answer at all; ``SessionPlan``
is its split for one fetch -- idle partitions (as fetch_state.pyx says,
from the replica manager's table of leader states) answered in C, the
others read in Python -- and ``respond`` its answer (Kafka's
CachedPartition.maybeUpdateResponseData rules).

Who may call: the fetch path (fetch_session.py, fetch_handler.py), on
the worker's event-loop thread. Nothing here is thread-safe.
"""
cimport cython
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from cpython.object cimport PyObject
from libc.string cimport memmove

from kafkalite._ext.fetch_state cimport (LeaderState, LeaderStates, ReadBudget, TopicStates,
                                         Watches, idle_state, read_new_records)
from kafkalite._ext.produce_fetch cimport (FetchedEntry, FetchedPartitions, FetchPartitionEntry,
                                           FetchPartitionList)


cdef struct SessionEntry:
    FetchPartitionEntry request         # as last sent
    int64_t cached_high_watermark       # as last answered (-1: never, or an error)
    int64_t cached_log_start_offset
    int32_t topic                       # index in the session's topics
    int32_t live


cdef enum:
    EMPTY_KEY = -1
    ENTRY_CHANGED = 1      # idle, but its offsets moved since the last answer: answered inline
    ENTRY_SLOW = 2         # read in Python; answered if Kafka's rules say so
    ENTRY_READ = 3         # new records read in C (fetch_state.pyx); answered so too

# a partition with records in an answer goes to the end of the session's
# order, so the next fetch's byte budget reaches the others first (Kafka's)


cdef inline int64_t entry_key(int32_t topic, int32_t partition) noexcept:
    return (<int64_t>topic << 32) | <int64_t><uint32_t>partition


cdef inline Py_ssize_t hash_slot(int64_t key, Py_ssize_t mask) noexcept:
    cdef uint64_t h = <uint64_t>key * <uint64_t>0x9E3779B97F4A7C15
    return <Py_ssize_t>((h ^ (h >> 29)) & <uint64_t>mask)


cdef inline int64_t records_length(dict p) except -1:
    """The bytes an answered partition carries (a same-host follower's
    file region counts as what it names)."""
    records = p.get("records")
    cdef int64_t n = 0
    if records is not None:
        length = getattr(records, "length", None)       # a file region
        n = length if length is not None else len(records)
    region = p.get("local_region")
    if region:
        n += region.get("length", 0)
    return n


cdef int64_t* malloc_keys(Py_ssize_t cap) noexcept:
    cdef int64_t* keys = <int64_t*>calloc(cap, sizeof(int64_t))
    cdef Py_ssize_t i
    if keys != NULL:
        for i in range(cap):
            keys[i] = EMPTY_KEY
    return keys


@cython.final
cdef class SessionPartitions:
    """An incremental fetch session's partitions (module docstring), in the
    session's order; a partition is keyed by its topic (its name, or its
    id in a session of topic ids) and index."""

    cdef SessionEntry* pool
    cdef Py_ssize_t pool_size
    cdef Py_ssize_t pool_cap
    cdef int32_t* free_ids
    cdef Py_ssize_t n_free
    cdef int32_t* order
    cdef Py_ssize_t size
    cdef Py_ssize_t order_cap
    cdef int64_t* hkeys
    cdef int32_t* hvals
    cdef Py_ssize_t hmask
    cdef readonly bint uses_topic_ids
    cdef readonly list topic_names      # by topic index: the name sent ('' with topic ids)
    cdef readonly list topic_ids        # by topic index: the id sent (zero without)
    cdef dict topic_index               # name or id -> topic index

    def __cinit__(self, bint uses_topic_ids):
        self.pool = NULL
        self.pool_size = self.pool_cap = 0
        self.free_ids = NULL
        self.n_free = 0
        self.order = NULL
        self.size = self.order_cap = 0
        self.hkeys = NULL
        self.hvals = NULL
        self.hmask = -1
        self.uses_topic_ids = uses_topic_ids
        self.topic_names, self.topic_ids, self.topic_index = [], [], {}

    def __dealloc__(self):
        free(self.pool)
        free(self.free_ids)
        free(self.order)
        free(self.hkeys)
        free(self.hvals)

    def __len__(self):
        return self.size

    # ---- the index: (topic, partition) -> entry id, open addressing ----

    cdef int32_t find(self, int64_t key) noexcept:
        cdef Py_ssize_t i
        if self.hmask < 0:
            return -1
        i = hash_slot(key, self.hmask)
        while self.hkeys[i] != EMPTY_KEY:
            if self.hkeys[i] == key:
                return self.hvals[i]
            i = (i + 1) & self.hmask
        return -1

    cdef int rehash(self, Py_ssize_t cap) except -1:
        cdef int64_t* keys = malloc_keys(cap)
        cdef int32_t* vals = <int32_t*>calloc(cap, sizeof(int32_t))
        cdef Py_ssize_t i, j
        if keys == NULL or vals == NULL:
            free(keys)
            free(vals)
            raise MemoryError()
        for i in range(self.hmask + 1):
            if self.hkeys[i] != EMPTY_KEY:
                j = hash_slot(self.hkeys[i], cap - 1)
                while keys[j] != EMPTY_KEY:
                    j = (j + 1) & (cap - 1)
                keys[j] = self.hkeys[i]
                vals[j] = self.hvals[i]
        free(self.hkeys)
        free(self.hvals)
        self.hkeys, self.hvals, self.hmask = keys, vals, cap - 1
        return 0

    cdef int put(self, int64_t key, int32_t value) except -1:
        cdef Py_ssize_t i
        if (self.size + 1) * 2 > self.hmask + 1:
            self.rehash(max(16, (self.hmask + 1) * 2))
        i = hash_slot(key, self.hmask)
        while self.hkeys[i] != EMPTY_KEY:
            i = (i + 1) & self.hmask
        self.hkeys[i] = key
        self.hvals[i] = value
        return 0

    cdef void unput(self, int64_t key) noexcept:
        """Linear probing's deletion: the entries after the hole that
        would no longer be found move back into it."""
        cdef Py_ssize_t i, j, home
        if self.hmask < 0:
            return
        i = hash_slot(key, self.hmask)
        while self.hkeys[i] != key:
            if self.hkeys[i] == EMPTY_KEY:
                return
            i = (i + 1) & self.hmask
        j = i
        while True:
            j = (j + 1) & self.hmask
            if self.hkeys[j] == EMPTY_KEY:
                break
            home = hash_slot(self.hkeys[j], self.hmask)
            # the entry at j stays when its home lies cyclically in (i, j]
            if (i <= j and i < home <= j) or (i > j and (home > i or home <= j)):
                continue
            self.hkeys[i] = self.hkeys[j]
            self.hvals[i] = self.hvals[j]
            i = j
        self.hkeys[i] = EMPTY_KEY

    # ---- entries ----

    cdef int32_t topic_of(self, name, topic_id) except -2:
        """The index of a request topic, added if new."""
        key = topic_id if self.uses_topic_ids else name
        found = self.topic_index.get(key)
        if found is not None:
            return found
        self.topic_index[key] = len(self.topic_names)
        self.topic_names.append(name if not self.uses_topic_ids else "")
        self.topic_ids.append(topic_id)
        return len(self.topic_names) - 1

    cdef int32_t new_entry(self) except -1:
        cdef Py_ssize_t cap
        cdef void* grown
        cdef int32_t entry_id
        if self.n_free:
            self.n_free -= 1
            entry_id = self.free_ids[self.n_free]
        else:
            if self.pool_size == self.pool_cap:
                cap = max(16, self.pool_cap * 2)
                grown = realloc(self.pool, cap * sizeof(SessionEntry))
                if grown == NULL:
                    raise MemoryError()
                self.pool = <SessionEntry*>grown
                grown = realloc(self.free_ids, cap * sizeof(int32_t))
                if grown == NULL:
                    raise MemoryError()
                self.free_ids = <int32_t*>grown
                grown = realloc(self.order, cap * sizeof(int32_t))
                if grown == NULL:
                    raise MemoryError()
                self.order, self.pool_cap, self.order_cap = <int32_t*>grown, cap, cap
            entry_id = <int32_t>self.pool_size
            self.pool_size += 1
        return entry_id

    cdef int add_or_update(self, int32_t topic, FetchPartitionEntry* e) except -1:
        """1: added (at the end of the order), 0: updated."""
        cdef int64_t key = entry_key(topic, e.partition)
        cdef int32_t entry_id = self.find(key)
        cdef SessionEntry* s
        if entry_id >= 0:
            self.pool[entry_id].request = e[0]
            return 0
        entry_id = self.new_entry()
        self.put(key, entry_id)
        s = &self.pool[entry_id]
        s.request = e[0]
        s.cached_high_watermark = -1
        s.cached_log_start_offset = -1
        s.topic = topic
        s.live = 1
        self.order[self.size] = entry_id
        self.size += 1
        return 1

    cdef int remove(self, int32_t topic, int32_t partition) except -1:
        """1: removed, 0: not in the session."""
        cdef int64_t key = entry_key(topic, partition)
        cdef int32_t entry_id = self.find(key)
        cdef Py_ssize_t i
        if entry_id < 0:
            return 0
        self.unput(key)
        self.pool[entry_id].live = 0
        self.free_ids[self.n_free] = entry_id
        self.n_free += 1
        for i in range(self.size):
            if self.order[i] == entry_id:
                memmove(&self.order[i], &self.order[i + 1], (self.size - i - 1) * sizeof(int32_t))
                break
        self.size -= 1
        return 1

    def update(self, list topics, list forgotten) -> tuple:
        """Take a request's partitions (added, or their parameters
        updated) and forget ``forgotten``'s: (added, updated, removed)."""
        cdef Py_ssize_t added = 0, updated = 0, removed = 0, k
        cdef FetchPartitionList fpl
        cdef int32_t t
        for topic in topics:
            t = self.topic_of(topic.get("topic") or "", topic.get("topic_id"))
            parts = topic.get("partitions")
            fpl = parts if type(parts) is FetchPartitionList else \
                FetchPartitionList.from_dicts(parts)
            for k in range(fpl.size):
                if self.add_or_update(t, &fpl.entries[k]):
                    added += 1
                else:
                    updated += 1
        for topic in forgotten:
            key = topic.get("topic_id") if self.uses_topic_ids else topic.get("topic") or ""
            found = self.topic_index.get(key)
            if found is None:
                continue
            for index in topic.get("partitions") or ():
                removed += self.remove(found, index)
        return added, updated, removed

    def record(self, list answered):
        """A full fetch's answer (its response topics) made this session:
        each partition's high watermark (-1 with an error) and log start
        offset, as answered."""
        cdef FetchedPartitions fp
        cdef FetchedEntry* fe
        cdef Py_ssize_t k
        cdef int32_t entry_id
        for topic in answered:
            key = topic.get("topic_id") if self.uses_topic_ids else topic.get("topic") or ""
            found = self.topic_index.get(key)
            if found is None:
                continue
            parts = topic.get("partitions")
            if type(parts) is FetchedPartitions:
                fp = <FetchedPartitions>parts
                for k in range(fp.size):
                    fe = &fp.entries[k]
                    if fe.slow >= 0:
                        self.record_dict(found, fp.dicts[fe.slow])
                        continue
                    entry_id = self.find(entry_key(found, fe.partition_index))
                    if entry_id >= 0:
                        self.pool[entry_id].cached_high_watermark = fe.high_watermark
                        self.pool[entry_id].cached_log_start_offset = fe.log_start_offset
            else:
                for p in parts:
                    self.record_dict(found, p)

    cdef int record_dict(self, int32_t topic, dict p) except -1:
        cdef int32_t entry_id = self.find(entry_key(topic, p["partition_index"]))
        if entry_id >= 0:
            self.pool[entry_id].cached_high_watermark = \
                -1 if p.get("error_code") else p.get("high_watermark", -1)
            self.pool[entry_id].cached_log_start_offset = p.get("log_start_offset", -1)
        return 0

    cdef int to_end(self, const int32_t* moved, Py_ssize_t n) except -1:
        """Put the ``n`` entries of ``moved`` (distinct, in the session) at
        the end of the order, in that order; the others keep theirs."""
        cdef Py_ssize_t i, j = 0, k
        for k in range(n):
            self.pool[moved[k]].live = 2
        for i in range(self.size):
            if self.pool[self.order[i]].live != 2:
                self.order[j] = self.order[i]
                j += 1
        for k in range(n):
            self.order[j] = moved[k]
            self.pool[moved[k]].live = 1
            j += 1
        return 0

    def partitions(self) -> list:
        """[(topic index, partition, fetch offset)] in the session's order: for tests."""
        cdef Py_ssize_t i
        cdef SessionEntry* s
        out = []
        for i in range(self.size):
            s = &self.pool[self.order[i]]
            out.append((s.topic, s.request.partition, s.request.fetch_offset))
        return out

    def plan(self, LeaderStates table, list names, list modes, bint read_committed,
             bint consumer, int64_t budget=0, int64_t region_max=0,
             int64_t answer_max=0) -> SessionPlan:
        """Split the session's partitions for one fetch. By topic index:
        ``names``, each topic's name (None: an id this broker does not
        know); ``modes``, 0 as the table says, 1 every partition read in
        Python (a topic the principal may not read: its error), 2 left out
        (the request's own denied topics, answered by the gate). A
        consumer's partitions with new records are read in C as a full
        fetch's are (fetch_state.plan_full_fetch: ``budget``,
        ``region_max``, ``answer_max``), in the session's order, until one
        goes to the Python read."""
        cdef SessionPlan plan = SessionPlan()
        cdef Py_ssize_t i, n_topics = len(self.topic_names)
        cdef SessionEntry* s
        cdef FetchPartitionEntry* e
        cdef LeaderState* st
        cdef int32_t t, last_slow = -1
        cdef list states = [None] * n_topics
        cdef list slow_parts = None
        cdef bint reading = consumer and region_max > 0
        # per topic, as C: its mode and its states (borrowed: ``states`` holds them)
        cdef int8_t* mode = <int8_t*>calloc(n_topics + 1, sizeof(int8_t))
        cdef PyObject** topic_states = <PyObject**>calloc(n_topics + 1, sizeof(PyObject*))
        if mode == NULL or topic_states == NULL:
            free(mode)
            free(topic_states)
            raise MemoryError()
        plan.session = self
        plan.names = names
        plan.states = states
        plan.read_committed = read_committed
        plan.slow_topics = []
        plan.reads = []
        plan.sent = {}
        plan.reading = ReadBudget(budget=budget, read_bytes=0, region_max=region_max,
                                  answer_max=answer_max, read_count=0, first=True)
        try:
            for i in range(n_topics):
                mode[i] = modes[i]
                if consumer and names[i] is not None and mode[i] == 0:
                    states[i] = table.topic(names[i])
                    if states[i] is not None:
                        topic_states[i] = <PyObject*>states[i]
            for i in range(self.size):
                s = &self.pool[self.order[i]]
                t = s.topic
                if mode[t] == 2:
                    continue
                e = &s.request
                st = idle_state(<TopicStates>topic_states[t], e, read_committed) \
                    if topic_states[t] != NULL else NULL
                if st != NULL:
                    plan.add_idle(self.order[i])
                    if (st.high_watermark != s.cached_high_watermark
                            or st.log_start_offset != s.cached_log_start_offset):
                        plan.add(self.order[i], ENTRY_CHANGED, st.high_watermark,
                                 st.last_stable_offset, st.log_start_offset)
                    continue
                answer = read_new_records(<TopicStates>topic_states[t], e, read_committed,
                                          &plan.reading, plan.sent) \
                    if reading and topic_states[t] != NULL else None
                if answer is not None:
                    plan.add(self.order[i], ENTRY_READ, 0, 0, 0)
                    plan.add_watched(self.order[i])
                    plan.reads.append(answer)
                    continue
                reading = False
                plan.add(self.order[i], ENTRY_SLOW, 0, 0, 0)
                if t != last_slow:
                    slow_parts = []
                    plan.slow_topics.append({"topic": self.topic_names[t],
                                             "topic_id": self.topic_ids[t],
                                             "partitions": slow_parts})
                    last_slow = t
                slow_parts.append({
                    "partition": e.partition, "current_leader_epoch": e.current_leader_epoch,
                    "fetch_offset": e.fetch_offset, "last_fetched_epoch": e.last_fetched_epoch,
                    "log_start_offset": e.log_start_offset,
                    "partition_max_bytes": e.partition_max_bytes})
        finally:
            free(mode)
            free(topic_states)
        return plan


cdef struct PlannedEntry:
    int64_t high_watermark
    int64_t last_stable_offset
    int64_t log_start_offset
    int32_t entry_id
    int32_t kind


@cython.final
cdef class SessionPlan:
    """A session's partitions split for one fetch: ``slow_topics`` for the
    Python read; ``respond(its answer, commit)`` the incremental answer."""

    cdef SessionPartitions session
    cdef list names
    cdef list states                    # by topic index: TopicStates or None
    cdef bint read_committed
    cdef PlannedEntry* entries
    cdef Py_ssize_t size
    cdef Py_ssize_t cap
    cdef int32_t* idle                  # the ids of entries a long poll watches: idle, read in C
    cdef Py_ssize_t n_watched
    cdef readonly Py_ssize_t idle_count
    cdef Py_ssize_t idle_cap
    cdef readonly list slow_topics
    cdef Watches _watches
    cdef list reads                     # the answers of the ENTRY_READ entries, in order
    cdef ReadBudget reading
    cdef readonly dict sent             # bytes read in C, by topic

    def __cinit__(self):
        self.entries = NULL
        self.size = self.cap = 0
        self.idle = NULL
        self.n_watched = self.idle_count = self.idle_cap = 0
        self._watches = None

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

    def __dealloc__(self):
        free(self.entries)
        free(self.idle)

    cdef int add_idle(self, int32_t entry_id) except -1:
        self.add_watched(entry_id)
        self.idle_count += 1
        return 0

    cdef int add_watched(self, int32_t entry_id) except -1:
        cdef Py_ssize_t cap
        cdef int32_t* grown
        if self.n_watched == self.idle_cap:
            cap = max(64, self.idle_cap * 2)
            grown = <int32_t*>realloc(self.idle, cap * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self.idle, self.idle_cap = grown, cap
        self.idle[self.n_watched] = entry_id
        self.n_watched += 1
        return 0

    @property
    def watches(self) -> Watches:
        """The idle partitions and those read in C, made when a long poll
        first asks (a fetch answered at once never does)."""
        cdef Watches w
        cdef Py_ssize_t i
        cdef SessionEntry* s
        cdef list index
        if self._watches is None:
            w = Watches()
            index = [-1] * len(self.states)
            for i in range(self.n_watched):
                s = &self.session.pool[self.idle[i]]
                if index[s.topic] < 0:
                    index[s.topic] = w.index_of(self.states[s.topic])
                w.add(index[s.topic], s.request.partition)
            self._watches = w
        return self._watches

    cdef int add(self, int32_t entry_id, int32_t kind, int64_t hw, int64_t lso,
                 int64_t log_start) except -1:
        cdef Py_ssize_t cap
        cdef PlannedEntry* grown
        if self.size == self.cap:
            cap = max(16, self.cap * 2)
            grown = <PlannedEntry*>realloc(self.entries, cap * sizeof(PlannedEntry))
            if grown == NULL:
                raise MemoryError()
            self.entries, self.cap = grown, cap
        cdef PlannedEntry* pe = &self.entries[self.size]
        pe.high_watermark = hw
        pe.last_stable_offset = lso
        pe.log_start_offset = log_start
        pe.entry_id = entry_id
        pe.kind = kind
        self.size += 1
        return 0

    def respond(self, list answered, bint commit) -> list:
        """The incremental answer's topics: the partitions whose offsets
        moved, or with records, an error or a diverging epoch, in the
        session's order (consecutive partitions of a topic in one topic
        entry, as Kafka's FetchResponse.of). ``commit``: this answer is
        sent, so the session remembers what it said and the partitions
        that brought records go to the end of its order."""
        cdef SessionPartitions session = self.session
        cdef list flat = []
        cdef list out = []
        cdef Py_ssize_t i, j = 0, k = 0, moved = 0
        cdef PlannedEntry* pe
        cdef SessionEntry* s
        cdef FetchedPartitions fp = None
        cdef int32_t last_topic = -1
        cdef int64_t records, hw, log_start
        cdef bint must
        cdef int32_t* tail = NULL
        cdef dict p
        for topic in answered:
            flat.extend(topic["partitions"])
        if commit:
            tail = <int32_t*>calloc(self.size + 1, sizeof(int32_t))
            if tail == NULL:
                raise MemoryError()
        try:
            for i in range(self.size):
                pe = &self.entries[i]
                s = &session.pool[pe.entry_id]
                if pe.kind == ENTRY_CHANGED:
                    if s.topic != last_topic:
                        fp = self.topic_entry(out, s.topic)
                        last_topic = s.topic
                    fp.add_inline(s.request.partition, pe.high_watermark, pe.last_stable_offset,
                                  pe.log_start_offset)
                    if commit:
                        s.cached_high_watermark = pe.high_watermark
                        s.cached_log_start_offset = pe.log_start_offset
                    continue
                if pe.kind == ENTRY_READ:
                    p = self.reads[k]
                    k += 1
                else:
                    p = flat[j]
                    j += 1
                records = records_length(p)
                hw = p.get("high_watermark", -1)
                log_start = p.get("log_start_offset", -1)
                must = (records > 0 or hw != s.cached_high_watermark
                        or log_start != s.cached_log_start_offset
                        or p.get("error_code", 0) != 0 or p.get("preferred_read_replica", -1) != -1
                        or bool(p.get("diverging_epoch")))
                if not must:
                    continue
                if s.topic != last_topic:
                    fp = self.topic_entry(out, s.topic)
                    last_topic = s.topic
                fp.add_slow(s.request.partition, len(fp.dicts))
                fp.dicts.append(p)
                if commit:
                    s.cached_high_watermark = -1 if p.get("error_code", 0) else hw
                    s.cached_log_start_offset = log_start
                    if records > 0:
                        tail[moved] = pe.entry_id
                        moved += 1
            if j != len(flat):
                raise ValueError(f"{len(flat)} partitions answered for {j} asked")
            if moved:
                session.to_end(tail, moved)
        finally:
            free(tail)
        return out

    cdef FetchedPartitions topic_entry(self, list out, int32_t topic):
        cdef FetchedPartitions fp = FetchedPartitions(self.read_committed)
        name = self.names[topic]
        out.append({"topic": name if name is not None else self.session.topic_names[topic],
                    "partitions": fp, "topic_id": self.session.topic_ids[topic]})
        return fp
