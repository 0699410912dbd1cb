"""The proxy's WSGI app: routes v3 and v2 paths to their handlers (http_routes.py's table).

Answers ``application/json`` on v3 paths and ``application/vnd.kafka.v2+json``
on v2's (or the embedded format's type, for records); an error is
Confluent's body (errors.py) with its HTTP status; a bug is 500, logged,
never a dropped connection. v3's ``POST .../records`` with a chunked body
is the one streamed answer (stream.py).

Who may call: the HTTP server's threads (http_server.py), any number at once. With
security on the server wraps this app in http_login.py's login; this
module does not authenticate. The handlers authorize each Kafka call as
the user logged in (authorization.py).
"""
from __future__ import annotations

import base64
import binascii
import functools
import json
import logging

from kafkalite.http_routes import NoRoute, Router, WrongMethod
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy import http
from kafkalite.rest_proxy.consumers import ConsumerInstances
from kafkalite.rest_proxy.errors import (BAD_REQUEST, INTERNAL_ERROR, INVALID_BINARY_DATA,
                                         METHOD_NOT_ALLOWED, NOT_FOUND, UNSUPPORTED_MEDIA_TYPE,
                                         ProxyError)
from kafkalite.rest_proxy.records import RecordProducer
from kafkalite.rest_proxy.schemas import (KEY_SCHEMA_MISSING, VALUE_SCHEMA_MISSING,
                                          SchemaFormats, subject_of)
from kafkalite.rest_proxy.stream import produce_stream
from kafkalite.rest_proxy.v2_metadata import MetadataResources
from kafkalite.rest_proxy.v3 import ClusterResources
from kafkalite.rest_proxy.v3_configs import BROKER, CLUSTER, TOPIC, ConfigResources
from kafkalite.rest_proxy.v3_groups import GroupResources

log = logging.getLogger("kafkalite.rest_proxy")


def make_app(bootstrap: str, owner_key_file: str | None = None,
             instance_timeout_ms: int | None = None) -> "ProxyApp":
    """The proxy of the node at ``bootstrap`` (its native port), whose
    clients connect with the owner's key pair when security is on."""
    from kafkalite.client.config import owner_config
    return ProxyApp({**owner_config({"owner.key_file": owner_key_file}),
                     "bootstrap.servers": bootstrap}, instance_timeout_ms)


class ProxyApp:
    def __init__(self, client_config: dict, instance_timeout_ms: int | None = None):
        from kafkalite.client import AdminClient
        self.admin = AdminClient(client_config)
        self.v3 = ClusterResources(self.admin)
        self.v2 = MetadataResources(self.admin)
        self.configs = ConfigResources(self.admin)
        self.groups = GroupResources(self.admin)
        self.schemas = SchemaFormats(self.admin, client_config)
        self.producer = RecordProducer(client_config, self.admin, self.schemas)
        self.consumers = ConsumerInstances(client_config, instance_timeout_ms, self.schemas)
        self.router = Router(self._routes())

    def _routes(self) -> list:
        c, v3, v2, cfg, g, ci = ("/v3/clusters/{cluster}", self.v3, self.v2, self.configs,
                                 self.groups, self.consumers)
        t, grp = c + "/topics/{topic}", c + "/consumer-groups/{group}"
        inst = "/consumers/{group}/instances/{instance}"
        scoped = functools.partial
        return [
            ("GET", "/", lambda req: http.Answer(200, {})),
            ("GET", "/v3/clusters", v3.list_clusters),
            ("GET", c, v3.get_cluster),
            ("GET", c + "/brokers", v3.list_brokers),
            ("GET", c + "/brokers/-/configs", cfg.list_every_broker),
            ("GET", c + "/brokers/{broker}", v3.get_broker),
            ("GET", c + "/brokers/{broker}/partition-replicas", v3.broker_replicas),
            ("GET", c + "/brokers/{broker}/configs", scoped(cfg.list, BROKER)),
            ("POST", c + "/brokers/{broker}/configs:alter", scoped(cfg.alter, BROKER)),
            ("GET", c + "/brokers/{broker}/configs/{name}", scoped(cfg.get, BROKER)),
            ("PUT", c + "/brokers/{broker}/configs/{name}", scoped(cfg.put, BROKER)),
            ("DELETE", c + "/brokers/{broker}/configs/{name}", scoped(cfg.delete, BROKER)),
            ("GET", c + "/broker-configs", scoped(cfg.list, CLUSTER)),
            ("POST", c + "/broker-configs:alter", scoped(cfg.alter, CLUSTER)),
            ("GET", c + "/broker-configs/{name}", scoped(cfg.get, CLUSTER)),
            ("PUT", c + "/broker-configs/{name}", scoped(cfg.put, CLUSTER)),
            ("DELETE", c + "/broker-configs/{name}", scoped(cfg.delete, CLUSTER)),
            ("GET", c + "/topics", v3.list_topics),
            ("POST", c + "/topics", v3.create_topic),
            ("GET", t, v3.get_topic),
            ("DELETE", t, self.delete_topic),
            ("GET", t + "/partitions", v3.list_partitions),
            ("GET", t + "/partitions/{partition}", v3.get_partition),
            ("GET", t + "/partitions/{partition}/replicas", v3.list_replicas),
            ("GET", t + "/partitions/{partition}/replicas/{broker}", v3.get_replica),
            ("GET", t + "/configs", scoped(cfg.list, TOPIC)),
            ("POST", t + "/configs:alter", scoped(cfg.alter, TOPIC)),
            ("GET", t + "/configs/{name}", scoped(cfg.get, TOPIC)),
            ("PUT", t + "/configs/{name}", scoped(cfg.put, TOPIC)),
            ("DELETE", t + "/configs/{name}", scoped(cfg.delete, TOPIC)),
            ("POST", t + "/records", self.produce_v3),
            ("GET", c + "/consumer-groups", g.list_groups),
            ("GET", grp, g.get_group),
            ("GET", grp + "/lag-summary", g.group_lag_summary),
            ("GET", grp + "/lags", g.list_lags),
            ("GET", grp + "/lags/{topic}/partitions/{partition}", g.get_lag),
            ("GET", grp + "/consumers", g.list_consumers),
            ("GET", grp + "/consumers/{consumer}", g.get_consumer),
            ("GET", grp + "/consumers/{consumer}/assignments", g.list_assignments),
            ("GET", grp + "/consumers/{consumer}/assignments/{topic}/partitions/{partition}",
             g.get_assignment),
            ("GET", "/topics", v2.list_topics),
            ("GET", "/topics/{topic}", v2.get_topic),
            ("POST", "/topics/{topic}", self.produce_v2),
            ("GET", "/topics/{topic}/partitions", v2.list_partitions),
            ("GET", "/topics/{topic}/partitions/{partition}", v2.get_partition),
            ("POST", "/topics/{topic}/partitions/{partition}", self.produce_v2_partition),
            ("GET", "/topics/{topic}/partitions/{partition}/offsets", v2.partition_offsets),
            ("GET", "/brokers", v2.list_brokers),
            ("POST", "/consumers/{group}", ci.create),
            ("DELETE", inst, ci.delete),
            ("POST", inst + "/subscription", ci.subscribe),
            ("GET", inst + "/subscription", ci.subscription),
            ("DELETE", inst + "/subscription", ci.unsubscribe),
            ("POST", inst + "/assignments", ci.assign),
            ("GET", inst + "/assignments", ci.assignments),
            ("POST", inst + "/positions", ci.seek),
            ("POST", inst + "/positions/beginning", ci.seek_to_beginning),
            ("POST", inst + "/positions/end", ci.seek_to_end),
            ("GET", inst + "/records", ci.records),
            ("POST", inst + "/offsets", ci.commit),
            ("GET", inst + "/offsets", ci.committed),
        ]

    def close(self) -> None:
        self.consumers.close()
        self.producer.close()
        self.admin.close()

    def __call__(self, environ, start_response):
        req = http.Request(environ)
        error_type = http.V2 if not req.path.startswith("/v3") else http.JSON
        try:
            try:
                handler, args = self.router.find(req.method, req.path)
            except NoRoute:
                raise ProxyError(NOT_FOUND, "HTTP 404 Not Found") from None
            except WrongMethod:
                raise ProxyError(METHOD_NOT_ALLOWED, "HTTP 405 Method Not Allowed") from None
            answer = handler(req, *args)
        except ProxyError as exc:
            answer = http.Answer(exc.http_status, exc.body(), error_type)
        except Exception:
            log.exception("rest proxy: %s %s", req.method, req.path)
            answer = http.Answer(500, {"error_code": INTERNAL_ERROR,
                                       "message": "Internal Server Error (see the server's "
                                                  "log)"}, error_type)
        if not isinstance(answer, http.Answer):            # a streamed answer
            start_response("200 OK", [("Content-Type", http.JSON)])
            return answer
        status, headers, raw = http.encode(answer.status, answer.body, answer.content_type)
        start_response(status, headers)
        return [raw]

    def delete_topic(self, req, cluster_id, topic):
        answer = self.v3.delete_topic(req, cluster_id, topic)
        self.producer.forget(topic)
        return answer

    # ---- producing ----------------------------------------------------------------------------

    def produce_v3(self, req, cluster_id, topic):
        self.v3.check(cluster_id)
        req.access.require(Op.WRITE, Res.TOPIC, topic)         # Produce
        if req.content_type and not req.content_type.endswith("json"):
            raise ProxyError(UNSUPPORTED_MEDIA_TYPE, f"HTTP 415 Unsupported Media Type: "
                                                     f"{req.content_type}")
        if req.chunked:
            self.producer.partitions(topic)         # 40401 before the 200 of a stream
            return produce_stream(self.producer, cluster_id, topic, req.stream(), req,
                                  req.environ.get("kafkalite.send_room"))
        record = req.json(None)
        if record is None:
            raise ProxyError(BAD_REQUEST, "the request body is empty: a record is expected")
        answer = self.producer.produce_one(cluster_id, topic, record, req)
        return http.Answer(answer["error_code"] if answer["error_code"] < 1000
                           else int(str(answer["error_code"])[:3]), answer)

    def produce_v2_partition(self, req, topic, partition):
        """v2's ``POST /topics/{t}/partitions/{p}``: the topic's produce,
        every record to partition ``p`` (40402 when the topic has none)."""
        self.v2.partition_metadata(req, topic, partition)
        return self.produce_v2(req, topic, int(partition))

    def produce_v2(self, req, topic, partition: int | None = None):
        """v2's ``POST /topics/{t}``: ``{"records": [{"key", "value",
        "partition"}]}`` in the embedded format of the content type (json,
        binary, or avro, protobuf, jsonschema with ``key_schema`` /
        ``key_schema_id`` and ``value_schema`` / ``value_schema_id``, the
        registry's formats, schemas.py); answers ``{"key_schema_id",
        "value_schema_id", "offsets": [{"partition", "offset",
        "error_code", "error"}]}``."""
        fmt = V2_PRODUCE_FORMATS.get(req.content_type)
        if fmt is None:
            raise ProxyError(UNSUPPORTED_MEDIA_TYPE, f"HTTP 415 Unsupported Media Type: "
                                                     f"{req.content_type or 'none'}")
        req.access.require(Op.WRITE, Res.TOPIC, topic)         # Produce
        body = req.json({})
        records = body.get("records") if isinstance(body, dict) else None
        if not isinstance(records, list):
            raise ProxyError(BAD_REQUEST, "records is a list of {key, value, partition}")
        for r in records:
            if not isinstance(r, dict):
                raise ProxyError(BAD_REQUEST, "a record is a JSON object")
            if fmt == "BINARY":
                for f in ("key", "value"):
                    try:
                        if r.get(f) is not None:
                            base64.b64decode(r[f], validate=True)
                    except (binascii.Error, ValueError, TypeError):
                        raise ProxyError(INVALID_BINARY_DATA, f"{f} is not base64") from None
        ids = {"key": None, "value": None}
        if fmt in ("avro", "protobuf", "jsonschema"):
            self.producer.partitions(topic)         # 40401 before a schema is registered
            for field, missing in (("key", KEY_SCHEMA_MISSING), ("value", VALUE_SCHEMA_MISSING)):
                text, given = body.get(f"{field}_schema"), body.get(f"{field}_schema_id")
                if text is None and given is None:
                    if any(r.get(field) is not None for r in records):
                        raise ProxyError(missing, f"Request includes {field}s and uses a "
                                                  f"format that requires schemas, but does "
                                                  f"not include the {field}_schema or "
                                                  f"{field}_schema_id fields")
                    continue
                ids[field] = self.schemas.schema_id(req, fmt, topic, field == "key",
                                                    schema=text, schema_id=given)

        # every record encoded before any is produced: one that does not fit
        # its schema fails the request (42203), as Confluent's v2 does
        writers = {f: self.schemas.writer(req, fmt, i, subject_of(topic, f == "key"))
                   for f, i in ids.items() if i is not None}
        encoded = [{f: base64.b64encode(writers[f](r[f], topic, f == "key")).decode()
                    for f in writers if r.get(f) is not None} for r in records]

        def data(field, r, i):
            if field in encoded[i]:
                return {"type": "BINARY", "data": encoded[i][field]}
            return {"type": fmt if fmt in ("JSON", "BINARY") else "JSON", "data": r[field]}
        cluster_id = self.v3.cluster_id()
        chunks = [json.dumps({
            "partition_id": r.get("partition") if partition is None else partition,
            **({"key": data("key", r, i)} if r.get("key") is not None else {}),
            **({"value": data("value", r, i)} if "value" in r else {}),
        }).encode() for i, r in enumerate(records)]
        answers = list(produce_stream(self.producer, cluster_id, topic, iter(chunks), req))
        offsets = []
        for line in b"".join(answers).splitlines():
            a = json.loads(line)
            ok = a["error_code"] == 200
            offsets.append({"partition": a.get("partition_id"), "offset": a.get("offset"),
                            "error_code": None if ok else a["error_code"],
                            "error": None if ok else a.get("message")})
        return http.Answer(200, {"key_schema_id": ids["key"], "value_schema_id": ids["value"],
                                 "offsets": offsets}, http.V2)


# v2 produce's content types -> the embedded format
V2_PRODUCE_FORMATS = {http.V2_JSON: "JSON", http.V2_BINARY: "BINARY", http.V2_AVRO: "avro",
                      http.V2_PROTOBUF: "protobuf", http.V2_JSONSCHEMA: "jsonschema"}
