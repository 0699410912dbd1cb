"""A connector config's validation (Kafka's AbstractHerder
validateConnectorConfig and ConfigInfos): the framework's common and sink
definitions, the connector's own ``config_def`` and ``validate``, the
transformation chain, topics or topics.regex, the converters; BadConfig
names each bad key.

``ConfigValidation`` is a part of herder.py's ``Herder`` (which inherits
it): the process, threads and lock are the herder's.
"""
from __future__ import annotations

import json

from kafkalite.connect import plugins
from kafkalite.connect.config import CLASS, INT, LIST, STRING, ConfigDef, ConfigException, at_least
from kafkalite.connect.connector_context import ConnectorContext
from kafkalite.connect.errors import BadRequestException, ConnectException
from kafkalite.connect.tolerance import CONFIG as ERRORS_CONFIG
from kafkalite.connect.transforms import TransformationChain

COMMON = (ConfigDef()
          .define("name", STRING, doc="the connector's unique name", group="Common")
          .define("connector.class", CLASS, doc="Kafka's class name or a Python path",
                  group="Common")
          .define("tasks.max", INT, 1, at_least(1), group="Common")
          .define("key.converter", CLASS, None, group="Common")
          .define("value.converter", CLASS, None, group="Common")
          .define("header.converter", CLASS, None, group="Common")
          .define("transforms", LIST, [], group="Transforms")
          .define("predicates", LIST, [], group="Predicates"))
SINK = (ConfigDef().define("topics", LIST, [], group="Common")
        .define("topics.regex", STRING, "", group="Common"))


class BadConfig(BadRequestException):
    """A connector config with errors; ``errors`` is {key: [messages]}."""

    def __init__(self, errors: dict, plugin: str | None = None):
        n = sum(len(v) for v in errors.values())
        lines = "\n".join(m for v in errors.values() for m in v)
        super().__init__(
            f"Connector configuration is invalid and contains the following {n} error(s):\n"
            f"{lines}\nYou can also find the above list of errors at the endpoint "
            f"`/connector-plugins/{{connectorType}}/config/validate`")
        self.errors = errors


class ConfigValidation:
    """Validation of connector configs, the Herder's part (this module's docstring)."""

    def validate(self, config: dict) -> dict:
        """Kafka's ConfigInfos: {name, error_count, groups, configs: [{definition, value}]}."""
        config = {k: str(v) if not isinstance(v, str) else v for k, v in config.items()}
        cls_name = config.get("connector.class")
        if not cls_name:
            raise BadRequestException("Connector config "
                                      f"{json.dumps(config)} contains no connector type")
        try:
            cls = plugins.connector_class(cls_name)
        except ConnectException as e:
            raise BadRequestException(str(e)) from None
        inst = cls()
        # a connector's validate may ask its context (which files this worker lets it name)
        inst.initialize(ConnectorContext(self, config.get("name")))
        defs = COMMON.merge(ERRORS_CONFIG)
        if getattr(cls, "TYPE", None) == "sink":
            defs = defs.merge(SINK)
        values = defs.validate(config)
        own = inst.config_def()
        try:
            values += inst.validate(config)
        except Exception as e:  # noqa: BLE001 -- a plugin's validate failing is a config error
            values.append({"name": "connector.class", "value": cls_name, "errors": [str(e)],
                           "recommended_values": [], "visible": True})
        by_name = {v["name"]: v for v in values}
        self._framework_checks(cls, config, by_name)
        configs = []
        for v in by_name.values():
            d = (own if v["name"] in own.keys else defs).definition(v["name"]) \
                if v["name"] in own.keys or v["name"] in defs.keys else \
                {"name": v["name"], "type": "STRING", "required": False, "default_value": None,
                 "importance": "MEDIUM", "documentation": "", "group": None, "width": "NONE",
                 "display_name": v["name"], "dependents": [], "order": -1}
            configs.append({"definition": d, "value": v})
        groups = []
        for c in configs:
            g = c["definition"]["group"]
            if g and g not in groups:
                groups.append(g)
        return {"name": cls.__name__ if cls_name not in plugins.CONNECTORS else cls_name,
                "error_count": sum(len(c["value"]["errors"]) for c in configs),
                "groups": groups, "configs": configs}

    @staticmethod
    def _framework_checks(cls, config, by_name):
        def add(name, msg):
            v = by_name.setdefault(name, {"name": name, "value": config.get(name), "errors": [],
                                          "recommended_values": [], "visible": True})
            v["errors"].append(msg)
        try:
            TransformationChain(config)
        except ConfigException as e:
            add(e.name, str(e))
        except ConnectException as e:
            add("transforms", str(e))
        if getattr(cls, "TYPE", None) == "sink":
            has_topics = bool(config.get("topics", "").strip())
            has_regex = bool(config.get("topics.regex", "").strip())
            if has_topics == has_regex:
                add("topics", "Must configure one and only one of topics or topics.regex")
            dlq = config.get("errors.deadletterqueue.topic.name", "").strip()
            if dlq and dlq in [t.strip() for t in config.get("topics", "").split(",")]:
                add("errors.deadletterqueue.topic.name",
                    f"The DLQ topic '{dlq}' may not be included in the list of topics "
                    f"('topics=...') consumed by the connector")
        from kafkalite.connect.converters import CONVERTERS, Converter
        for key in ("key.converter", "value.converter"):
            if config.get(key):
                try:
                    plugins.load_class(config[key], CONVERTERS, Converter)
                except ConnectException as e:
                    add(key, f"Invalid value {config[key]} for configuration {key}: {e}")

    def _checked(self, name: str, config: dict) -> dict:
        """The config with string values and its name, validated (BadConfig)."""
        config = {k: str(v) if not isinstance(v, str) else v for k, v in config.items()}
        config.setdefault("name", name)
        if config["name"] != name:
            raise BadRequestException("Connector name configuration (" + config["name"] +
                                      ") doesn't match connector name in the URL (" + name + ")")
        self._check(name, config)
        return config

    def _check(self, name: str, config: dict) -> None:
        info = self.validate(config)
        errors = {c["value"]["name"]: c["value"]["errors"] for c in info["configs"]
                  if c["value"]["errors"]}
        if errors:
            raise BadConfig(errors)
