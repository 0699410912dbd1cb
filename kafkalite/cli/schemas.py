"""``kafkalite schemas``: the schema registry's subjects, versions and
compatibility from the shell (register, list, get, versions, check,
delete, config).

It speaks the registry's REST API (Confluent Schema Registry's, served by
``kafkalite server``: kafkalite/registry/) with the standard library's
HTTP client, at ``--url`` or the ``schema_registry`` address in
``<data dir>/server.json``; with security on, as a SASL user over HTTP
Basic (``--user``, ``--password`` or ``$KAFKALITE_SASL_PASSWORD``). An
error answer is one line, the registry's message and error code, and
exit status 1; ``check`` exits 1 for an incompatible schema too.

Who calls: the ``kafkalite`` process (cli/__init__.py's parser and main).
"""
from __future__ import annotations

import json
import os
import sys

from kafkalite.cli.client_config import DEFAULT_DATA_DIR

DESCRIPTION = ("Register, list, get, check and delete schemas in the schema registry "
               "kafkalite server serves (Confluent Schema Registry's REST API).")
HELP = "register, list, get, check, delete schemas in the schema registry"
DEFAULT_URL = "http://127.0.0.1:8081"
TYPES = ("AVRO", "PROTOBUF", "JSON")
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")


class CommandError(Exception):
    """One line for the user; exit status 1."""


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", required=True)

    def command(name: str, text: str):
        a = sub.add_parser(name, help=text, description=text)
        a.add_argument("--url", help="the registry (default: schema_registry of "
                                     "<data dir>/server.json, else " + DEFAULT_URL + ")")
        a.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                       help="where to find server.json (default ./kafkalite-data)")
        a.add_argument("--user", help="a SASL user of the server (security on)")
        a.add_argument("--password", help="default: $KAFKALITE_SASL_PASSWORD")
        a.add_argument("--cafile", help="CA certificate of an https:// registry (http_tls)")
        a.add_argument("--timeout", type=float, default=10.0,
                       help="seconds to wait for an answer (default: 10)")
        return a

    def schema_source(a) -> None:
        a.add_argument("--schema", help="the schema text")
        a.add_argument("--schema-file", metavar="FILE", help="a file holding the schema "
                                                             "(.avsc, .proto, .json)")
        a.add_argument("--type", choices=TYPES,
                       help="default: PROTOBUF for a .proto file, else AVRO")
        a.add_argument("--reference", action="append", default=[],
                       metavar="NAME=SUBJECT:VERSION",
                       help="a schema it references (repeatable)")
        a.add_argument("--normalize", action="store_true",
                       help="normalize the schema first (normalize=true)")

    a = command("register", "register a schema under a subject (its id is printed)")
    a.add_argument("subject")
    schema_source(a)
    a = command("list", "list the subjects")
    a.add_argument("--deleted", action="store_true", help="soft-deleted ones too")
    a.add_argument("--prefix", default="", help="only subjects that start with it")
    a = command("get", "print a schema: of a subject's version, or by --id")
    a.add_argument("subject", nargs="?")
    a.add_argument("--version", default="latest", help="a version or latest (default)")
    a.add_argument("--id", type=int, help="the schema with this global id")
    a = command("versions", "list a subject's versions")
    a.add_argument("subject")
    a.add_argument("--deleted", action="store_true", help="soft-deleted ones too")
    a = command("check", "check a schema's compatibility with a subject (exit 1: incompatible)")
    a.add_argument("subject")
    a.add_argument("--version", help="against this version only (default: as the "
                                     "subject's compatibility level says)")
    schema_source(a)
    a = command("delete", "delete a subject, or one --version of it (soft unless --permanent)")
    a.add_argument("subject")
    a.add_argument("--version")
    a.add_argument("--permanent", action="store_true",
                   help="delete for good what was soft-deleted before")
    a = command("config", "show or --set the compatibility level, of a subject or global")
    a.add_argument("subject", nargs="?")
    a.add_argument("--set", choices=LEVELS, metavar="LEVEL",
                   help=f"one of {', '.join(LEVELS)}")


def registry_url(args) -> str:
    if args.url:
        return args.url.rstrip("/")
    try:
        with open(os.path.join(args.data_dir, "server.json")) as f:
            url = json.load(f).get("schema_registry")
    except (OSError, ValueError):
        url = None
    return (url or DEFAULT_URL).rstrip("/")


def _request(args, method: str, path: str, body: dict | None = None):
    # imported here: building the CLI's parser imports this module for every command
    import base64
    import ssl
    import urllib.error
    import urllib.request
    url = registry_url(args) + path
    request = urllib.request.Request(
        url, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json",
                 "Accept": "application/vnd.schemaregistry.v1+json"})
    password = args.password or os.environ.get("KAFKALITE_SASL_PASSWORD")
    if args.user:
        token = base64.b64encode(f"{args.user}:{password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=args.cafile) if args.cafile else None
    try:
        with urllib.request.urlopen(request, timeout=args.timeout, context=context) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            answer = json.loads(raw)
            message = f"{answer['message']} (error {answer['error_code']})"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code}: {raw.decode(errors='replace').strip()[:200]}"
        if exc.code == 401:
            message += "; log in with --user and --password (a SASL user of the server)"
        raise CommandError(message) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"cannot reach the schema registry at {registry_url(args)}: "
                           f"{reason}") from None


def _schema_body(args) -> dict:
    if (args.schema is None) == (args.schema_file is None):
        raise CommandError("give the schema with --schema or --schema-file (one of them)")
    text = args.schema
    if args.schema_file is not None:
        try:
            with open(args.schema_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise CommandError(f"cannot read {args.schema_file}: {exc.strerror}") from None
    schema_type = args.type or ("PROTOBUF" if (args.schema_file or "").endswith(".proto")
                                else "AVRO")
    body = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    refs = []
    for ref in args.reference:
        name, eq, rest = ref.partition("=")
        subject, colon, version = rest.rpartition(":")
        if not (eq and colon and name and subject and version.isdigit()):
            raise CommandError(f"--reference {ref!r}: expected NAME=SUBJECT:VERSION")
        refs.append({"name": name, "subject": subject, "version": int(version)})
    if refs:
        body["references"] = refs
    return body


def _quote(subject: str) -> str:
    import urllib.parse
    return urllib.parse.quote(subject, safe="")


def _print_schema(answer: dict) -> None:
    text = answer.get("schema", "")
    try:
        text = json.dumps(json.loads(text), indent=2)
    except ValueError:
        pass                            # .proto text, printed as it is
    head = [f"{k} {answer[k]}" for k in ("subject", "version", "id") if k in answer]
    head.append(f"type {answer.get('schemaType', 'AVRO')}")
    for ref in answer.get("references", []):
        head.append(f"reference {ref['name']}={ref['subject']}:{ref['version']}")
    print("# " + ", ".join(head))
    print(text)


def run(args) -> int:
    try:
        return _run(args)
    except CommandError as exc:
        print(f"kafkalite schemas {args.action}: {exc}", file=sys.stderr)
        return 1


def _run(args) -> int:
    a = args.action
    if a == "register":
        normalize = "?normalize=true" if args.normalize else ""
        answer = _request(args, "POST", f"/subjects/{_quote(args.subject)}/versions{normalize}",
                          _schema_body(args))
        got = _request(args, "GET", f"/schemas/ids/{answer['id']}/versions")
        version = max((v["version"] for v in got if v["subject"] == args.subject), default="?")
        print(f"registered id {answer['id']} as version {version} of {args.subject}")
    elif a == "list":
        query = "?deleted=true" if args.deleted else ""
        for subject in _request(args, "GET", f"/subjects{query}"):
            if subject.startswith(args.prefix):
                print(subject)
    elif a == "get":
        if args.id is not None:
            _print_schema(_request(args, "GET", f"/schemas/ids/{args.id}"))
        elif args.subject:
            _print_schema(_request(args, "GET", f"/subjects/{_quote(args.subject)}/versions/"
                                                f"{_quote(args.version)}"))
        else:
            raise CommandError("give a subject (with --version) or --id")
    elif a == "versions":
        query = "?deleted=true" if args.deleted else ""
        print(" ".join(str(v) for v in _request(
            args, "GET", f"/subjects/{_quote(args.subject)}/versions{query}")))
    elif a == "check":
        path = f"/compatibility/subjects/{_quote(args.subject)}/versions"
        if args.version:
            path += f"/{_quote(args.version)}"
        answer = _request(args, "POST", path + "?verbose=true", _schema_body(args))
        if answer["is_compatible"]:
            print(f"compatible with {args.subject}")
            return 0
        print(f"incompatible with {args.subject}: {'; '.join(answer.get('messages', []))}")
        return 1
    elif a == "delete":
        query = "?permanent=true" if args.permanent else ""
        how = "permanently deleted" if args.permanent else "deleted (soft)"
        if args.version:
            got = _request(args, "DELETE", f"/subjects/{_quote(args.subject)}/versions/"
                                           f"{_quote(args.version)}{query}")
            print(f"{how} version {got} of {args.subject}")
        else:
            got = _request(args, "DELETE", f"/subjects/{_quote(args.subject)}{query}")
            print(f"{how} {args.subject}: version(s) {', '.join(map(str, got))}")
    elif a == "config":
        path = "/config" + (f"/{_quote(args.subject)}" if args.subject else "")
        if args.set:
            _request(args, "PUT", path, {"compatibility": args.set})
        answer = _request(args, "GET", path + ("?defaultToGlobal=true" if args.subject else ""))
        print(f"{args.subject or 'global'}: {answer['compatibilityLevel']}")
    return 0
