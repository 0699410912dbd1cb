"""A schema registry compatible with Confluent Schema Registry's REST API.

What it holds: schemas (Avro, Protobuf, JSON Schema) registered under
subjects with versions and global ids, compatibility levels and modes,
kept in a compacted ``_schemas`` topic with Confluent's key/value record
layout, the topic being the source of truth.

- errors.py: Confluent's error codes as one exception type;
- schemas.py: parsing and the stored and canonical form of each type;
- avro_schemas.py: Avro's checks of a new schema and Confluent's
  canonical text of one (its identity);
- compatibility.py: the seven compatibility levels and each type's rules;
- state.py: what ``_schemas`` says, in memory, with its indexes (a
  schema by id, the versions of an id, an id by identity);
- store.py: ``_schemas`` read into that state, and the one writer of it;
- leader.py: which of the cluster's registries writes, and the others'
  forwarding of writes to it;
- authorization.py: what each route asks of the server's ACLs for the
  user logged in (a subject is the TOPIC resource ``subject:<name>``);
- rest.py: the HTTP handlers (a WSGI app).

Which process runs it: the supervisor of ``kafkalite server`` (the process
that already serves HTTP), and on a cluster each broker node's process
too, on a port of its own (``schema_registry_port``, 8081) served by
kafkalite's one HTTP server (http_server.py: keep-alive, the connection
cap, TLS) behind the node's login (server/node/http_apps.py); cli/server.py hands the supervisor ``make_app`` below, as it hands it
the web console, since the server layer imports nothing above it. The
registry reaches the broker as any client does, through kafkalite's own
client over the node's native port: it never touches the supervisor's
loop state.

What it may import: the standard library, kafkalite.client,
kafkalite.errors and kafkalite.protocol.enums (the ACL vocabulary), and the
schema libraries (fastavro and avro, protobuf
with proto-schema-parser, jsonschema); never kafkalite.server (the
supervisor is handed it, and serves it).
"""


from kafkalite.confluent_http import lazy_app


def make_app(bootstrap: str, owner_key_file: str | None = None):
    """The registry of the node at ``bootstrap`` as a WSGI app (with a
    ``close()``, and ``advertise(url)``: where it is served, once bound)
    that imports the registry (rest.py and the modules under it) at its
    first request, not on the server's way to ready: what ``kafkalite
    server`` hands the supervisor."""
    where: dict = {}

    def build():
        from kafkalite.registry import rest
        where["app"] = rest.make_app(bootstrap, owner_key_file, where.get("url"))
        return where["app"]

    def advertise(url: str) -> None:
        where["url"] = url
        if "app" in where:
            where["app"].store.url = url
    app = lazy_app(build)
    app.advertise = advertise
    return app
