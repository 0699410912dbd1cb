"""The node's Confluent-style HTTP apps on ports of their own: the schema
registry, the REST proxy, the Iceberg REST catalog, each a WSGI app the
caller of serve() hands in (the server layer imports nothing above it).

One serving path for every node of a cluster: the controller's node
(supervisor.py) serves all three; a broker node (broker_node.py) serves
the schema registry, so that every node's registry takes requests and
the registries' leader election (kafkalite/registry/leader.py) has one
registry per node to choose from, as Confluent's cluster of registries
has. Both serve it the same way: kafkalite's one HTTP server
(kafkalite/http_server.py: keep-alive, the connection cap, TLS), the
node's login with security on (http_login.py), Confluent's JSON error
bodies for a refused login.

Who may call: the node's one loop (the supervisor's, or the broker
node's); the apps run on the HTTP server's threads.
"""
from __future__ import annotations

import threading

from kafkalite.server.auth.credentials import CredentialStore, users_file
from kafkalite.server.auth.http_login import HttpLogin
from kafkalite.server.auth.security import http_tls_context, security_enabled


def http_login(config, authorizer) -> HttpLogin | None:
    """The login in front of every HTTP port with security on (the HTTP
    ports are doors too), against the node's SASL users file; None when
    security is off. ``authorizer``: the node's (None when off)."""
    if not security_enabled(config):
        return None
    return HttpLogin(CredentialStore(users_file(config.data_dir, config.sasl_users_file)),
                     authorizer, config.connection_failed_authentication_delay_ms)


def serve_app(config, app, port: int, login, name: str, refuse=None):
    """``app`` (a client of the node) served on ``port`` as the HTTP port
    is: its connection cap, TLS and login (``with_login``). ``refuse``:
    what a connection over the cap gets (the node's metrics count it); a
    503 by default. Answers the HTTP server (``server_port``, ``close``)."""
    from kafkalite.http_server import serve
    return serve(config.host, port, with_login(app, login), http_tls_context(config),
                 max_connections=config.http_max_connections, refuse=refuse, name=name)


def with_login(app, login):
    """``app`` behind ``login`` (None: security off): any user who logged
    in; the app asks the ACLs for that user through
    ``environ["kafkalite.authorize"]``. A refused login gets Confluent's
    JSON error body, or the app's own (``login_error_body``)."""
    if login is None:
        return app
    return login.wrap(app, json_errors=True, error_body=getattr(app, "login_error_body", None))


def http_url(config, port: int) -> str:
    """Where another host reaches an HTTP port of this node."""
    host = config.public_host
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{'https' if config.http_tls else 'http'}://{host}:{port}"


def client_key_file(config, owner_key_file: str | None) -> str | None:
    """The key pair an app's clients reach the native ports with: the
    owner's key file of this run (security on without a key file), else
    the native ports' own key file (on a cluster, every node's: the
    controller's port may be on another host); None when they take none."""
    return owner_key_file or config.native_curve_secret_key_file or None


class SchemaRegistryDoor:
    """The node's schema registry on ``schema_registry_port``: ``factory(
    bootstrap, owner key file)`` (kafkalite/registry/ make_app), a client
    of the cluster through the native port at ``bootstrap``, served and
    advertised at its URL (where the cluster's other registries forward
    writes while it leads).

    It outlives the node's roles, as the workers do (serve()): a broker
    node hands it to the supervisor of a takeover, and a supervisor that
    found another controller first hands it to the broker node that
    follows; each ``adopt``s it with its own bootstrap (the controller's
    native port moves with the lease) and login. The port and the URL
    stay, so no second registry binds the node's port and the other
    registries' forwarding finds it where it was. Adopting builds the app
    again over the new bootstrap and closes the old one aside; a request
    already in the old app finishes there."""

    def __init__(self, config, factory, bootstrap: str, owner_key_file: str | None, login,
                 refuse=None):
        self.config = config
        self.factory = factory
        self.bootstrap, self.owner_key_file = bootstrap, owner_key_file
        self.app = factory(bootstrap, owner_key_file)
        self._served = with_login(self.app, login)
        self.refuse = refuse
        self.http = serve_app(config, self._current, config.schema_registry_port, None,
                              "schema registry", self._refuse)
        self.url = http_url(config, self.http.server_port)
        self.app.advertise(self.url)

    def _current(self, environ, start_response):
        return self._served(environ, start_response)

    def _refuse(self, sock, address, answer) -> None:
        if self.refuse is not None:
            self.refuse(sock, address, answer)
        elif answer:
            from kafkalite.http_server import answer_busy
            answer_busy(sock)

    def adopt(self, bootstrap: str, owner_key_file: str | None, login, refuse=None) -> None:
        """Serve on over the native port at ``bootstrap``, behind ``login``."""
        old = self.app
        if (bootstrap, owner_key_file) != (self.bootstrap, self.owner_key_file):
            self.app = self.factory(bootstrap, owner_key_file)
            self.app.advertise(self.url)
            self.bootstrap, self.owner_key_file = bootstrap, owner_key_file
        self._served, self.refuse = with_login(self.app, login), refuse
        if old is not self.app:
            _close_aside(old)

    def close(self, wait: bool = True) -> None:
        """Stop serving and close the app's clients: the port is free
        when this returns. ``wait=False``: the clients are closed on a
        thread of their own (see _close_aside)."""
        self.http.close()
        if wait:
            self.app.close()
        else:
            _close_aside(self.app)


def _close_aside(app) -> None:
    """Close ``app`` on a thread of its own: its store's lock may be held by
    a request waiting out the store's timeout on a controller that is gone,
    and the node's loop (which finds the new controller, or takes over)
    must not wait with it."""
    threading.Thread(target=app.close, name="schema-registry-close", daemon=True).start()
