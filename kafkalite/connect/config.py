"""ConfigDef: a connector's (or transform's) configuration keys, as Kafka's.

``define`` declares a key with a type (STRING, INT, LONG, DOUBLE, BOOLEAN,
LIST, PASSWORD, CLASS), a default (NO_DEFAULT: required), an optional
validator and its documentation; ``parse`` turns string properties into
typed values or raises ConfigException naming the key, with Kafka's
messages (``Missing required configuration "file" which has no default
value.``, ``Invalid value x for configuration y: ...``); ``validate``
answers every key at once (the REST validate endpoint's ``configs``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

NO_DEFAULT = object()
STRING, INT, LONG, DOUBLE, BOOLEAN, LIST, PASSWORD, CLASS = (
    "STRING", "INT", "LONG", "DOUBLE", "BOOLEAN", "LIST", "PASSWORD", "CLASS")
HIGH, MEDIUM, LOW = "HIGH", "MEDIUM", "LOW"


class ConfigException(ValueError):
    """A bad configuration value; ``name`` is the key."""

    def __init__(self, name: str, message: str, value=None):
        super().__init__(message)
        self.name, self.value = name, value


@dataclass
class ConfigKey:
    name: str
    type: str
    default: object
    validator: object = None       # callable(name, value) raising ConfigException, or a list of choices
    importance: str = MEDIUM
    doc: str = ""
    group: str | None = None
    display_name: str | None = None
    dependents: list = field(default_factory=list)

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT


def one_of(*choices, case_insensitive=True):
    """A validator: the value is one of ``choices`` (Kafka's ValidString)."""
    def check(name, value):
        ok = (str(value).lower() in [c.lower() for c in choices]) if case_insensitive \
            else value in choices
        if not ok:
            raise ConfigException(name, f"Invalid value {value} for configuration {name}: "
                                        f"String must be one of: {', '.join(choices)}", value)
    check.choices = list(choices)
    return check


def at_least(lo):
    def check(name, value):
        if value is not None and value < lo:
            raise ConfigException(name, f"Invalid value {value} for configuration {name}: "
                                        f"Value must be at least {lo}", value)
    return check


def _coerce(key: ConfigKey, value):
    if value is None:
        return None
    t, name = key.type, key.name

    def bad(why):
        return ConfigException(name, f"Invalid value {value} for configuration {name}: {why}",
                               value)
    if t in (STRING, PASSWORD, CLASS):
        return value if isinstance(value, str) else str(value)
    if t in (INT, LONG):
        if isinstance(value, bool):
            raise bad("Expected value to be a 32-bit integer" if t == INT else
                      "Expected value to be a 64-bit integer")
        try:
            v = int(str(value).strip())
        except ValueError:
            raise bad("Not a number of type " + t) from None
        if t == INT and not -(1 << 31) <= v < (1 << 31):
            raise bad("Not a number of type INT")
        return v
    if t == DOUBLE:
        try:
            return float(value)
        except ValueError:
            raise bad("Not a number of type DOUBLE") from None
    if t == BOOLEAN:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s not in ("true", "false"):
            raise bad("Expected value to be either true or false")
        return s == "true"
    if t == LIST:
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
        s = str(value).strip()
        return [p.strip() for p in s.split(",") if p.strip()] if s else []
    raise bad(f"unknown type {t}")


class ConfigDef:
    def __init__(self):
        self.keys: dict[str, ConfigKey] = {}

    def define(self, name, type_, default=NO_DEFAULT, validator=None, importance=MEDIUM,
               doc="", group=None, display_name=None) -> "ConfigDef":
        if isinstance(validator, (list, tuple)):
            validator = one_of(*validator)
        self.keys[name] = ConfigKey(name, type_, default, validator, importance, doc, group,
                                    display_name)
        return self

    def merge(self, other: "ConfigDef") -> "ConfigDef":
        out = ConfigDef()
        out.keys = {**self.keys, **other.keys}
        return out

    def _parse_one(self, key: ConfigKey, props: dict):
        if key.name in props:
            value = _coerce(key, props[key.name])
        elif key.required:
            raise ConfigException(key.name, f"Missing required configuration \"{key.name}\" "
                                            f"which has no default value.")
        else:
            value = _coerce(key, key.default)
        if key.validator is not None and value is not None:
            key.validator(key.name, value)
        return value

    def parse(self, props: dict) -> dict:
        """Typed values of every defined key (raising the first bad key's
        ConfigException); keys this def does not know pass through as given."""
        out = {k: v for k, v in props.items() if k not in self.keys}
        for key in self.keys.values():
            out[key.name] = self._parse_one(key, props)
        return out

    def validate(self, props: dict) -> list[dict]:
        """One ConfigValue per defined key: {name, value, recommended_values,
        errors, visible}, as the REST validate endpoint shows them."""
        out = []
        for key in self.keys.values():
            errs = []
            try:
                self._parse_one(key, props)
            except ConfigException as e:
                errs.append(str(e))
            raw = props.get(key.name, None if key.default is NO_DEFAULT else key.default)
            out.append({"name": key.name,
                        "value": None if raw is None else
                        ("[hidden]" if key.type == PASSWORD else
                         ",".join(raw) if isinstance(raw, list) else str(raw)),
                        "recommended_values": list(getattr(key.validator, "choices", [])),
                        "errors": errs, "visible": True})
        return out

    def definition(self, name: str) -> dict:
        """A key's definition as the REST validate endpoint shows it."""
        k = self.keys[name]
        return {"name": k.name, "type": k.type, "required": k.required,
                "default_value": None if k.required or k.default is None else
                (",".join(k.default) if isinstance(k.default, list) else str(k.default)),
                "importance": k.importance, "documentation": k.doc, "group": k.group,
                "width": "NONE", "display_name": k.display_name or k.name, "dependents": [],
                "order": list(self.keys).index(name)}
