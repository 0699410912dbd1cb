"""The value schemas of an Iceberg topic, asked of the node's schema registry.

Why over HTTP: the registry (kafkalite/registry/, served by the node's
supervisor) owns ``_schemas`` -- Confluent's record layout, soft deletes,
references -- and a worker can neither import it nor the client that would
read the topic (tests/test_layers.py: storage/ and server/ import nothing
above them), nor read ``_schemas`` from its own log when another worker
leads it. Confluent's REST API is the registry's public contract; the URL
is the one the supervisor writes in ``<data_dir>/server.json``.

What is cached: a schema by id for good (an id names one schema forever:
the registry never reuses one); a subject's latest version for
``LATEST_TTL_S``, as Redpanda caches it (``iceberg_latest_schema_cache_ttl_ms``).

Errors: the registry saying it has no such id or subject gives None -- the
record does not decode, it goes to the dead-letter table. Anything else
(no registry, a refused login, a timeout) raises RegistryUnavailable: the
commit fails and is tried again, the records are kept, never sent to the
dead-letter table for the registry's absence.

Who may call: the worker's Iceberg thread (one at a time).
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

SERVER_JSON = "server.json"          # the supervisor's endpoints, in the data directory
TIMEOUT_S = 10.0
LATEST_TTL_S = 1.0
# Confluent's error codes that mean "no such schema" (not "cannot ask")
NOT_FOUND = {40401, 40402, 40403}


class RegistryUnavailable(Exception):
    """The registry could not be asked (the commit is tried again later)."""


class ValueSchema:
    """One registered schema: its id, type (AVRO, PROTOBUF, JSON) and text;
    ``codec`` is set by the caller (avro_values.AvroValues) once built."""

    __slots__ = ("id", "schema_type", "text", "references", "codec")

    def __init__(self, sid: int, schema_type: str, text: str, references: list):
        self.id = sid
        self.schema_type = schema_type
        self.text = text
        self.references = references
        self.codec = None


class RegistryLookup:
    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self._by_id: dict[int, ValueSchema] = {}
        self._latest: dict[str, tuple[float, ValueSchema | None]] = {}

    def _url(self) -> str:
        try:
            with open(os.path.join(self.data_dir, SERVER_JSON)) as f:
                url = json.load(f).get("schema_registry")
        except (OSError, ValueError) as exc:
            raise RegistryUnavailable(f"no schema registry endpoint in {SERVER_JSON}: "
                                      f"{exc}") from None
        if not url:
            raise RegistryUnavailable("the node serves no schema registry "
                                      "(schema_registry_port)")
        return url.rstrip("/")

    def _get(self, path: str) -> dict | None:
        url = self._url() + path
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                code = json.loads(exc.read()).get("error_code")
            except ValueError:
                code = None
            if code in NOT_FOUND:
                return None
            raise RegistryUnavailable(f"GET {url}: HTTP {exc.code} {code}") from None
        except (OSError, ValueError) as exc:
            raise RegistryUnavailable(f"GET {url}: {exc}") from None

    def _schema(self, sid: int, body: dict) -> ValueSchema:
        known = self._by_id.get(sid)
        if known is None:
            known = self._by_id[sid] = ValueSchema(sid, body.get("schemaType") or "AVRO",
                                                   body["schema"], body.get("references") or [])
        return known

    def by_id(self, sid: int) -> ValueSchema | None:
        """The schema of global id ``sid``; None: the registry has none."""
        known = self._by_id.get(sid)
        if known is not None:
            return known
        body = self._get(f"/schemas/ids/{sid}")
        return None if body is None else self._schema(sid, body)

    def latest(self, subject: str) -> ValueSchema | None:
        """The latest version of ``subject``; None: no such subject."""
        now = time.monotonic()
        cached = self._latest.get(subject)
        if cached is not None and now - cached[0] < LATEST_TTL_S:
            return cached[1]
        body = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
        schema = None if body is None else self._schema(int(body["id"]), body)
        self._latest[subject] = (now, schema)
        return schema
