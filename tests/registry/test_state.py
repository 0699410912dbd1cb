"""The registry's state (kafkalite/registry/state.py) as ``_schemas``' records
build it: the index of an id's versions, kept through soft and permanent
deletes and imports, and a lookup by id that reads only that id's own
versions, however many subjects there are. No server: records applied in
process, as store.py applies them.
"""
from __future__ import annotations

import json

from kafkalite.registry.state import RegistryState


def schema_key(subject: str, version: int) -> dict:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def schema_value(subject: str, version: int, sid: int, name: str, deleted=False) -> dict:
    return {"subject": subject, "version": version, "id": sid, "deleted": deleted,
            "schema": json.dumps({"type": "record", "name": name, "fields": []})}


class NoScan(dict):
    """Subjects that may be read by name but not walked: a lookup by id
    that walks every subject fails on it."""

    def __iter__(self):
        raise AssertionError("a lookup by id walked every subject")

    def items(self):
        raise AssertionError("a lookup by id walked every subject")

    def values(self):
        raise AssertionError("a lookup by id walked every subject")


def test_a_lookup_by_id_reads_only_its_own_versions():
    """Before, a lookup by id (GET /schemas/ids/{id}) walked every version of
    every subject to find the id's: its cost grew with the registry."""
    state = RegistryState()
    for i in range(2000):
        state.apply(schema_key(f"other-{i}", 1), schema_value(f"other-{i}", 1, 10 + i, f"O{i}"))
    state.apply(schema_key("a", 1), schema_value("a", 1, 1, "Shared"))
    state.apply(schema_key("b", 3), schema_value("b", 3, 1, "Shared"))
    subjects, state.subjects = state.subjects, NoScan(state.subjects)
    assert [(v.subject, v.version) for v in state.uses(1)] == [("a", 1), ("b", 3)]
    assert state.schema(1).id == 1
    state.subjects = subjects


def test_the_index_follows_deletes_and_imports():
    state = RegistryState()
    state.apply(schema_key("a", 1), schema_value("a", 1, 1, "Shared"))
    state.apply(schema_key("b", 1), schema_value("b", 1, 1, "Shared"))
    # a soft delete: the version is still there, marked
    state.apply({"keytype": "DELETE_SUBJECT", "subject": "b", "magic": 0},
                {"subject": "b", "version": 1})
    assert [v.subject for v in state.uses(1)] == ["a"]
    assert [v.subject for v in state.uses(1, deleted=True)] == ["a", "b"]
    # an import writing another id into a (subject, version): the old id loses that use
    state.apply(schema_key("a", 1), schema_value("a", 1, 2, "Other"))
    assert [v.subject for v in state.uses(1, deleted=True)] == ["b"]
    assert [v.subject for v in state.uses(2)] == ["a"]
    # permanent deletes: the id with no version left is gone, its identity too
    state.apply(schema_key("b", 1), None)
    assert state.uses(1, deleted=True) == [] and 1 not in state.schemas_by_id
    assert 1 not in state.ids_by_identity.values()
    assert "b" not in state.subjects and state.max_id == 2
