"""The OpenAPI 3.0 description of the REST API (rest.py), served at
``GET /openapi.json``: one entry per path and method with its parameters,
request body and answers (bodies as Kafka Connect documents them)."""
from __future__ import annotations

_ERR = {"description": "Kafka's error body",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _json(ref_or_schema, description="OK"):
    schema = {"$ref": f"#/components/schemas/{ref_or_schema}"} \
        if isinstance(ref_or_schema, str) else ref_or_schema
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(summary, ok, params=(), body=None, errors=(400, 404, 409, 500)):
    op = {"summary": summary, "responses": {**ok, **{str(e): _ERR for e in errors}}}
    if params:
        op["parameters"] = list(params)
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}}
    return op


def _p(name, where="path", type_="string"):
    return {"name": name, "in": where, "required": where == "path", "schema": {"type": type_}}


N, T = _p("name"), _p("task", type_="integer")
NO_CONTENT = {"204": {"description": "done"}}
ACCEPTED = {"202": {"description": "accepted"}}
OBJ = {"type": "object", "additionalProperties": True}

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "kafkalite Connect REST API", "version": "1",
             "description": "Kafka Connect's REST API, as served by `kafkalite connect`."},
    "paths": {
        "/": {"get": _op("worker version and the Kafka cluster's id", {"200": _json(OBJ)},
                         errors=(500,))},
        "/health": {"get": _op("the worker's health (KIP-1017): healthy (200), starting (503) "
                               "or unhealthy (500), with a message",
                               {c: _json(OBJ) for c in ("200", "500", "503")}, errors=())},
        "/admin/loggers": {"get": _op("loggers with a level (KIP-495)", {"200": _json(OBJ)},
                                      errors=(500,))},
        "/admin/loggers/{name}": {
            "get": _op("a logger's level", {"200": _json(OBJ)}, [N]),
            "put": _op("set a namespace's level (scope=worker|cluster, KIP-976)",
                       {"200": _json({"type": "array", "items": {"type": "string"}}),
                        **NO_CONTENT}, [N, _p("scope", "query")], "Config")},
        "/connectors": {
            "get": _op("connector names (expand=status|info: objects by name)",
                       {"200": _json({"oneOf": [{"type": "array", "items": {"type": "string"}},
                                                OBJ]})}, [_p("expand", "query")]),
            "post": _op("create a connector", {"201": _json("ConnectorInfo", "created")},
                        body="CreateConnector")},
        "/connectors/{name}": {
            "get": _op("config and tasks", {"200": _json("ConnectorInfo")}, [N]),
            "delete": _op("delete", NO_CONTENT, [N])},
        "/connectors/{name}/config": {
            "get": _op("config", {"200": _json(OBJ)}, [N]),
            "put": _op("create or update", {"200": _json("ConnectorInfo", "updated"),
                                            "201": _json("ConnectorInfo", "created")}, [N],
                       "Config"),
            "patch": _op("merge into the config, null removes a key (KIP-477)",
                         {"200": _json("ConnectorInfo")}, [N], "Config")},
        "/connectors/{name}/status": {"get": _op("state", {"200": _json("Status")}, [N])},
        "/connectors/{name}/topics": {"get": _op("active topics (KIP-558)", {"200": _json(OBJ)},
                                                 [N], errors=(403, 404, 500))},
        "/connectors/{name}/topics/reset": {"put": _op("forget the active topics", ACCEPTED, [N],
                                                       errors=(403, 404, 500))},
        "/connectors/{name}/tasks": {"get": _op("task configs", {"200": _json(
            {"type": "array", "items": OBJ})}, [N])},
        "/connectors/{name}/tasks/{task}/status": {"get": _op("task state", {"200": _json(
            "TaskState")}, [N, T])},
        "/connectors/{name}/tasks/{task}/restart": {"post": _op("restart a task", NO_CONTENT,
                                                                [N, T])},
        "/connectors/{name}/restart": {"post": _op(
            "restart (KIP-745)", {**NO_CONTENT, "202": _json("Status", "restarting")},
            [N, _p("includeTasks", "query", "boolean"), _p("onlyFailed", "query", "boolean")])},
        "/connectors/{name}/pause": {"put": _op("pause", ACCEPTED, [N])},
        "/connectors/{name}/resume": {"put": _op("resume", ACCEPTED, [N])},
        "/connectors/{name}/stop": {"put": _op("stop (KIP-875)", NO_CONTENT, [N])},
        "/connectors/{name}/offsets": {
            "get": _op("offsets (KIP-875)", {"200": _json("Offsets")}, [N]),
            "patch": _op("alter offsets of a stopped connector", {"200": _json("Message")}, [N],
                         "Offsets"),
            "delete": _op("reset offsets of a stopped connector", {"200": _json("Message")},
                          [N])},
        "/connector-plugins": {"get": _op("installed plugins", {"200": _json(
            {"type": "array", "items": OBJ})}, [_p("connectorsOnly", "query", "boolean")])},
        "/connector-plugins/{plugin}/config": {"get": _op(
            "the plugin's config definitions (KIP-769)", {"200": _json(
                {"type": "array", "items": OBJ})}, [_p("plugin")])},
        "/connector-plugins/{plugin}/config/validate": {"put": _op(
            "validate a config", {"200": _json("ConfigInfos")}, [_p("plugin")], "Config")},
    },
    "components": {"schemas": {
        "Error": {"type": "object", "required": ["error_code", "message"],
                  "properties": {"error_code": {"type": "integer"},
                                 "message": {"type": "string"}}},
        "Config": {"type": "object", "additionalProperties": {"type": "string"}},
        "CreateConnector": {"type": "object", "required": ["name", "config"], "properties": {
            "name": {"type": "string"}, "config": {"$ref": "#/components/schemas/Config"}}},
        "ConnectorInfo": {"type": "object", "properties": {
            "name": {"type": "string"}, "config": {"$ref": "#/components/schemas/Config"},
            "tasks": {"type": "array", "items": {"type": "object", "properties": {
                "connector": {"type": "string"}, "task": {"type": "integer"}}}},
            "type": {"type": "string", "enum": ["source", "sink"]}}},
        "TaskState": {"type": "object", "properties": {
            "id": {"type": "integer"}, "state": {"type": "string"},
            "worker_id": {"type": "string"}, "trace": {"type": "string"}}},
        "Status": {"type": "object", "properties": {
            "name": {"type": "string"},
            "connector": {"type": "object", "properties": {"state": {"type": "string"},
                                                           "worker_id": {"type": "string"}}},
            "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/TaskState"}},
            "type": {"type": "string"}}},
        "Offsets": {"type": "object", "properties": {"offsets": {"type": "array", "items": {
            "type": "object", "properties": {"partition": OBJ, "offset": {
                "type": "object", "nullable": True}}}}}},
        "Message": {"type": "object", "properties": {"message": {"type": "string"}}},
        "ConfigInfos": {"type": "object", "properties": {
            "name": {"type": "string"}, "error_count": {"type": "integer"},
            "groups": {"type": "array", "items": {"type": "string"}},
            "configs": {"type": "array", "items": OBJ}}},
    }},
}
