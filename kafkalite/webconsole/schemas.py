"""The console's view of the schema registry: subjects, and records decoded through it.

- ``SchemaView.topic_subjects``: a topic's subjects by TopicNameStrategy
  (``<topic>-key``, ``<topic>-value``) with their versions, latest id and
  type, and compatibility level (the subject's own, or the global one,
  said which);
- ``SchemaView.list_subjects``: every subject, the same for each (the
  Schemas page);
- ``SchemaView.decoder``: for one read of records, turns a key or value in
  Confluent's wire format (magic byte 0, the 4-byte big-endian schema id,
  the payload; Protobuf's message indexes before its message) into JSON:
  Avro with fastavro (its references' named types resolved through the
  registry), JSON Schema as the JSON it is, Protobuf with protobuf's
  descriptors (the registry's ``format=serialized`` descriptor, its
  imports resolved through the registry or protobuf's well-known types)
  and protobuf's JSON mapping. A record that does not decode keeps its
  bytes and gets a readable reason; it never fails the read.

Whose rights: the registry is asked over HTTP with the credentials of the
user logged in to the console (the same HTTP Basic login, forwarded), so
what the registry's SUBJECT ACLs (registry/authorization.py) deny that
user, the registry denies here; the console also asks its own authorizer
(``may_read(subject)``, webconsole/authorization.py) before it shows a
schema or a decoded record, so a decision is never older than the request.
Nothing is cached across requests: a decoder caches the schemas of one
read only (a read of 500 records of one schema asks the registry twice).

Where the registry is: the node's ``schema_registry`` endpoint, asked of
the node through the console's admin client; none (turned off) is said on
the page, never an error.

What it may import: the standard library, fastavro and protobuf (both
installed with the registry), kafkalite.client's Protobuf message indexes.
Who may call: app.py, on the HTTP server's request threads.
"""
from __future__ import annotations

import io
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request

from kafkalite.client.serialization import protobuf_message_indexes, protobuf_schema_classes

MAGIC = 0
HEADER = 5                      # magic byte + 4-byte schema id
REGISTRY_TIMEOUT_S = 5.0
MAX_SUBJECTS = 500              # subjects described on the Schemas page
SUBJECT_KINDS = ("key", "value")


class RegistryUnavailable(Exception):
    """No registry to ask: turned off, or unreachable."""


class RegistryRefused(Exception):
    """The registry's error answer: ``status``, ``error_code``, its message."""

    def __init__(self, status: int, error_code, message: str):
        super().__init__(message)
        self.status, self.error_code = status, error_code


class NotDecoded(Exception):
    """Why a key or value is shown as bytes."""


def subject_of(topic: str, kind: str) -> str:
    """TopicNameStrategy, the serializers' default."""
    return f"{topic}-{kind}"


class SchemaView:
    """The registry as the console reaches it; ``admin`` finds its address."""

    def __init__(self, admin_of, client_config: dict | None = None):
        self._admin_of = admin_of               # () -> AdminClient (made at the first request)
        self._client_config = dict(client_config or {})
        self._url: str | None = None
        self._lock = threading.Lock()

    # ---- the registry over HTTP ---------------------------------------------------------------

    def url(self) -> str:
        with self._lock:
            if self._url is None:
                try:
                    endpoints = self._admin_of().server_endpoints()
                except Exception as exc:
                    raise RegistryUnavailable(f"the node's endpoints: {exc}") from None
                url = endpoints.get("schema_registry")
                if not url:
                    raise RegistryUnavailable("this node serves no schema registry "
                                              "(schema_registry_port -1)")
                self._url = url.rstrip("/")
            return self._url

    def get(self, environ: dict, path: str, query: dict | None = None):
        """The registry's JSON answer to ``GET path`` as the console's user."""
        url = self.url() + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/vnd.schemaregistry.v1+json"}
        login = environ.get("HTTP_AUTHORIZATION")
        if login:
            headers["Authorization"] = login
        context = None
        if url.startswith("https"):
            context = ssl.create_default_context(
                cafile=self._client_config.get("ssl.ca.location") or None)
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=REGISTRY_TIMEOUT_S,
                                        context=context) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                body = {}
            raise RegistryRefused(exc.code, body.get("error_code"),
                                  body.get("message") or f"HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise RegistryUnavailable(f"the schema registry at {self.url()}: {exc}") from None

    # ---- subjects -----------------------------------------------------------------------------

    def describe_subject(self, environ: dict, subject: str) -> dict:
        """Versions, the latest's id and type, and the compatibility level:
        ``{"subject", "versions", "id", "type", "compatibility",
        "compatibility_source": "subject"|"global"}`` (a level the user may
        not describe: ``compatibility`` null, the source the refusal);
        ``None`` for no such subject."""
        quoted = urllib.parse.quote(subject, safe="")
        try:
            versions = self.get(environ, f"/subjects/{quoted}/versions")
            latest = self.get(environ, f"/subjects/{quoted}/versions/latest")
        except RegistryRefused as exc:
            if exc.error_code == 40401:
                return None
            raise
        level = source = None
        try:
            level = self.get(environ, f"/config/{quoted}")["compatibilityLevel"]
            source = "subject"
        except RegistryRefused as exc:
            if exc.error_code == 40408:     # no level of its own: the global one applies
                # (asked of the subject: DescribeConfigs on it, not on the cluster)
                level = self.get(environ, f"/config/{quoted}",
                                 {"defaultToGlobal": "true"})["compatibilityLevel"]
                source = "global"
            elif exc.status != 403:
                raise
            else:                           # may read it, not DescribeConfigs it
                source = str(exc)
        return {"subject": subject, "versions": versions, "id": latest.get("id"),
                "type": latest.get("schemaType") or "AVRO", "compatibility": level,
                "compatibility_source": source}

    def topic_subjects(self, environ: dict, topic: str, may_read) -> dict:
        """``{"registry": url or None, "error": why none, "subjects":
        [...]}``: the topic's key and value subjects that exist; one the
        user may not read is ``{"subject", "denied": reason}``."""
        out: dict = {"registry": None, "error": None, "subjects": []}
        try:
            out["registry"] = self.url()
            for kind in SUBJECT_KINDS:
                subject = subject_of(topic, kind)
                if not may_read(subject):
                    out["subjects"].append({"subject": subject, "kind": kind,
                                            "denied": f"you may not read subject {subject}"})
                    continue
                try:
                    described = self.describe_subject(environ, subject)
                except RegistryRefused as exc:
                    if exc.status != 403:
                        raise
                    out["subjects"].append({"subject": subject, "kind": kind,
                                            "denied": str(exc)})
                    continue
                if described is not None:
                    out["subjects"].append({**described, "kind": kind})
        except (RegistryUnavailable, RegistryRefused) as exc:
            out["error"] = str(exc)
        return out

    def list_subjects(self, environ: dict, may_read) -> dict:
        """Every subject the registry lists for the user (it leaves out those
        they may not describe), each described when they may read it."""
        out: dict = {"registry": None, "error": None, "subjects": [], "truncated": False}
        try:
            out["registry"] = self.url()
            names = sorted(self.get(environ, "/subjects"))
            out["truncated"] = len(names) > MAX_SUBJECTS
            for subject in names[:MAX_SUBJECTS]:
                if not may_read(subject):
                    out["subjects"].append({"subject": subject,
                                            "denied": f"you may not read subject {subject}"})
                    continue
                try:
                    described = self.describe_subject(environ, subject)
                except RegistryRefused as exc:
                    out["subjects"].append({"subject": subject, "denied": str(exc)})
                    continue
                if described is not None:        # deleted since it was listed
                    out["subjects"].append(described)
        except (RegistryUnavailable, RegistryRefused) as exc:
            out["error"] = str(exc)
        return out

    # ---- records ------------------------------------------------------------------------------

    def decoder(self, environ: dict, may_read) -> "RecordDecoder":
        return RecordDecoder(self, environ, may_read)


class RecordDecoder:
    """One read's decoding: schemas fetched once per id for the read."""

    def __init__(self, view: SchemaView, environ: dict, may_read):
        self.view, self.environ, self.may_read = view, environ, may_read
        self._schemas: dict[int, object] = {}          # id -> (info, decode) or NotDecoded

    def decode(self, data: bytes | None, topic: str, kind: str) -> dict | None:
        """None when ``data`` is not in Confluent's wire format; else
        ``{"schema": {"id", "subject", "version", "type"}, "decoded": JSON}``
        or, when it does not decode, ``{"schema": {...} or None, "error":
        reason}``."""
        if data is None or len(data) < HEADER or data[0] != MAGIC:
            return None
        schema_id = int.from_bytes(data[1:HEADER], "big")
        found = self._schemas.get(schema_id)
        if found is None:
            try:
                found = self._schema(schema_id, subject_of(topic, kind))
            except NotDecoded as exc:
                found = exc
            self._schemas[schema_id] = found
        if isinstance(found, NotDecoded):
            return {"schema": {"id": schema_id}, "error": str(found)}
        info, decode = found
        try:
            return {"schema": info, "decoded": decode(data)}
        except Exception as exc:           # any payload: bytes that do not fit the schema
            return {"schema": info, "error": f"does not decode with schema {schema_id}: "
                                             f"{type(exc).__name__}: {exc}"}

    def _schema(self, schema_id: int, preferred: str):
        """(info, decode) of a schema id, or raises NotDecoded saying why."""
        get = self.view.get
        try:
            where = get(self.environ, f"/schemas/ids/{schema_id}/versions")
        except RegistryRefused as exc:
            if exc.error_code == 40403:
                # the registry answers an id whose every subject the user may not
                # see as it answers one never given (it names no hidden subject)
                raise NotDecoded(f"schema {schema_id} is not in the registry, or not under "
                                 f"a subject you may see (or the bytes only look like "
                                 f"Confluent's wire format)") from None
            raise NotDecoded(f"schema {schema_id}: {exc}") from None
        except RegistryUnavailable as exc:
            raise NotDecoded(str(exc)) from None
        if not where:
            raise NotDecoded(f"you may not read any subject of schema {schema_id}")
        chosen = next((w for w in where if w["subject"] == preferred), where[0])
        if not self.may_read(chosen["subject"]):
            raise NotDecoded(f"you may not read subject {chosen['subject']}")
        try:
            schema = get(self.environ, f"/schemas/ids/{schema_id}")
            kind = schema.get("schemaType") or "AVRO"
            if kind == "AVRO":
                decode = self._avro(schema)
            elif kind == "JSON":
                decode = _json_schema
            elif kind == "PROTOBUF":
                decode = self._protobuf(get(self.environ, f"/schemas/ids/{schema_id}",
                                            {"format": "serialized"}))
            else:
                raise NotDecoded(f"schema {schema_id} is of type {kind}, which the console "
                                 f"does not decode")
        except (RegistryRefused, RegistryUnavailable) as exc:
            raise NotDecoded(f"schema {schema_id}: {exc}") from None
        except NotDecoded:
            raise
        except Exception as exc:                # a schema its library refuses
            raise NotDecoded(f"schema {schema_id} cannot be used: "
                             f"{type(exc).__name__}: {exc}") from None
        return ({"id": schema_id, "subject": chosen["subject"], "version": chosen["version"],
                 "type": kind}, decode)

    def _referenced(self, reference: dict, fmt: str | None = None) -> dict:
        query = {"format": fmt} if fmt else None
        return self.view.get(self.environ, "/subjects/{}/versions/{}".format(
            urllib.parse.quote(reference["subject"], safe=""), reference["version"]), query)

    def _avro(self, schema: dict):
        import fastavro
        named: dict = {}

        def add_references(refs) -> None:
            for ref in refs or ():
                if ref["name"] in named:
                    continue
                version = self._referenced(ref)
                add_references(version.get("references"))
                fastavro.parse_schema(json.loads(version["schema"]), named_schemas=named)
        add_references(schema.get("references"))
        parsed = fastavro.parse_schema(json.loads(schema["schema"]), named_schemas=named)

        def decode(data: bytes):
            buf = io.BytesIO(data[HEADER:])
            value = fastavro.schemaless_reader(buf, parsed, None, return_record_name=True)
            if buf.tell() != len(data) - HEADER:
                raise ValueError(f"{len(data) - HEADER - buf.tell()} bytes left over")
            # Avro's JSON encoding: a union's branch named, bytes as code points
            out = io.StringIO()
            fastavro.json_writer(out, parsed, [value])
            return json.loads(out.getvalue())
        return decode

    def _protobuf(self, schema: dict):
        from google.protobuf import json_format

        def triples(refs) -> list:
            return [(r["name"], r["subject"], r["version"]) for r in refs or ()]

        def fetch(subject, version):
            got = self._referenced({"subject": subject, "version": version}, "serialized")
            return got["schema"], triples(got.get("references"))
        try:
            classes = protobuf_schema_classes(schema["schema"], triples(schema.get("references")),
                                              fetch, "console.proto")
        except ValueError as exc:
            raise NotDecoded(str(exc)) from None

        def decode(data: bytes):
            indexes, pos = protobuf_message_indexes(data, HEADER)
            msg = classes(indexes)()
            msg.ParseFromString(data[pos:])
            return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)
        return decode


def _json_schema(data: bytes):
    return json.loads(data[HEADER:])
