"""Confluent Schema Registry's REST API, as a WSGI app.

The paths, query parameters, bodies and error bodies of Confluent's API
reference (docs.confluent.io, "Schema Registry API Reference"), as its
clients (confluent-kafka's ``SchemaRegistryClient``, the Java serdes,
curl) use them. Answers are ``application/vnd.schemaregistry.v1+json``,
or the type the ``Accept`` header prefers among the three Confluent
offers (``ANSWER_TYPES``, weighed as its ``@Produces`` weighs them; none
of them: 406); a request body may be that, ``application/json`` or
untyped. An error is ``{"error_code": N, "message": "..."}`` with N's
HTTP status (errors.py); a path this API does not have is 404
(error_code 404, as is an id that is not a number: JAX-RS finds no
resource for it), a method it has not for that path 405, a body that is
not JSON 400.

A write (register, a delete, a config or mode change) is made by the
registry that leads, the others forwarding it (leader.py); reads are
answered here.

Who may call: the HTTP server's threads (http_server.py), any number at once (the
store serializes them). With security on the server wraps this app in
http_login.py's login; this module does not authenticate, and asks the
user's ACLs what each route needs (authorization.py) before its handler.
"""
from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs

from kafkalite.http_routes import NoRoute, Router, WrongMethod
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.registry import compatibility, leader, schemas
from kafkalite.registry.authorization import FILTERED, OPEN, Access, Rule
from kafkalite.registry.errors import (INTERNAL_ERROR, INVALID_VERSION,
                                       SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                                       SUBJECT_LEVEL_MODE_NOT_CONFIGURED, RegistryError,
                                       schema_not_found)
from kafkalite.registry.store import SchemaStore

log = logging.getLogger("kafkalite.registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# what Confluent's resources produce, with the server's weight of each
# (its Versions: SCHEMA_REGISTRY_V1_JSON_WEIGHTED, ..._DEFAULT_JSON_WEIGHTED
# "qs=0.9", JSON_WEIGHTED "qs=0.5"): the Accept header's q times it picks one
ANSWER_TYPES = ((CONTENT_TYPE, 1.0), ("application/vnd.schemaregistry+json", 0.9),
                ("application/json", 0.5))
MAX_BODY_BYTES = 16 << 20
MAX_VERSION = 2 ** 31 - 1
_STATUS = {200: "200 OK", 400: "400 Bad Request", 401: "401 Unauthorized",
           403: "403 Forbidden", 404: "404 Not Found", 405: "405 Method Not Allowed",
           406: "406 Not Acceptable", 409: "409 Conflict", 413: "413 Payload Too Large",
           422: "422 Unprocessable Entity", 500: "500 Internal Server Error"}


def make_app(bootstrap: str, owner_key_file: str | None = None,
             url: str | None = None) -> "RegistryApp":
    """The registry of the node at ``bootstrap`` (its native port), whose
    clients connect with the owner's key pair when security is on, served
    at ``url`` (where the other registries forward writes to it while it
    leads): what ``kafkalite server`` hands the supervisor to serve.
    Nothing connects before the first request."""
    from kafkalite.client.config import owner_config
    return RegistryApp(SchemaStore({**owner_config({"owner.key_file": owner_key_file}),
                                    "bootstrap.servers": bootstrap}, url=url))


class _HttpError(RegistryError):
    """An error whose HTTP status is its error_code (400, 404, 405, 413)."""


def _truthy(value: str | None) -> bool:
    return (value or "").lower() == "true"


def answer_type(accept: str | None) -> str | None:
    """The type of ANSWER_TYPES the ``Accept`` header takes best (its q
    times the server's weight; the first offered on a tie); None when it
    takes none of them. No header takes the first."""
    if not accept or not accept.strip():
        return CONTENT_TYPE
    wanted = []                     # (media range, q)
    for part in accept.split(","):
        media, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media:
            wanted.append((media.lower(), q))
    best, best_score = None, 0.0
    for offered, weight in ANSWER_TYPES:
        major = offered.split("/")[0] + "/*"
        # the most specific range that matches decides the q
        q = next((q for m, q in wanted if m == offered), None)
        if q is None:
            q = next((q for m, q in wanted if m == major), None)
        if q is None:
            q = next((q for m, q in wanted if m == "*/*"), 0.0)
        if q * weight > best_score:
            best, best_score = offered, q * weight
    return best


class RegistryApp:
    """The WSGI app over one SchemaStore."""

    def __init__(self, store: SchemaStore):
        self.store = store
        # (method, path template, (handler, what it needs: authorization.py)),
        # kafkalite/http_routes.py's table: the first match answers
        W, R, D = Rule(Op.WRITE), Rule(Op.READ), Rule(Op.DELETE)
        DC, AC = Rule(Op.DESCRIBE_CONFIGS), Rule(Op.ALTER_CONFIGS)
        self.writes = {self.register, self.delete_version, self.delete_subject,
                       self.put_config, self.delete_config, self.put_mode, self.delete_mode}
        s, v, i = "/subjects/{subject}", "/versions/{version}", "/schemas/ids/{id}"
        self.router = Router((m, t, (h, rule)) for m, t, h, rule in (
            ("GET", "/", self.root, OPEN),
            ("GET", "/schemas/types", self.schema_types, OPEN),
            ("GET", "/schemas", self.list_schemas, FILTERED),
            ("GET", i, self.schema_by_id, FILTERED),
            ("GET", i + "/schema", self.raw_schema_by_id, FILTERED),
            ("GET", i + "/subjects", self.subjects_by_id, FILTERED),
            ("GET", i + "/versions", self.versions_by_id, FILTERED),
            ("GET", "/subjects", self.list_subjects, FILTERED),
            ("POST", s + "/versions", self.register, W),
            ("GET", s + "/versions", self.list_versions, R),
            ("GET", s + v, self.get_version, R),
            ("DELETE", s + v, self.delete_version, D),
            ("GET", s + v + "/schema", self.raw_version, R),
            ("GET", s + v + "/referencedby", self.referenced_by, R),
            ("POST", s, self.lookup, R),
            ("DELETE", s, self.delete_subject, D),
            ("GET", "/config", self.get_config, DC),          # the global ones: the cluster
            ("PUT", "/config", self.put_config, AC),
            ("DELETE", "/config", self.delete_config, AC),
            ("GET", "/config/{subject}", self.get_config, DC),
            ("PUT", "/config/{subject}", self.put_config, AC),
            ("DELETE", "/config/{subject}", self.delete_config, AC),
            ("POST", "/compatibility" + s + v, self.check, R),
            ("POST", "/compatibility" + s + "/versions", self.check, R),
            ("GET", "/mode", self.get_mode, DC),
            ("PUT", "/mode", self.put_mode, AC),
            ("GET", "/mode/{subject}", self.get_mode, DC),
            ("PUT", "/mode/{subject}", self.put_mode, AC),
            ("DELETE", "/mode/{subject}", self.delete_mode, AC),
            ("GET", "/contexts", self.contexts, OPEN),
        ))

    def close(self) -> None:
        self.store.close()

    # ---- WSGI ---------------------------------------------------------------------------------

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "") or "/"
        content_type = answer_type(environ.get("HTTP_ACCEPT"))
        try:
            if content_type is None:
                content_type = CONTENT_TYPE
                raise _HttpError(406, "HTTP 406 Not Acceptable")
            status, body = self._dispatch(method, path, environ)
        except RegistryError as exc:
            status, body = exc.http_status, exc.body()
        except Exception:               # a bug: answered, logged, never a dropped connection
            log.exception("schema registry: %s %s", method, path)
            status, body = 500, {"error_code": INTERNAL_ERROR,
                                 "message": "Internal Server Error (see the server's log)"}
        # bytes: a leader's answer to a forwarded write, as it gave it
        raw = body if isinstance(body, bytes) else \
            body.encode() if isinstance(body, str) else json.dumps(body).encode()
        start_response(_STATUS.get(status, f"{status} Error"),
                       [("Content-Type", content_type), ("Content-Length", str(len(raw)))])
        return [raw] if method != "HEAD" else []

    def _dispatch(self, method: str, path: str, environ):
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        try:
            (handler, rule), args = self.router.find(method, path)
        except WrongMethod as exc:
            raise _HttpError(405, f"HTTP {method} is not supported on {path}; "
                                  f"{', '.join(sorted(exc.allowed))} is") from None
        except NoRoute:
            raise _HttpError(404, f"HTTP 404 Not Found: no such path {path}") from None
        access = Access(environ)
        access.apply(rule, args)            # before the body is read: 40301 costs nothing
        raw = self._raw_body(environ) if method in ("POST", "PUT") else b""
        body = self._parse(raw) if method in ("POST", "PUT") else None
        if body is not None and access.decides:
            self._readable_references(body.get("references"), access)
        if handler in self.writes:
            return leader.serve_write(self.store, environ, raw,
                                      lambda: handler(*args, query=query, body=body))
        if rule.filtered:
            return 200, handler(*args, query=query, body=body, access=access)
        return 200, handler(*args, query=query, body=body)

    @staticmethod
    def _raw_body(environ) -> bytes:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise _HttpError(400, "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise _HttpError(413, f"a request body of {length} bytes is over the "
                                  f"{MAX_BODY_BYTES} bytes this registry takes")
        return environ["wsgi.input"].read(length) if length > 0 else b""

    @staticmethod
    def _parse(raw: bytes) -> dict:
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except RecursionError:
            raise _HttpError(400, "the request body is JSON nested too deeply") from None
        except ValueError as exc:
            raise _HttpError(400, f"the request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _HttpError(400, "the request body must be a JSON object")
        return body

    # ---- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _version(text: str):
        if text == "latest":
            return "latest"
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v == -1:
            return "latest"
        if not 1 <= v <= MAX_VERSION:
            raise RegistryError(INVALID_VERSION,
                                f"The specified version '{text}' is not a valid version id. "
                                f"Allowed values are between [1, {MAX_VERSION}] and the string "
                                f"\"latest\"")
        return v

    @staticmethod
    def _id(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            # Confluent's {id} is an Integer path parameter: JAX-RS finds no
            # resource for "abc" and rest-utils answers a plain 404
            raise _HttpError(404, "HTTP 404 Not Found") from None

    @staticmethod
    def _schema_json(stored, fmt: str | None) -> dict:
        out = {}
        if stored.schema_type != schemas.AVRO:
            out["schemaType"] = stored.schema_type
        out["schema"] = stored.parsed.formatted(fmt) if stored.parsed else stored.text
        if stored.references:
            out["references"] = stored.references
        return out

    def _version_json(self, st, v, fmt=None) -> dict:
        return {"subject": v.subject, "version": v.version, "id": v.id,
                **self._schema_json(st.schema(v.id), fmt)}

    @staticmethod
    def _schema_fields(body: dict):
        schema = body.get("schema")
        if schema is None:
            raise RegistryError(schemas.INVALID_SCHEMA, "Invalid schema: 'schema' is missing")
        refs = body.get("references") or []
        if not isinstance(refs, list):
            raise schemas.invalid("'references' must be a list")
        return body.get("schemaType"), schema, refs

    # ---- handlers -----------------------------------------------------------------------------

    def root(self, query, body):
        return {}

    def contexts(self, query, body):
        return [":.:"]

    def schema_types(self, query, body):
        return list(schemas.SCHEMA_TYPES)

    def _readable_schema(self, sid: int, access):
        """The schema of ``sid`` if the user may Read some subject it is
        registered under (a super user: any schema); 40301 naming a subject
        the user may see otherwise, or, when the user may see none of them,
        the answer to an unknown id (``_hidden``)."""
        st = self.store.read()
        stored = st.schema(sid)
        subjects = sorted({v.subject for v in st.uses(sid, True)})
        if any(access.may_subject(Op.READ, s, audit=False) for s in subjects):
            return stored
        if not subjects:
            if not access.may_cluster(Op.DESCRIBE):
                raise self._hidden(sid)
            return stored
        seen = [s for s in subjects if access.sees_subject(s)]
        if seen:            # denied, audited once, naming a subject the user may see
            access.require_subject(Op.READ, seen[0])
        access.may_subject(Op.READ, subjects[0])      # audited: an attempt
        raise self._hidden(sid)

    @staticmethod
    def _readable_references(references, access) -> None:
        """A schema's references (register, look up, check compatibility)
        read the subjects they name: Read on each, 40301 naming one the user
        may see, and for one the user may not see the store's answer to a
        subject that is not there (42201), so that a reference cannot tell
        which hidden subjects exist (issue 67). Malformed ones are the
        store's to refuse."""
        for ref in references if isinstance(references, list) else ():
            if not isinstance(ref, dict) or not isinstance(ref.get("subject"), str):
                continue
            subject = ref["subject"]
            if access.may_subject(Op.READ, subject, audit=False):
                continue
            if access.sees_subject(subject):
                access.require_subject(Op.READ, subject)
            access.may_subject(Op.READ, subject)              # audited: an attempt
            name, version = ref.get("name"), ref.get("version")
            if str(version) in ("-1", "latest"):
                raise schemas.invalid(f"reference {name!r}: subject {subject!r} has no version")
            raise schemas.invalid(f"reference {name!r}: version {version} of subject "
                                  f"{subject!r} does not exist")

    @staticmethod
    def _hidden(sid: int):
        """An id whose every subject the user may not see (nor, without
        subjects, the cluster) is answered as an id never given (40403),
        as Confluent answers one: ids are sequential, and a 403 naming a
        subject, or only telling the id apart, would let a user walking
        them list what the ACLs hide (issue 67)."""
        return schema_not_found(f"Schema {sid} not found")

    def schema_by_id(self, sid, query, body, access):
        with self.store.lock:
            stored = self._readable_schema(self._id(sid), access)
            out = self._schema_json(stored, query.get("format"))
            if _truthy(query.get("fetchMaxId")):
                # the highest id given (Confluent's idGenerator.getMaxId): a
                # client learns ids it has not seen yet
                out["maxId"] = self.store.state.max_id
            return out

    def raw_schema_by_id(self, sid, query, body, access):
        with self.store.lock:
            stored = self._readable_schema(self._id(sid), access)
            return stored.parsed.formatted(query.get("format")) if stored.parsed else stored.text

    def _uses(self, sid: int, deleted: bool, access=None):
        """The versions registered with ``sid``; with ``access``, of the
        subjects the user may describe (an unknown id's answer when the
        user may describe none of its subjects, deleted ones counted:
        ``_hidden``)."""
        st = self.store.read()
        st.schema(sid)
        uses = st.uses(sid, deleted)
        if access is None:
            return uses
        every = st.uses(sid, True)
        if every and not any(access.sees_subject(v.subject) for v in every):
            access.may_subject(Op.DESCRIBE, every[0].subject)     # audited: an attempt
            raise self._hidden(sid)
        return [v for v in uses if access.sees_subject(v.subject)]

    def subjects_by_id(self, sid, query, body, access):
        with self.store.lock:
            uses = self._uses(self._id(sid), _truthy(query.get("deleted")), access)
            return sorted({v.subject for v in uses} & (
                {query["subject"]} if "subject" in query else {v.subject for v in uses}))

    def versions_by_id(self, sid, query, body, access):
        with self.store.lock:
            return [{"subject": v.subject, "version": v.version}
                    for v in self._uses(self._id(sid), _truthy(query.get("deleted")), access)]

    def list_subjects(self, query, body, access):
        prefix = query.get("subjectPrefix", query.get("subject", ""))
        deleted_only = _truthy(query.get("deleted_only"))
        deleted = _truthy(query.get("deleted")) or deleted_only
        with self.store.lock:
            st = self.store.read()
            out = []
            for s in sorted(st.subjects):
                if not s.startswith(prefix) or not access.sees_subject(s):
                    continue
                live = st.versions(s)
                if deleted_only:
                    if not live and st.versions(s, True):
                        out.append(s)
                elif live or (deleted and st.versions(s, True)):
                    out.append(s)
            return out

    def list_schemas(self, query, body, access):
        """``GET /schemas``: every version of the subjects under
        ``subjectPrefix`` the user may Read, by subject and version
        (``deleted``, ``latestOnly``, then ``offset`` and ``limit``), as
        Confluent's SchemasResource.getSchemas."""
        prefix = query.get("subjectPrefix", "")
        deleted, latest_only = _truthy(query.get("deleted")), _truthy(query.get("latestOnly"))
        try:
            offset, limit = int(query.get("offset", 0)), int(query.get("limit", -1))
        except ValueError:
            raise _HttpError(404, "HTTP 404 Not Found") from None    # an int query parameter
        out = []
        with self.store.lock:
            st = self.store.read()
            for s in sorted(st.subjects):
                if not s.startswith(prefix) or not access.may_subject(Op.READ, s, audit=False):
                    continue
                versions = st.versions(s, deleted)
                for v in versions[-1:] if latest_only else versions:
                    out.append(self._version_json(st, v))
        out = out[max(offset, 0):]
        return out[:limit] if limit >= 0 else out

    def register(self, subject, query, body):
        schema_type, schema, refs = self._schema_fields(body)
        sid = body.get("id")
        version = body.get("version")
        if sid is not None and (not isinstance(sid, int) or sid < 1):
            raise schemas.invalid(f"'id' must be a positive integer, not {sid!r}")
        if version is not None:
            version = self._version(str(version))
            if version == "latest":
                version = None
        sid, version, _ = self.store.register(subject, schema_type, schema, refs,
                                              _truthy(query.get("normalize")), sid, version)
        return {"id": sid}

    def list_versions(self, subject, query, body):
        deleted_only = _truthy(query.get("deleted_only"))
        with self.store.lock:
            st = self.store.read()
            versions = st.live_subject(subject, _truthy(query.get("deleted")) or deleted_only)
            return [v.version for v in versions if v.deleted or not deleted_only]

    def get_version(self, subject, version, query, body):
        version = self._version(version)
        with self.store.lock:
            st = self.store.read()
            v = st.version(subject, version, _truthy(query.get("deleted")))
            return self._version_json(st, v, query.get("format"))

    def raw_version(self, subject, version, query, body):
        version = self._version(version)
        with self.store.lock:
            st = self.store.read()
            stored = st.schema(st.version(subject, version, _truthy(query.get("deleted"))).id)
            return stored.parsed.formatted(query.get("format")) if stored.parsed else stored.text

    def referenced_by(self, subject, version, query, body):
        version = self._version(version)
        with self.store.lock:
            st = self.store.read()
            v = st.version(subject, version)
            return st.referenced_by(subject, v.version)

    def lookup(self, subject, query, body):
        schema_type, schema, refs = self._schema_fields(body)
        with self.store.lock:
            v = self.store.lookup(subject, schema_type, schema, refs,
                                  _truthy(query.get("normalize")), _truthy(query.get("deleted")))
            return self._version_json(self.store.state, v, query.get("format"))

    def delete_subject(self, subject, query, body):
        return self.store.delete_subject(subject, _truthy(query.get("permanent")))

    def delete_version(self, subject, version, query, body):
        return self.store.delete_version(subject, self._version(version),
                                         _truthy(query.get("permanent")))

    def get_config(self, subject=None, *, query, body):
        with self.store.lock:
            st = self.store.read()
            if subject is not None and subject not in st.configs \
                    and not _truthy(query.get("defaultToGlobal")):
                raise RegistryError(SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level "
                                    f"compatibility configured")
            return {"compatibilityLevel": st.level(subject)}

    def put_config(self, subject=None, *, query, body):
        level = body.get("compatibility", body.get("compatibilityLevel"))
        return {"compatibility": self.store.set_config(subject, level)}

    def delete_config(self, subject=None, *, query, body):
        return {"compatibilityLevel": self.store.delete_config(subject)}

    def check(self, subject, version=None, *, query, body):
        schema_type, schema, refs = self._schema_fields(body)
        verbose = _truthy(query.get("verbose"))
        with self.store.lock:
            st = self.store.read()
            parsed = schemas.parse(schema_type, schema, st.resolve(refs),
                                   _truthy(query.get("normalize")), new=True)
            level = st.level(subject)
            live = st.versions(subject)
            if version is not None:
                wanted = self._version(version)
                if live or wanted != "latest":
                    live = [st.version(subject, wanted)]
                against = [st.schema(v.id).parsed for v in live]
                # one version named: checked against it alone, in the level's direction
                level = level.removesuffix("_TRANSITIVE")
            else:
                against = [st.schema(v.id).parsed for v in live]
                if not level.endswith("_TRANSITIVE") and level != compatibility.NONE:
                    level += "_TRANSITIVE"    # "all versions": each one, as Confluent does
            reasons = compatibility.check(level, parsed, [a for a in against if a is not None])
            out = {"is_compatible": not reasons}
            if verbose:
                out["messages"] = reasons
            return out

    def get_mode(self, subject=None, *, query, body):
        with self.store.lock:
            st = self.store.read()
            if subject is not None and subject not in st.modes \
                    and not _truthy(query.get("defaultToGlobal")):
                raise RegistryError(SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level mode "
                                    f"configured")
            return {"mode": st.mode(subject)}

    def put_mode(self, subject=None, *, query, body):
        return {"mode": self.store.set_mode(subject, body.get("mode"),
                                            _truthy(query.get("force")))}

    def delete_mode(self, subject, query, body):
        return {"mode": self.store.delete_mode(subject)}
