"""The web console: a browser UI for one kafkalite node, served by the node itself.

What is here:

- ``static/``: the pages, plain HTML, CSS and JavaScript shipped as package
  data and served as they are (no build step, nothing fetched from the
  network: charts are drawn as SVG by ``console.js`` itself);
- ``app.py``: the WSGI app mounted at ``/console`` on the supervisor's
  metrics port (``kafkalite server`` mounts it, ``--no-console`` leaves it
  out): the static files, and a JSON API under ``/console/api/``;
- ``api.py``: what the API does, as an ordinary client of the broker
  (kafkalite.client's AdminClient and Consumer against the node's own
  native endpoint);
- ``schemas.py``: the schema registry as the console shows it (a topic's
  subjects, every subject, records in Confluent's wire format decoded),
  asked over HTTP with the user's own login;
- ``history.py``: throughput and consumer-group lag over time, sampled
  from the node's metrics registry;
- ``authorization.py``: what each action asks of the authorizer, as the
  user logged in (one table, ``RULES``).

Why a client and not a view of the supervisor's state: the app runs on the
metrics HTTP server's threads, and the supervisor's controller and group
coordinator are owned by its loop thread, which nothing else may touch.
Going through the native protocol gives the console exactly what any
client sees (and the same errors), with every change made by the
controller on its own loop; the only thing read in-process is the metrics
registry, which the metrics module already serves to its HTTP thread.

Imports: ``kafkalite.client``, ``kafkalite.errors``, the standard
library, and fastavro and protobuf (schemas.py's decoding); never
``kafkalite.server`` (the server is given this package's ``make_app`` by
the CLI, so the layers stay one-way).

With security on the supervisor puts the app behind a login
(server/auth/http_login.py: any of the SASL users) and its clients connect
with the owner's key pair (``make_app``'s ``client_config``), so the
console itself acts as the user logged in: with the authorizer on, each
action is decided by the supervisor's authorizer for that principal, as
the same user's Kafka request would be (authorization.py), and what it
denies is answered 403 or left out of lists. The page sends
``X-Kafkalite-Console`` with every API call, without which a change is
refused there.

The SQL page (console.js ``views.sql``) has no API route of its own: it
posts to the node's ``POST /query`` on the same port and login
(kafkalite/sql/http_query.py), so a query runs there with the user's
principal and ACLs, in one of its slots, and ends when the page cancels
(closes) the request.

Bad input to the API is answered 4xx with ``{"error": message}``; reads of
records are bounded in count, bytes and time (api.py's limits).
"""
from kafkalite.webconsole.app import ConsoleApp, make_app

__all__ = ["ConsoleApp", "make_app"]
