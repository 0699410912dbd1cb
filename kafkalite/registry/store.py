"""The ``_schemas`` topic read into the registry's state, and its one writer.

The ``_schemas`` topic (one partition, ``cleanup.policy=compact``) is the
source of truth; this module reads it into a RegistryState (state.py:
what it says, in memory, with its indexes) and is the only thing that
writes to it. Records use Confluent Schema Registry's layout,
JSON keys and values (``magic`` as Confluent writes it)::

    {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}
        -> {"subject":S,"version":V,"id":ID,"schemaType":T,"schema":"...",
            "references":[...],"deleted":false}     (schemaType absent: AVRO)
        -> null: version V of S permanently deleted (a tombstone)
    {"keytype":"CONFIG","subject":S|null,"magic":0} -> {"compatibilityLevel":L} | null
    {"keytype":"MODE","subject":S|null,"magic":0}   -> {"mode":M} | null
    {"keytype":"DELETE_SUBJECT","subject":S,"magic":0} -> {"subject":S,"version":V}

and one key of kafkalite's own, since compaction drops a permanently
deleted schema's records and with them the proof that its id was given::

    {"keytype":"MAX_ID","magic":0} -> {"id":N}  (written before a permanent
        delete of the highest id: the next id is past it all the same)

and one more, naming the registry that writes (leader.py says how one
becomes it and how the others forward to it)::

    {"keytype":"LEADER","magic":0} -> {"url":U,"instance":I}  (U: where the
        others forward writes; I: the process, so a restart is told apart)

Invariants:

- ids are never reused: the next id is one past the highest id any
  record (or MAX_ID) of the topic names, also after permanent deletes;
- the state is only ever what the topic says: a write is produced with
  acks=all, then the registry reads the topic up to its end before it
  answers, so it applies its own writes the way it applies a restart's
  replay (and is never behind them); before each write it reads to the
  end too, so a decision is made on the latest state;
- one writer among every registry on the topic: writes go through a
  transactional producer of one transactional id (LEADER_TRANSACTIONAL_ID),
  which a registry takes (``take_over``: InitProducerId, the broker bumps
  the epoch and aborts what the previous holder left open) before it reads
  the topic to its end and decides anything. A registry that lost the id
  (another took it: a leader move, a cut) has its next commit refused by
  the broker (fenced), so no two registries ever decide the same next id
  on the same state; the topic is read ``read_committed``, so a fenced
  writer's aborted records are never applied;
- the leader serves reads from memory (every write is its own); any other
  registry reads the topic to its end before it answers (``read``);
- within a process every read and write holds ``lock``.

Soft deletes rewrite each version's SCHEMA record with ``deleted: true``
(and a subject's also writes DELETE_SUBJECT, as Confluent does), so a
replay of a compacted topic gives the same state.

Who may call: rest.py's request threads (any number; the lock serializes
them), after leader.py routed a write here. The clients (producer, consumer, admin) are created on the first
request, so a server answers its first HTTP request once its brokers are up.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid

from kafkalite.registry import compatibility, schemas
from kafkalite.registry.errors import (INCOMPATIBLE_SCHEMA, INVALID_COMPATIBILITY_LEVEL,
                                       INVALID_MODE, OPERATION_NOT_PERMITTED, REFERENCE_EXISTS,
                                       SCHEMA_VERSION_NOT_SOFT_DELETED,
                                       SCHEMA_VERSION_SOFT_DELETED, STORE_ERROR, STORE_TIMEOUT,
                                       SUBJECT_NOT_SOFT_DELETED, SUBJECT_SOFT_DELETED,
                                       UNKNOWN_LEADER, RegistryError, schema_not_found,
                                       subject_not_found)
from kafkalite.registry.state import (SCHEMAS_TOPIC, RegistryState, StoredSchema,
                                      SubjectVersion, identity)

log = logging.getLogger("kafkalite.registry")

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
STORE_TIMEOUT_S = 30.0
CATCH_UP_FETCH_WAIT_MS = 10
# short: a fetch that carries only a transaction's marker moves the position
# past it but hands over no message, so poll() would sit out its timeout
CATCH_UP_POLL_S = 0.02
# the one transactional id every registry on the cluster writes _schemas with:
# whoever took it last is the leader, and the broker fences the one before
LEADER_TRANSACTIONAL_ID = "_schemas-leader"


class NotLeader(RegistryError):
    """This registry's write was fenced: another registry took the
    transactional id (it leads now). Nothing of the write was applied."""

    def __init__(self, message: str):
        super().__init__(UNKNOWN_LEADER, message)


def _key(keytype: str, subject=None, version=None) -> dict:
    if keytype == "SCHEMA":
        return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}
    if keytype in ("MAX_ID", "LEADER"):
        return {"keytype": keytype, "magic": 0}
    return {"keytype": keytype, "subject": subject, "magic": 0}


def _schema_value(subject: str, version: int, stored: StoredSchema, deleted: bool) -> dict:
    value = {"subject": subject, "version": version, "id": stored.id, "schema": stored.text,
             "deleted": deleted}
    if stored.schema_type != schemas.AVRO:
        value["schemaType"] = stored.schema_type
    if stored.references:
        value["references"] = stored.references
    return value


class SchemaStore:
    """The state of ``_schemas`` for one registry, and its writer while
    this registry leads.

    ``client_config``: the kafkalite client properties to reach the node
    (``bootstrap.servers``, and the owner's key pair with security on).
    ``url``: where the other registries reach this one (set once it is
    served: the port may be chosen at bind time)."""

    def __init__(self, client_config: dict, replication_factor: int = -1,
                 url: str | None = None):
        self.client_config = dict(client_config)
        self.replication_factor = replication_factor
        self.url = url
        self.instance = uuid.uuid4().hex
        self.state = RegistryState()
        self.lock = threading.RLock()
        self.leading = False            # this process holds the transactional id
        self._producer = None           # transactional, created by take_over
        self._consumer = None
        self._tp = None
        self._position = 0

    # ---- the topic --------------------------------------------------------------------------

    def _start(self) -> None:
        from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, \
            TopicPartition
        admin = AdminClient(self.client_config)
        try:
            rf = self.replication_factor
            if rf < 0:
                # Confluent's kafkastore.topic.replication.factor (3), on the
                # brokers there are: at the broker default (one replica) a
                # cluster lost every schema with the node holding _schemas
                rf = min(3, len(admin.describe_cluster()["brokers"]) or 1)
            futures = admin.create_topics([NewTopic(
                SCHEMAS_TOPIC, 1, rf,
                config={"cleanup.policy": "compact",
                        # an acknowledged registration is on a second replica
                        "min.insync.replicas": str(min(2, rf))})])
            try:
                futures[SCHEMAS_TOPIC].result()
            except Exception as exc:
                if "already exists" not in str(exc).lower() and \
                        "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        finally:
            admin.close()
        self._tp = TopicPartition(SCHEMAS_TOPIC, 0, OFFSET_BEGINNING)
        # a ListOffsets waits on the connection behind a long-polling fetch:
        # a short fetch wait keeps catch_up's look at the end of the topic short
        self._consumer = Consumer({**self.client_config, "enable.auto.commit": False,
                                   "isolation.level": "read_committed",
                                   "fetch.max.wait.ms": CATCH_UP_FETCH_WAIT_MS})
        self._consumer.assign([self._tp])

    def catch_up(self, through: int = -1) -> None:
        """Read ``_schemas`` to its end (its last stable offset now, and at
        least past offset ``through``) and apply it; a LEADER record naming
        another process ends this one's leading."""
        with self.lock:
            if self._consumer is None:
                try:
                    self._start()
                except Exception as exc:
                    self._close_clients()
                    raise RegistryError(STORE_ERROR, f"the {SCHEMAS_TOPIC} topic cannot be "
                                                     f"read: {exc}") from None
            try:
                _, high = self._consumer.get_watermark_offsets(self._tp)
            except Exception as exc:
                raise RegistryError(STORE_ERROR, f"{SCHEMAS_TOPIC}: {exc}") from None
            high = max(high, through + 1)
            deadline = time.monotonic() + STORE_TIMEOUT_S
            while self._position < high:
                if time.monotonic() > deadline:
                    raise RegistryError(STORE_TIMEOUT, f"reading {SCHEMAS_TOPIC} to offset "
                                                       f"{high} took over {STORE_TIMEOUT_S} s")
                # one message as soon as it comes, then what else is there: a
                # consume() of the offsets left would sit out its timeout when
                # some of them are transaction markers, never handed over
                first = self._consumer.poll(CATCH_UP_POLL_S)
                batch = [] if first is None else [first, *self._consumer.consume(999, 0)]
                for msg in batch:
                    if msg.error():
                        raise RegistryError(STORE_ERROR, f"{SCHEMAS_TOPIC}: {msg.error()}")
                    try:
                        key = json.loads(msg.key())
                        value = json.loads(msg.value()) if msg.value() is not None else None
                    except (TypeError, ValueError):
                        log.warning("%s offset %d is not a registry record; skipped",
                                    SCHEMAS_TOPIC, msg.offset())
                        continue
                    if isinstance(key, dict):
                        self.state.apply(key, value)
                # past the records and the transactions' markers read so far
                self._position = max(self._position,
                                     self._consumer.position([self._tp])[0].offset)
            leader = self.state.leader
            if self.leading and (leader is None or leader.get("instance") != self.instance):
                self._lose_leadership()

    def take_over(self) -> None:
        """Become the leader: take the transactional id (the broker fences
        the previous holder and aborts what it left open), read the topic
        to its end (now everything the previous leader committed), and
        name this registry in a LEADER record."""
        from kafkalite.client import Producer
        with self.lock:
            self.catch_up()                 # the consumer (and _schemas) exist
            self._lose_leadership()
            producer = Producer({**self.client_config, "acks": "all",
                                 "enable.idempotence": True,
                                 "transactional.id": LEADER_TRANSACTIONAL_ID})
            try:
                producer.init_transactions(STORE_TIMEOUT_S)
            except Exception as exc:
                producer.close(1)
                raise RegistryError(STORE_ERROR, f"taking the {SCHEMAS_TOPIC} writer's "
                                                 f"transactional id: {exc}") from None
            self._producer = producer
            self.catch_up()
            self.leading = True
            self._write([(_key("LEADER"), {"url": self.url, "instance": self.instance})])
            log.info("schema registry %s leads (writes %s)", self.url or "(no url)",
                     SCHEMAS_TOPIC)

    def _lose_leadership(self) -> None:
        self.leading = False
        if self._producer is not None:
            try:
                self._producer.close(1)
            except Exception:
                pass
            self._producer = None

    def _write(self, records: list[tuple[dict, dict | None]]) -> None:
        """Produce ``records`` in one transaction with acks=all, then read
        them back. NotLeader when the broker fenced this registry."""
        if not self.leading:
            raise NotLeader(f"this registry does not lead: {SCHEMAS_TOPIC} is written by "
                            f"{(self.state.leader or {}).get('url')}")
        errors = []
        written = []

        def delivered(err, msg):
            if err is not None:
                errors.append(err)
            else:
                written.append(msg.offset())
        producer = self._producer
        try:
            producer.begin_transaction()
            for key, value in records:
                producer.produce(
                    SCHEMAS_TOPIC, key=json.dumps(key, separators=(",", ":")).encode(),
                    value=(None if value is None
                           else json.dumps(value, separators=(",", ":")).encode()),
                    partition=0, on_delivery=delivered)
            producer.commit_transaction(STORE_TIMEOUT_S)
        except Exception as exc:
            if getattr(exc, "fatal", False) or "fenced" in str(exc).lower():
                self._lose_leadership()
                raise NotLeader(f"another registry took over {SCHEMAS_TOPIC}: {exc}") from None
            try:
                producer.abort_transaction(STORE_TIMEOUT_S)
            except Exception:
                self._lose_leadership()     # a writer in doubt takes the id again
            raise RegistryError(STORE_ERROR, f"writing to {SCHEMAS_TOPIC}: {exc}") from None
        if errors:
            raise RegistryError(STORE_ERROR, f"writing to {SCHEMAS_TOPIC}: {errors[0]}")
        # through the records just written: the transaction's commit marker may
        # land after commit_transaction returns (the coordinator writes it), and
        # until then the topic's end as a read_committed reader sees it (the
        # last stable offset) is before them. Answering before they are
        # applied would serve the old state, and the next write would take
        # the id just given again.
        self.catch_up(through=max(written, default=-1))

    def _close_clients(self) -> None:
        self._lose_leadership()
        for client in (self._consumer,):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
        self._consumer = None

    def close(self) -> None:
        with self.lock:
            self._close_clients()

    # ---- the registry's operations (each under the lock, after a catch-up) ------------------

    def read(self):
        """The state, for a read: use it under ``lock``. The leader's is
        served from memory (every write of the topic is its own, applied
        before it is answered); any other registry's is the topic read to
        its end first, so it answers what the leader wrote."""
        if self._consumer is None or not self.leading:
            self.catch_up()
        return self.state

    def _writable(self, subject: str | None, importing: bool = False) -> None:
        mode = self.state.mode(subject)
        if mode == "READONLY" or mode == "READONLY_OVERRIDE":
            raise RegistryError(OPERATION_NOT_PERMITTED,
                                f"Subject {subject or '(global)'} is in read-only mode")
        if importing and mode != "IMPORT":
            raise RegistryError(OPERATION_NOT_PERMITTED,
                                f"Subject {subject} is not in import mode; a schema id may only "
                                f"be given in IMPORT mode")

    def register(self, subject: str, schema_type: str | None, text, references: list,
                 normalize: bool = False, sid: int | None = None,
                 version: int | None = None) -> tuple[int, int, schemas.ParsedSchema]:
        """(id, version, schema): the same schema again under the subject
        answers its existing id and version; 409 if incompatible."""
        with self.lock:
            self.catch_up()
            st = self.state
            self._writable(subject, importing=sid is not None)
            refs = st.pinned(references)
            # an imported schema (an id given) is not checked as a new one, as in Confluent
            parsed = schemas.parse(schema_type, text, st.resolve(refs), normalize,
                                   new=sid is None)
            key = identity(parsed, refs)
            live = st.versions(subject)
            for v in live:
                stored = st.schemas_by_id[v.id]
                if stored.parsed is not None and \
                        identity(stored.parsed, stored.references) == key:
                    if sid is not None and sid != v.id:
                        break                  # an import may give the same schema another id
                    return v.id, v.version, parsed
            if st.mode(subject) != "IMPORT":
                previous = [st.schemas_by_id[v.id].parsed for v in live
                            if st.schemas_by_id[v.id].parsed is not None]
                reasons = compatibility.check(st.level(subject), parsed, previous)
                if reasons:
                    raise RegistryError(INCOMPATIBLE_SCHEMA, _incompatible_message(
                        st.level(subject), previous, reasons))
            if sid is not None:
                existing = st.schemas_by_id.get(sid)
                if existing is not None and (
                        existing.parsed is None
                        or identity(existing.parsed, existing.references) != key):
                    raise RegistryError(OPERATION_NOT_PERMITTED,
                                        f"Overwrite new schema with id {sid} is not permitted: "
                                        f"the id names another schema")
            else:
                sid = st.ids_by_identity.get(key) or st.max_id + 1
            every = st.versions(subject, deleted=True)
            if version is None:
                version = (every[-1].version if every else 0) + 1
            elif version in st.subjects.get(subject, {}):
                raise RegistryError(OPERATION_NOT_PERMITTED,
                                    f"Version {version} of subject {subject} exists already")
            stored = st.schemas_by_id.get(sid) or StoredSchema(
                sid, parsed.schema_type, parsed.text, refs, parsed)
            self._write([(_key("SCHEMA", subject, version),
                          _schema_value(subject, version, stored, False))])
            return sid, version, parsed

    def lookup(self, subject: str, schema_type, text, references, normalize=False,
               deleted=False) -> SubjectVersion:
        with self.lock:
            st = self.read()
            versions = st.live_subject(subject, deleted)
            refs = st.pinned(references)
            parsed = schemas.parse(schema_type, text, st.resolve(refs), normalize)
            key = identity(parsed, refs)
            for v in reversed(versions):
                stored = st.schemas_by_id[v.id]
                if stored.parsed is not None and \
                        identity(stored.parsed, stored.references) == key:
                    return v
            raise schema_not_found()

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self.lock:
            st = self.read()
            self._writable(subject)
            every = st.versions(subject, deleted=True)
            if not every:
                raise subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            if permanent:
                if live:
                    raise RegistryError(SUBJECT_NOT_SOFT_DELETED,
                                        f"Subject '{subject}' was not deleted first before "
                                        f"being permanently deleted")
                self._refuse_referenced(every)
                self._write([(_key("MAX_ID"), {"id": st.max_id})]
                            + [(_key("SCHEMA", subject, v.version), None) for v in every]
                            + [(_key("CONFIG", subject), None), (_key("MODE", subject), None)])
                return [v.version for v in every]
            if not live:
                raise RegistryError(SUBJECT_SOFT_DELETED,
                                    f"Subject '{subject}' was soft deleted. Set permanent=true "
                                    f"to delete permanently")
            self._refuse_referenced(live)
            self._write([(_key("SCHEMA", subject, v.version),
                          _schema_value(subject, v.version, st.schemas_by_id[v.id], True))
                         for v in live]
                        + [(_key("DELETE_SUBJECT", subject),
                            {"subject": subject, "version": live[-1].version})])
            return [v.version for v in live]

    def delete_version(self, subject: str, version, permanent: bool) -> int:
        with self.lock:
            st = self.read()
            self._writable(subject)
            v = st.version(subject, version, deleted=permanent or version != "latest")
            if not permanent:
                if v.deleted:
                    raise RegistryError(SCHEMA_VERSION_SOFT_DELETED,
                                        f"Subject '{subject}' Version {v.version} was soft "
                                        f"deleted. Set permanent=true to delete permanently")
            self._refuse_referenced([v])
            if permanent:
                if not v.deleted:
                    raise RegistryError(SCHEMA_VERSION_NOT_SOFT_DELETED,
                                        f"Subject '{subject}' Version {v.version} was not "
                                        f"deleted first before being permanently deleted")
                self._write([(_key("MAX_ID"), {"id": st.max_id}),
                             (_key("SCHEMA", subject, v.version), None)])
            else:
                self._write([(_key("SCHEMA", subject, v.version),
                              _schema_value(subject, v.version, st.schemas_by_id[v.id], True))])
            return v.version

    def _refuse_referenced(self, versions: list[SubjectVersion]) -> None:
        for v in versions:
            users = self.state.referenced_by(v.subject, v.version)
            if users:
                raise RegistryError(REFERENCE_EXISTS,
                                    f"One or more references exist to the schema "
                                    f"{{subject={v.subject}, version={v.version}}}: ids {users}")

    def set_config(self, subject: str | None, level) -> str:
        if level not in compatibility.LEVELS:
            raise RegistryError(INVALID_COMPATIBILITY_LEVEL,
                                f"Invalid compatibility level. Valid values are "
                                f"{', '.join(compatibility.LEVELS)}")
        with self.lock:
            self.catch_up()
            self._write([(_key("CONFIG", subject), {"compatibilityLevel": level})])
            return level

    def delete_config(self, subject: str | None) -> str:
        with self.lock:
            st = self.read()
            if subject is not None and subject not in st.configs:
                st.live_subject(subject)
            level = st.level(subject)
            self._write([(_key("CONFIG", subject), None)])
            return level

    def set_mode(self, subject: str | None, mode, force: bool = False) -> str:
        if mode not in MODES:
            raise RegistryError(INVALID_MODE, f"Invalid mode. Valid values are "
                                              f"{', '.join(MODES)}")
        with self.lock:
            st = self.read()
            if mode == "IMPORT" and not force and (
                    st.versions(subject) if subject is not None
                    else any(st.versions(s) for s in st.subjects)):
                raise RegistryError(OPERATION_NOT_PERMITTED,
                                    "Cannot import since found existing subjects")
            self._write([(_key("MODE", subject), {"mode": mode})])
            return mode

    def delete_mode(self, subject: str) -> str:
        with self.lock:
            st = self.read()
            mode = st.mode(subject)
            self._write([(_key("MODE", subject), None)])
            return mode


def _incompatible_message(level: str, previous: list, reasons: list[str]) -> str:
    return (f"Schema being registered is incompatible with an earlier schema for subject, "
            f"details: [{', '.join(reasons)}, {{compatibility: '{level}'}}]")
