"""The registry's state: what the ``_schemas`` topic says, applied record by record.

store.py reads the topic and hands each record to ``RegistryState.apply``
(the record layout is store.py's docstring); this module keeps what they
say in memory, with the indexes every request reads through:

- ``schemas_by_id``: a global id -> its StoredSchema;
- ``uses_by_id``: an id -> every (subject, version) registered with it,
  so a lookup by id (``GET /schemas/ids/{id}``, what a deserializer asks)
  costs what that id's own versions cost, not a scan of every subject;
- ``ids_by_identity``: a schema's identity -> its id, so the same schema
  registered again (under any subject) is given the id it has;
- ``subjects``: a subject -> its versions.

A schema's identity is Confluent's (``MD5.ofSchema``: the schema's
canonical text and its references as given, name, subject and version):
one text with references to other subjects, even of the same content,
is another schema with another id, and keeps its own references.

A reference's ``version`` -1 is the subject's latest version, pinned to
that version's number when the schema is registered, as Confluent's
``AbstractSchemaProvider.resolveReferences`` does.

Who may call: store.py, under its lock (nothing here locks).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kafkalite.registry import compatibility, schemas
from kafkalite.registry.errors import (RegistryError, schema_not_found, subject_not_found,
                                       version_not_found)

log = logging.getLogger("kafkalite.registry")

SCHEMAS_TOPIC = "_schemas"
DEFAULT_MODE = "READWRITE"
LATEST = -1                     # a reference's version: the subject's latest


@dataclass
class StoredSchema:
    """One global id: its schema (``references`` as registered, each
    version pinned)."""
    id: int
    schema_type: str
    text: str
    references: list               # [{"name", "subject", "version"}]
    parsed: schemas.ParsedSchema | None


@dataclass
class SubjectVersion:
    subject: str
    version: int
    id: int
    deleted: bool = False


def identity(parsed: schemas.ParsedSchema, references: list) -> tuple:
    """What makes two registrations one schema (one id): the type, the
    schema's identity (schemas.py) and its references as given."""
    return (parsed.schema_type, parsed.identity,
            tuple((r["name"], r["subject"], int(r["version"])) for r in references or ()))


@dataclass
class RegistryState:
    """What the topic says, applied record by record (``apply``)."""
    schemas_by_id: dict = field(default_factory=dict)        # id -> StoredSchema
    uses_by_id: dict = field(default_factory=dict)           # id -> {(subject, version): SV}
    ids_by_identity: dict = field(default_factory=dict)      # identity() -> id
    subjects: dict = field(default_factory=dict)             # subject -> {version: SubjectVersion}
    configs: dict = field(default_factory=dict)              # subject | None -> level
    modes: dict = field(default_factory=dict)                # subject | None -> mode
    max_id: int = 0
    leader: dict | None = None                               # {"url", "instance"}

    def apply(self, key: dict, value: dict | None) -> None:
        kind = key.get("keytype")
        subject = key.get("subject")
        if kind == "SCHEMA":
            self._apply_schema(subject, key, value)
        elif kind == "CONFIG":
            if value is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = value["compatibilityLevel"]
        elif kind == "MODE":
            if value is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = value["mode"]
        elif kind == "DELETE_SUBJECT" and value is not None:
            for v in self.subjects.get(subject, {}).values():
                if v.version <= int(value["version"]):
                    v.deleted = True
        elif kind == "MAX_ID" and value is not None:
            self.max_id = max(self.max_id, int(value["id"]))
        elif kind == "LEADER":
            self.leader = value

    def _apply_schema(self, subject: str, key: dict, value: dict | None) -> None:
        versions = self.subjects.setdefault(subject, {})
        version = int(key["version"]) if value is None else int(value["version"])
        if value is None:
            gone = versions.pop(version, None)
            if gone is not None:
                self._drop_use(gone)
            if not versions:
                del self.subjects[subject]
            return
        sid = int(value["id"])
        before = versions.get(version)
        if before is not None and before.id != sid:
            self._drop_use(before)          # an import wrote another id there
        self.max_id = max(self.max_id, sid)
        if sid not in self.schemas_by_id:
            stored = StoredSchema(sid, value.get("schemaType") or schemas.AVRO,
                                  value["schema"], value.get("references") or [], None)
            stored.parsed = self._parse(stored)
            self.schemas_by_id[sid] = stored
            if stored.parsed is not None:
                self.ids_by_identity.setdefault(identity(stored.parsed, stored.references), sid)
        v = SubjectVersion(subject, version, sid, bool(value.get("deleted", False)))
        versions[version] = v
        self.uses_by_id.setdefault(sid, {})[(subject, version)] = v

    def _drop_use(self, gone: SubjectVersion) -> None:
        uses = self.uses_by_id.get(gone.id, {})
        uses.pop((gone.subject, gone.version), None)
        if uses:
            return
        # no subject names the id any more: it is gone (and never given again)
        self.uses_by_id.pop(gone.id, None)
        stored = self.schemas_by_id.pop(gone.id, None)
        if stored is not None and stored.parsed is not None:
            key = identity(stored.parsed, stored.references)
            if self.ids_by_identity.get(key) == gone.id:
                del self.ids_by_identity[key]

    def _parse(self, stored: StoredSchema) -> schemas.ParsedSchema | None:
        try:
            return schemas.parse(stored.schema_type, stored.text, self.resolve(stored.references))
        except RegistryError as exc:
            log.warning("schema id %d in %s no longer parses: %s", stored.id, SCHEMAS_TOPIC,
                        exc.message)
            return None

    # ---- references ---------------------------------------------------------------------------

    def pinned(self, references: list) -> list:
        """``references`` with each ``version`` -1 pinned to its subject's
        latest version; 42201 for one that is not a reference."""
        out = []
        for ref in references or []:
            try:
                name, subject, version = ref["name"], ref["subject"], int(ref["version"])
            except (KeyError, TypeError, ValueError):
                raise schemas.invalid(f"a reference needs name, subject and version: {ref}") \
                    from None
            if version == LATEST:
                live = self.versions(subject)
                if not live:
                    raise schemas.invalid(f"reference {name!r}: subject {subject!r} has no "
                                          f"version")
                version = live[-1].version
            out.append({"name": name, "subject": subject, "version": version})
        return out

    def resolve(self, references: list) -> dict:
        """Reference name -> ParsedSchema of each reference (which knows
        its own: schemas.closure follows them); 42201 for one that is not
        there."""
        out = {}
        for ref in self.pinned(references):
            name, subject, version = ref["name"], ref["subject"], ref["version"]
            v = self.subjects.get(subject, {}).get(version)
            if v is None:
                raise schemas.invalid(f"reference {name!r}: version {version} of subject "
                                      f"{subject!r} does not exist")
            stored = self.schemas_by_id[v.id]
            if stored.parsed is None:
                raise schemas.invalid(f"reference {name!r} does not parse")
            out[name] = stored.parsed
        return out

    # ---- reads ----------------------------------------------------------------------------

    def versions(self, subject: str, deleted: bool = False) -> list[SubjectVersion]:
        return [v for _, v in sorted(self.subjects.get(subject, {}).items())
                if deleted or not v.deleted]

    def live_subject(self, subject: str, deleted: bool = False) -> list[SubjectVersion]:
        """The subject's versions; 40401 when it has none (live, or at all
        with ``deleted``)."""
        versions = self.versions(subject, deleted)
        if not versions:
            raise subject_not_found(subject)
        return versions

    def version(self, subject: str, version, deleted: bool = False) -> SubjectVersion:
        versions = self.live_subject(subject, deleted)
        if version in ("latest", -1):
            return versions[-1]
        for v in versions:
            if v.version == version:
                return v
        raise version_not_found(subject, version)

    def schema(self, sid: int) -> StoredSchema:
        stored = self.schemas_by_id.get(sid)
        if stored is None:
            raise schema_not_found(f"Schema {sid} not found")
        return stored

    def uses(self, sid: int, deleted: bool = False) -> list[SubjectVersion]:
        """The (subject, version)s registered with ``sid``, by subject and
        version: from the index, whatever the number of subjects."""
        return [v for _, v in sorted(self.uses_by_id.get(sid, {}).items())
                if deleted or not v.deleted]

    def level(self, subject: str | None) -> str:
        return self.configs.get(subject) or self.configs.get(None) or compatibility.DEFAULT_LEVEL

    def mode(self, subject: str | None) -> str:
        return self.modes.get(subject) or self.modes.get(None) or DEFAULT_MODE

    def referenced_by(self, subject: str, version: int) -> list[int]:
        return sorted({v.id for versions in self.subjects.values() for v in versions.values()
                       if not v.deleted and any(
                           r.get("subject") == subject and int(r.get("version", -1)) == version
                           for r in self.schemas_by_id[v.id].references)})
