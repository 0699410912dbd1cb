"""An HTTP proxy speaking Confluent REST Proxy's API (v3, and v2's consumers and metadata).

What it holds: the HTTP handlers of Confluent REST Proxy's documented API
(docs.confluent.io, "API Reference for Confluent REST Proxy"):

- errors.py: Confluent's error codes and JSON error bodies as one exception;
- http.py: the WSGI plumbing (routes, bodies, chunked request bodies,
  content types, answers);
- records.py: v3's ``POST .../records`` (key and value of type BINARY,
  JSON or STRING, headers, partition, timestamp; the streaming mode);
- schemas.py: the registry's embedded formats (Avro, Protobuf, JSON
  Schema) for v2 and v3 produce and v2's consumer instances, by
  confluent-kafka's serializers on the node's own schema registry;
- cluster_view.py: what the resource handlers share (the cluster id,
  metadata, Confluent's resource and list shapes);
- v3.py: clusters, brokers, topics, partitions and their replicas;
- v3_configs.py: a topic's and a broker's configs, the cluster's broker
  defaults (get, set, reset, ``configs:alter``);
- v3_groups.py: consumer groups, their consumers and assignments, lags;
- v2_metadata.py: v2's topics, partitions (with their offsets) and brokers;
- consumers.py: v2's consumer instances (create, subscribe, records,
  offsets, delete) and their idle timer; consumer_positions.py their
  assignments and positions (seek);
- authorization.py: what each request asks of the server's authorizer
  for the user logged in (the proxy's clients are the server's own);
- app.py: the WSGI app that routes to the handlers above (and v2's
  produce, to a topic or one partition).

Which process runs it: the supervisor of ``kafkalite server``, on a port of
its own (``rest_proxy_port``, 8082) served by kafkalite's one HTTP server
(http_server.py: keep-alive, the connection cap, TLS) behind the node's login; cli/server.py hands the supervisor
``make_app`` below, as it hands it the schema registry, since the server
layer imports nothing above it. The proxy reaches the node as any client
does, through kafkalite's own clients over the node's native port.

What it may import: the standard library, kafkalite.client,
kafkalite.errors and kafkalite.protocol.enums (the ACL vocabulary),
confluent-kafka's schema registry client and serializers;
never kafkalite.server (the supervisor is handed it, and serves it).
"""


from kafkalite.confluent_http import lazy_app


def make_app(bootstrap: str, owner_key_file: str | None = None,
             instance_timeout_ms: int | None = None):
    """The proxy of the node at ``bootstrap`` as a WSGI app (with a
    ``close()``) that imports the proxy's modules at its first request,
    not on the server's way to ready: what ``kafkalite server`` hands the
    supervisor. ``instance_timeout_ms``: how long a v2 consumer instance
    may stay idle before it is closed (Confluent's
    ``consumer.instance.timeout.ms``)."""
    def build():
        from kafkalite.rest_proxy import app as proxy
        return proxy.make_app(bootstrap, owner_key_file, instance_timeout_ms)
    return lazy_app(build)
