"""Single message transforms and predicates, as Kafka Connect's.

Configured with Kafka's keys: ``transforms=a,b``, ``transforms.a.type=``
(Kafka's class name, e.g. ``org.apache.kafka.connect.transforms.InsertField$Value``,
its short name ``InsertField$Value``, or a Python path), the transform's own
keys under ``transforms.a.``, and ``transforms.a.predicate=p`` /
``transforms.a.negate=true`` with ``predicates=p``, ``predicates.p.type=``...
A transform whose predicate does not hold passes the record on unchanged.

Each transform works on schemaful records (a struct value under a Schema:
the schema is rewritten too) and on schemaless ones (a dict value), as
Kafka's do, and raises DataException for a record it cannot handle (the
worker's error tolerance decides what follows). ``apply`` returns the new
record, or None to drop it (Filter).

Transforms: InsertField, ReplaceField, MaskField, Cast, TimestampConverter,
ValueToKey, ExtractField (each ``$Key``/``$Value`` where Kafka has both),
RegexRouter, TimestampRouter, Filter. Predicates: TopicNameMatches,
HasHeaderKey, RecordIsTombstone.
"""
from __future__ import annotations

import datetime as _dt
import re

from kafkalite.connect import data as cdata
from kafkalite.connect.config import LIST, STRING, ConfigDef, ConfigException, one_of
from kafkalite.connect.data import Field, Schema
from kafkalite.connect.errors import DataException

UTC = _dt.timezone.utc


class Transformation:
    """Kafka's Transformation: configure(props), apply(record), close()."""
    CONFIG = ConfigDef()

    def config_def(self) -> ConfigDef:
        return self.CONFIG

    def configure(self, props: dict) -> None:
        self.config = self.CONFIG.parse(props)

    def apply(self, record):
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Side:
    """Key or value: which half of the record a ``$Key``/``$Value`` transform changes."""
    side = "value"

    def schema_of(self, r):
        return r.key_schema if self.side == "key" else r.value_schema

    def value_of(self, r):
        return r.key if self.side == "key" else r.value

    def with_(self, r, schema, value):
        if self.side == "key":
            return r.new_record(key_schema=schema, key=value)
        return r.new_record(value_schema=schema, value=value)


def _require_map(value, purpose):
    if not isinstance(value, dict):
        raise DataException(f"Only Map objects supported in absence of schema for [{purpose}], "
                            f"found: {type(value).__name__}")
    return value


def _require_struct(schema, value, purpose):
    if schema.type != "struct" or not isinstance(value, dict):
        raise DataException(f"Only Struct objects supported for [{purpose}], found: "
                            f"{schema.type}")
    return value


# ---- InsertField ----------------------------------------------------------------------------

def _field_spec(spec):
    """Kafka's "name!" (required) / "name?" / "name" (optional)."""
    if not spec:
        return None
    if spec.endswith("!"):
        return spec[:-1], False
    return spec.removesuffix("?"), True


class _InsertField(_Side, Transformation):
    CONFIG = (ConfigDef()
              .define("topic.field", STRING, None, doc="field for the record's topic")
              .define("partition.field", STRING, None, doc="field for the record's partition")
              .define("offset.field", STRING, None, doc="field for the offset (sink records)")
              .define("timestamp.field", STRING, None, doc="field for the record's timestamp")
              .define("static.field", STRING, None, doc="field for a static value")
              .define("static.value", STRING, None, doc="the static value"))

    def configure(self, props):
        super().configure(props)
        c = self.config
        self.specs = [(kind, _field_spec(c[f"{kind}.field"])) for kind in
                      ("topic", "partition", "offset", "timestamp", "static")
                      if c[f"{kind}.field"]]

    _SCHEMAS = {"topic": Schema.STRING, "partition": Schema.INT32, "offset": Schema.INT64,
                "timestamp": Schema.TIMESTAMP, "static": Schema.STRING}

    def _value(self, kind, r, schemaful):
        if kind == "topic":
            return r.topic
        if kind == "partition":
            return r.kafka_partition
        if kind == "offset":
            off = getattr(r, "kafka_offset", None)
            if off is None or off < 0:
                raise DataException("offset.field is only for sink records (they have an offset)")
            return off
        if kind == "timestamp":
            if r.timestamp is None:
                return None
            return cdata.millis_to_timestamp(r.timestamp) if schemaful else r.timestamp
        return self.config["static.value"]

    def apply(self, r):
        value, schema = self.value_of(r), self.schema_of(r)
        if value is None:
            return r          # a tombstone passes untouched (Kafka: same)
        if schema is None:
            out = dict(_require_map(value, "field insertion"))
            for kind, (name, _) in self.specs:
                out[name] = self._value(kind, r, False)
            return self.with_(r, None, out)
        _require_struct(schema, value, "field insertion")
        fields = list(schema.fields)
        out = dict(value)
        for kind, (name, optional) in self.specs:
            s = self._SCHEMAS[kind]
            fields.append(Field(name, s.as_optional() if optional else s))
            out[name] = self._value(kind, r, True)
        return self.with_(r, schema.with_fields(fields), out)


class InsertFieldKey(_InsertField):
    side = "key"


class InsertFieldValue(_InsertField):
    side = "value"


# ---- ReplaceField ---------------------------------------------------------------------------

class _ReplaceField(_Side, Transformation):
    CONFIG = (ConfigDef()
              .define("exclude", LIST, [], doc="fields to drop")
              .define("include", LIST, [], doc="fields to keep (all when empty)")
              .define("renames", LIST, [], doc="old:new pairs")
              .define("blacklist", LIST, [], doc="old name of exclude")
              .define("whitelist", LIST, [], doc="old name of include"))

    def configure(self, props):
        super().configure(props)
        c = self.config
        self.exclude = set(c["exclude"] or c["blacklist"])
        self.include = set(c["include"] or c["whitelist"])
        self.renames = {}
        for pair in c["renames"]:
            old, sep, new = pair.partition(":")
            if not sep or not old or not new:
                raise ConfigException("renames", f"Invalid value {c['renames']} for configuration "
                                                 f"renames: Invalid rename mapping: {pair}")
            self.renames[old] = new

    def _keep(self, name):
        return name not in self.exclude and (not self.include or name in self.include)

    def apply(self, r):
        value, schema = self.value_of(r), self.schema_of(r)
        if value is None:
            return r
        if schema is None:
            return self.with_(r, None, {self.renames.get(k, k): v for k, v in
                                        _require_map(value, "field replacement").items()
                                        if self._keep(k)})
        _require_struct(schema, value, "field replacement")
        fields = [Field(self.renames.get(f.name, f.name), f.schema) for f in schema.fields
                  if self._keep(f.name)]
        out = {self.renames.get(f.name, f.name): value.get(f.name) for f in schema.fields
               if self._keep(f.name)}
        return self.with_(r, schema.with_fields(fields), out)


class ReplaceFieldKey(_ReplaceField):
    side = "key"


class ReplaceFieldValue(_ReplaceField):
    side = "value"


# ---- MaskField ------------------------------------------------------------------------------

_NULL_EQUIVALENT = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "float32": 0.0,
                    "float64": 0.0, "boolean": False, "string": "", "bytes": b""}


def _null_equivalent(v):
    for t, z in ((bool, False), (int, 0), (float, 0.0), (str, ""), (bytes, b"")):
        if isinstance(v, t):
            return z
    if isinstance(v, list):
        return []
    if isinstance(v, dict):
        return {}
    if isinstance(v, _dt.datetime):
        return cdata.EPOCH
    raise DataException(f"Cannot mask value of type {type(v).__name__}")


class _MaskField(_Side, Transformation):
    CONFIG = (ConfigDef()
              .define("fields", LIST, doc="fields to mask")
              .define("replacement", STRING, None, doc="the mask (else the type's null equivalent)"))

    def configure(self, props):
        super().configure(props)
        self.fields = set(self.config["fields"])
        if not self.fields:
            raise ConfigException("fields", "Invalid value [] for configuration fields: "
                                            "at least one field to mask")

    def _mask(self, v, type_=None):
        if v is None:
            return None
        rep = self.config["replacement"]
        if rep is None:
            return _NULL_EQUIVALENT.get(type_) if type_ in _NULL_EQUIVALENT and not \
                isinstance(v, _dt.datetime) else _null_equivalent(v)
        try:
            if isinstance(v, bool):
                return rep.lower() == "true"
            if isinstance(v, int):
                return int(rep)
            if isinstance(v, float):
                return float(rep)
            if isinstance(v, str):
                return rep
        except ValueError:
            raise DataException(f"Unable to convert {rep} to {type(v).__name__}") from None
        raise DataException(f"Cannot mask value of type {type(v).__name__} with a replacement")

    def apply(self, r):
        value, schema = self.value_of(r), self.schema_of(r)
        if value is None:
            return r
        if schema is None:
            return self.with_(r, None, {k: self._mask(v) if k in self.fields else v
                                        for k, v in _require_map(value, "mask fields").items()})
        _require_struct(schema, value, "mask fields")
        return self.with_(r, schema, {
            f.name: self._mask(value.get(f.name), f.schema.type) if f.name in self.fields
            else value.get(f.name) for f in schema.fields})


class MaskFieldKey(_MaskField):
    side = "key"


class MaskFieldValue(_MaskField):
    side = "value"


# ---- Cast -----------------------------------------------------------------------------------

_CAST_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")


def _cast(v, t):
    if v is None:
        return None
    try:
        if t in ("int8", "int16", "int32", "int64"):
            if isinstance(v, str):
                n = int(v.strip())
            elif isinstance(v, _dt.datetime):
                n = cdata.timestamp_to_millis(v)
            else:
                n = int(v)
            bits = cdata._INT_RANGES[t]
            # Java's narrowing cast wraps around
            n &= (1 << bits) - 1
            return n - (1 << bits) if n >= 1 << (bits - 1) else n
        if t in ("float32", "float64"):
            return float(v.strip() if isinstance(v, str) else v)
        if t == "boolean":
            if isinstance(v, str):
                return v.strip().lower() == "true"
            return bool(v)
        if isinstance(v, _dt.datetime):
            return v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (bytes, bytearray)):
            import base64
            return base64.b64encode(v).decode()
        return str(v)
    except (ValueError, TypeError) as e:
        raise DataException(f"Cast: cannot cast {v!r} to {t}: {e}") from None


class _Cast(_Side, Transformation):
    CONFIG = ConfigDef().define("spec", LIST, doc="field:type pairs, or one type for the whole "
                                                  "value")

    def configure(self, props):
        super().configure(props)
        self.whole, self.casts = None, {}
        for item in self.config["spec"]:
            name, sep, t = item.rpartition(":")
            t = t.strip().lower()
            if t not in _CAST_TYPES:
                raise ConfigException("spec", f"Invalid value {','.join(self.config['spec'])} for "
                                              f"configuration spec: unknown type {t!r} (one of "
                                              f"{', '.join(_CAST_TYPES)})")
            if not sep:
                self.whole = t
            else:
                self.casts[name] = t
        if not self.config["spec"]:
            raise ConfigException("spec", "Invalid value [] for configuration spec: "
                                          "Must specify at least one field to cast.")

    def apply(self, r):
        value, schema = self.value_of(r), self.schema_of(r)
        if self.whole is not None:
            s = None if schema is None else Schema(self.whole, schema.optional)
            return self.with_(r, s, _cast(value, self.whole))
        if value is None:
            return r
        if schema is None:
            return self.with_(r, None, {k: _cast(v, self.casts[k]) if k in self.casts else v
                                        for k, v in _require_map(value, "cast types").items()})
        _require_struct(schema, value, "cast types")
        fields = [Field(f.name, Schema(self.casts[f.name], f.schema.optional))
                  if f.name in self.casts else f for f in schema.fields]
        return self.with_(r, schema.with_fields(fields), {
            f.name: _cast(value.get(f.name), self.casts[f.name]) if f.name in self.casts
            else value.get(f.name) for f in schema.fields})


class CastKey(_Cast):
    side = "key"


class CastValue(_Cast):
    side = "value"


# ---- TimestampConverter ---------------------------------------------------------------------

_JAVA_FORMAT = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"),
                ("hh", "%I"), ("mm", "%M"), ("ss", "%S"), ("SSS", "\ue000"), ("a", "%p"),
                ("XXX", "%z"), ("Z", "%z"), ("EEE", "%a"), ("MMM", "%b")]


def java_date_format(pattern: str) -> str:
    """A SimpleDateFormat pattern (the subset Connect configs use) as strftime's."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "'":
            j = pattern.find("'", i + 1)
            j = len(pattern) if j < 0 else j
            out.append(pattern[i + 1:j].replace("%", "%%") or "'")
            i = j + 1
            continue
        for tok, rep in sorted(_JAVA_FORMAT, key=lambda p: -len(p[0])):
            if pattern.startswith(tok, i):
                out.append(rep)
                i += len(tok)
                break
        else:
            out.append("%%" if pattern[i] == "%" else pattern[i])
            i += 1
    return "".join(out)


def format_timestamp(t: _dt.datetime, fmt: str) -> str:
    s = t.astimezone(UTC).strftime(fmt)
    return s.replace("\ue000", f"{t.microsecond // 1000:03d}")


def parse_timestamp(s: str, fmt: str) -> _dt.datetime:
    try:
        t = _dt.datetime.strptime(s, fmt.replace("\ue000", "%f"))
    except ValueError as e:
        raise DataException(f"Could not parse timestamp: value ({s}) does not match pattern: "
                            f"{e}") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


_UNIX_SCALE = {"seconds": 1_000, "milliseconds": 1, "microseconds": 1 / 1_000,
               "nanoseconds": 1 / 1_000_000}
_TARGETS = {"string": Schema.OPTIONAL_STRING, "unix": Schema.OPTIONAL_INT64,
            "Date": Schema.OPTIONAL_DATE, "Time": Schema.OPTIONAL_TIME,
            "Timestamp": Schema.OPTIONAL_TIMESTAMP}


class _TimestampConverter(_Side, Transformation):
    CONFIG = (ConfigDef()
              .define("field", STRING, "", doc="the field (empty: the whole key or value)")
              .define("target.type", STRING, validator=one_of(*_TARGETS, case_insensitive=False),
                      doc="string, unix, Date, Time or Timestamp")
              .define("format", STRING, "", doc="SimpleDateFormat pattern for strings")
              .define("unix.precision", STRING, "milliseconds",
                      validator=one_of(*_UNIX_SCALE, case_insensitive=False)))

    def configure(self, props):
        super().configure(props)
        c = self.config
        self.fmt = java_date_format(c["format"]) if c["format"] else None
        if c["target.type"] == "string" and not self.fmt:
            raise ConfigException("format", "Invalid value  for configuration format: "
                                            "TimestampConverter requires format option to be "
                                            "specified when using string timestamps")
        self.scale = _UNIX_SCALE[c["unix.precision"]]

    def _to_datetime(self, v, schema):
        if isinstance(v, _dt.datetime):
            return v if v.tzinfo else v.replace(tzinfo=UTC)
        if isinstance(v, _dt.date):
            return _dt.datetime(v.year, v.month, v.day, tzinfo=UTC)
        if isinstance(v, _dt.time):
            return _dt.datetime.combine(cdata.EPOCH.date(), v, UTC)
        if isinstance(v, str):
            if not self.fmt:
                raise DataException("TimestampConverter: a string timestamp needs format")
            return parse_timestamp(v, self.fmt)
        if isinstance(v, int) and not isinstance(v, bool):
            return cdata.millis_to_timestamp(round(v * self.scale))
        raise DataException(f"TimestampConverter: cannot convert {type(v).__name__}")

    def _convert(self, v, schema):
        if v is None:
            return None
        t = self._to_datetime(v, schema)
        target = self.config["target.type"]
        if target == "string":
            return format_timestamp(t, self.fmt)
        if target == "unix":
            return int(cdata.timestamp_to_millis(t) / self.scale)
        if target == "Date":
            return t.date()
        if target == "Time":
            return t.timetz().replace(tzinfo=None)
        return t

    def apply(self, r):
        value, schema = self.value_of(r), self.schema_of(r)
        target_schema = _TARGETS[self.config["target.type"]]
        name = self.config["field"]
        if not name:
            return self.with_(r, None if schema is None else target_schema,
                              self._convert(value, schema))
        if value is None:
            return r
        if schema is None:
            out = dict(_require_map(value, "converting timestamp formats"))
            out[name] = self._convert(out.get(name), None)
            return self.with_(r, None, out)
        _require_struct(schema, value, "converting timestamp formats")
        fields = [Field(f.name, target_schema if f.schema.optional else
                        Schema(target_schema.type, False, target_schema.name,
                               target_schema.version)) if f.name == name else f
                  for f in schema.fields]
        out = dict(value)
        out[name] = self._convert(value.get(name), schema.field(name))
        return self.with_(r, schema.with_fields(fields), out)


class TimestampConverterKey(_TimestampConverter):
    side = "key"


class TimestampConverterValue(_TimestampConverter):
    side = "value"


# ---- ValueToKey, ExtractField ---------------------------------------------------------------

class ValueToKey(Transformation):
    CONFIG = ConfigDef().define("fields", LIST, doc="value fields that make the key")

    def apply(self, r):
        names = self.config["fields"]
        if r.value is None:
            return r.new_record(key_schema=None, key=None)
        if r.value_schema is None:
            v = _require_map(r.value, "copying fields from value to key")
            return r.new_record(key_schema=None, key={n: v.get(n) for n in names})
        _require_struct(r.value_schema, r.value, "copying fields from value to key")
        fields = []
        for n in names:
            f = r.value_schema.field(n)
            if f is None:
                raise DataException(f"Field does not exist: {n}")
            fields.append(f)
        return r.new_record(key_schema=Schema("struct", fields=tuple(fields)),
                            key={n: r.value.get(n) for n in names})


class _ExtractField(_Side, Transformation):
    CONFIG = ConfigDef().define("field", STRING, doc="the field to extract")

    def apply(self, r):
        value, schema, name = self.value_of(r), self.schema_of(r), self.config["field"]
        if value is None:
            return self.with_(r, None, None)
        if schema is None:
            return self.with_(r, None, _require_map(value, "field extraction").get(name))
        _require_struct(schema, value, "field extraction")
        f = schema.field(name)
        if f is None:
            raise DataException(f"Unknown field: {name}")
        return self.with_(r, f.schema, value.get(name))


class ExtractFieldKey(_ExtractField):
    side = "key"


class ExtractFieldValue(_ExtractField):
    side = "value"


# ---- routers, Filter ------------------------------------------------------------------------

def _regex(config: dict, key: str):
    try:
        return re.compile(config[key])
    except re.error as e:
        raise ConfigException(key, f"Invalid value {config[key]} for configuration {key}: "
                                   f"{e}") from None


def java_replacement(rep: str) -> str:
    """Java's "$1" group references as Python's "\\g<1>"."""
    return re.sub(r"\$(\d+)", r"\\g<\1>", rep.replace("\\", "\\\\"))


class RegexRouter(Transformation):
    CONFIG = (ConfigDef().define("regex", STRING, doc="matched against the whole topic name")
              .define("replacement", STRING, doc="the new topic name ($1... for groups)"))

    def configure(self, props):
        super().configure(props)
        self.regex = _regex(self.config, "regex")
        self.replacement = java_replacement(self.config["replacement"])
        self._routes: dict = {}      # topic -> new topic: a task sees few topics

    def apply(self, r):
        new = self._routes.get(r.topic)
        if new is None:
            m = self.regex.fullmatch(r.topic)
            new = r.topic if m is None else m.expand(self.replacement)
            if len(self._routes) < 10_000:
                self._routes[r.topic] = new
        return r if new == r.topic else r.new_record(topic=new)


class TimestampRouter(Transformation):
    CONFIG = (ConfigDef().define("topic.format", STRING, "${topic}-${timestamp}")
              .define("timestamp.format", STRING, "yyyyMMdd"))

    def configure(self, props):
        super().configure(props)
        self.fmt = java_date_format(self.config["timestamp.format"])

    def apply(self, r):
        if r.timestamp is None:
            raise DataException(f"Timestamp missing on record: {r.topic}")
        stamp = format_timestamp(cdata.millis_to_timestamp(r.timestamp), self.fmt)
        return r.new_record(topic=self.config["topic.format"].replace("${topic}", r.topic)
                            .replace("${timestamp}", stamp))


class Filter(Transformation):
    """Drops every record (with a predicate: those it matches)."""

    def apply(self, r):
        return None


class Predicate:
    CONFIG = ConfigDef()

    def configure(self, props):
        self.config = self.CONFIG.parse(props)

    def test(self, r) -> bool:
        raise NotImplementedError


class TopicNameMatches(Predicate):
    CONFIG = ConfigDef().define("pattern", STRING, doc="a regex matched against the whole topic")

    def configure(self, props):
        super().configure(props)
        self.regex = _regex(self.config, "pattern")

    def test(self, r):
        return self.regex.fullmatch(r.topic) is not None


class HasHeaderKey(Predicate):
    CONFIG = ConfigDef().define("name", STRING, doc="the header name")

    def test(self, r):
        return any(k == self.config["name"] for k, _ in r.headers or ())


class RecordIsTombstone(Predicate):
    def test(self, r):
        return r.value is None


_T = "org.apache.kafka.connect.transforms."
TRANSFORMS = {
    _T + "InsertField$Key": InsertFieldKey, _T + "InsertField$Value": InsertFieldValue,
    _T + "ReplaceField$Key": ReplaceFieldKey, _T + "ReplaceField$Value": ReplaceFieldValue,
    _T + "MaskField$Key": MaskFieldKey, _T + "MaskField$Value": MaskFieldValue,
    _T + "Cast$Key": CastKey, _T + "Cast$Value": CastValue,
    _T + "TimestampConverter$Key": TimestampConverterKey,
    _T + "TimestampConverter$Value": TimestampConverterValue,
    _T + "ValueToKey": ValueToKey,
    _T + "ExtractField$Key": ExtractFieldKey, _T + "ExtractField$Value": ExtractFieldValue,
    _T + "RegexRouter": RegexRouter, _T + "TimestampRouter": TimestampRouter,
    _T + "Filter": Filter,
}
PREDICATES = {
    _T + "predicates.TopicNameMatches": TopicNameMatches,
    _T + "predicates.HasHeaderKey": HasHeaderKey,
    _T + "predicates.RecordIsTombstone": RecordIsTombstone,
}


class TransformationChain:
    """The transforms of one connector config, in order, with their predicates."""

    def __init__(self, config: dict):
        from kafkalite.connect.plugins import load_class
        self.stages = []
        aliases = _list(config.get("transforms", ""))
        for alias in aliases:
            prefix = f"transforms.{alias}."
            type_key = prefix + "type"
            if type_key not in config:
                raise ConfigException(type_key, f"Missing required configuration \"{type_key}\" "
                                                f"which has no default value.")
            t = load_class(config[type_key], TRANSFORMS, Transformation)()
            sub = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)
                   and k[len(prefix):] not in ("type", "predicate", "negate")}
            try:
                t.configure(sub)
            except ConfigException as e:
                raise ConfigException(prefix + e.name, str(e).replace(
                    f"configuration {e.name}", f"configuration {prefix + e.name}")) from None
            pred = None
            pname = config.get(prefix + "predicate")
            if pname:
                ptype = f"predicates.{pname}.type"
                if pname not in _list(config.get("predicates", "")) or ptype not in config:
                    raise ConfigException(prefix + "predicate",
                                          f"Invalid value {pname} for configuration "
                                          f"{prefix}predicate: no predicate {pname} in predicates")
                pred = load_class(config[ptype], PREDICATES, Predicate)()
                pp = f"predicates.{pname}."
                pred.configure({k[len(pp):]: v for k, v in config.items()
                                if k.startswith(pp) and k != ptype})
            negate = str(config.get(prefix + "negate", "false")).lower() == "true"
            self.stages.append((alias, t, pred, negate))

    def apply(self, record):
        for _, t, pred, negate in self.stages:
            if pred is not None and pred.test(record) == negate:
                continue
            record = t.apply(record)
            if record is None:
                return None
        return record

    def close(self):
        for _, t, _, _ in self.stages:
            t.close()


def _list(v) -> list[str]:
    if isinstance(v, list):
        return v
    return [p.strip() for p in str(v).split(",") if p.strip()]
