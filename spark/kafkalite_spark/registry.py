"""The source's ``value.format``: a value in Confluent's wire format (magic
byte 0, the 4-byte schema id, the Avro binary) decoded into a struct column
through a schema registry (kafkalite's, or any with Confluent's API).

Options (beside the source's): ``value.format`` = ``avro``;
``schema.registry.url``; ``schema.registry.subject`` (default
``<topic>-value``, Confluent's TopicNameStrategy, for a query that
subscribes to one topic); ``schema.registry.basic.auth.user.info``
(``user:password``). The column's type is the subject's latest schema's,
read when the query is planned (driver); each record is read with its own
writer's schema (by its id, cached) resolved to that one by Avro's rules
(confluent-kafka's AvroDeserializer, executor-side), so the records of
older compatible versions fill the same column. A null value stays null;
a value not in the wire format, or of a schema id the registry does not
know, fails the query with the offset named.

Avro -> Spark: record struct, a union with null a nullable field, int
int, long bigint, float float, double double, boolean boolean, string and
enum string, bytes and fixed binary, array array, map map<string, ...>,
date date, timestamp-millis/micros timestamp, decimal decimal (precision
at most 38), time-millis/micros string (HH:MM:SS.ffffff: Spark has no time
type). Other unions are refused when the query is planned.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DateType,
                               DecimalType, DoubleType, FloatType, IntegerType, LongType,
                               MapType, StringType, StructField, StructType, TimestampType)

FORMATS = ("avro",)


class RegistryOptionError(ValueError):
    pass


@dataclass(frozen=True)
class ValueFormat:
    """Plain data (Spark pickles it to the executors)."""
    format: str
    url: str
    subject: str
    user_info: str | None = None

    def client(self):
        from confluent_kafka.schema_registry import SchemaRegistryClient
        conf = {"url": self.url}
        if self.user_info:
            conf["basic.auth.user.info"] = self.user_info
        return SchemaRegistryClient(conf)


def parse(opts: dict, topics: tuple) -> ValueFormat | None:
    """``opts``: the source's options, lower-cased names -> (name, value)."""
    if "value.format" not in opts:
        return None
    name, fmt = opts["value.format"]
    fmt = fmt.strip().lower()
    if fmt not in FORMATS:
        raise RegistryOptionError(f"option {name}: expected one of {', '.join(FORMATS)}, got "
                                  f"{fmt!r} (protobuf and json-schema are not read yet)")
    if "schema.registry.url" not in opts:
        raise RegistryOptionError(f"option {name}={fmt} needs schema.registry.url")
    if "schema.registry.subject" in opts:
        subject = opts["schema.registry.subject"][1]
    elif len(topics) == 1:
        subject = f"{topics[0]}-value"
    else:
        raise RegistryOptionError(f"option {name}={fmt} of a query that does not subscribe to "
                                  f"one topic needs schema.registry.subject")
    user = opts.get("schema.registry.basic.auth.user.info", (None, None))[1]
    return ValueFormat(fmt, opts["schema.registry.url"][1].split(",")[0].strip(), subject, user)


def value_type(vf: ValueFormat) -> DataType:
    """The value column's Spark type: the subject's latest schema's (driver)."""
    try:
        latest = vf.client().get_latest_version(vf.subject)
    except Exception as exc:    # noqa: BLE001 -- no such subject, no registry
        raise RegistryOptionError(f"value.format={vf.format}: the latest schema of subject "
                                  f"{vf.subject} at {vf.url}: {exc}") from None
    return _spark_type(json.loads(latest.schema.schema_str), {}, None)[0]


def _spark_type(avro, named: dict, namespace) -> tuple[DataType, bool]:
    """(Spark type, nullable) of an Avro schema (JSON form)."""
    simple = {"boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
              "float": FloatType(), "double": DoubleType(), "string": StringType(),
              "bytes": BinaryType()}
    if isinstance(avro, str):
        if avro in simple:
            return simple[avro], False
        full = avro if "." in avro or not namespace else f"{namespace}.{avro}"
        hit = named.get(full, named.get(avro))
        if hit is None:
            raise RegistryOptionError(f"the Avro schema names an unknown type {avro!r}")
        return hit, False
    if isinstance(avro, list):
        rest = [b for b in avro if b != "null"]
        if len(rest) == 1:
            return _spark_type(rest[0], named, namespace)[0], len(rest) < len(avro)
        raise RegistryOptionError(f"Avro unions other than [null, T] have no Spark column type: "
                                  f"{avro!r}")
    t, logical = avro["type"], avro.get("logicalType")
    if logical == "decimal" and t in ("bytes", "fixed"):
        return DecimalType(min(int(avro.get("precision", 38)), 38), int(avro.get("scale", 0))), \
            False
    if logical == "date" and t == "int":
        return DateType(), False
    if logical in ("timestamp-millis", "timestamp-micros") and t == "long":
        return TimestampType(), False
    if logical in ("time-millis", "time-micros"):
        return StringType(), False
    if t in ("record", "enum", "fixed"):
        ns = avro.get("namespace", namespace)
        full = avro["name"] if "." in avro["name"] or not ns else f"{ns}.{avro['name']}"
        if t == "enum":
            named[full] = StringType()
        elif t == "fixed":
            named[full] = BinaryType()
        else:
            inner = full.rpartition(".")[0] or None
            named[full] = StructType([StructField(f["name"], *_spark_type(f["type"], named, inner))
                                      for f in avro["fields"]])
        return named[full], False
    if t == "array":
        item, nullable = _spark_type(avro["items"], named, namespace)
        return ArrayType(item, nullable), False
    if t == "map":
        item, nullable = _spark_type(avro["values"], named, namespace)
        return MapType(StringType(), item, nullable), False
    return _spark_type(t, named, namespace)


def arrow_type(spark_type: DataType) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type
    return to_arrow_type(spark_type, timezone="UTC")


class Decoder:
    """The value column of a batch, decoded (executor side; made per
    partition read, its registry client caching schemas by id)."""

    def __init__(self, vf: ValueFormat, spark_type: DataType):
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from confluent_kafka.serialization import MessageField, SerializationContext
        client = vf.client()
        reader = client.get_latest_version(vf.subject).schema.schema_str
        self._deserialize = AvroDeserializer(client, reader, conf={
            "subject.name.strategy": lambda ctx, record_name: None})
        self._ctx = SerializationContext(vf.subject, MessageField.VALUE)
        self._times = _time_paths(spark_type)
        self.arrow_type = arrow_type(spark_type)

    def column(self, raw: pa.Array, offsets: pa.Array, where: str) -> pa.Array:
        out = []
        for v, off in zip(raw.to_pylist(), offsets.to_pylist()):
            if v is None:
                out.append(None)
                continue
            if len(v) < 5 or v[0] != 0:
                raise ValueError(f"{where} offset {off}: the value is not in Confluent's wire "
                                 f"format (magic byte 0, a schema id): {v[:5]!r}")
            try:
                out.append(_times_as_text(self._deserialize(v, self._ctx), self._times))
            except Exception as exc:    # noqa: BLE001 -- an unknown id, bytes of another schema
                raise ValueError(f"{where} offset {off}: schema id "
                                 f"{int.from_bytes(v[1:5], 'big')}: {exc}") from None
        return pa.array(out, self.arrow_type)


def _time_paths(spark_type) -> bool:
    return "string" in spark_type.simpleString()


def _times_as_text(v, any_strings: bool):
    """A decoded value with its datetime.time values as text (the string
    column Spark has for them)."""
    import datetime
    if not any_strings:
        return v
    if isinstance(v, dict):
        return {k: _times_as_text(x, True) for k, x in v.items()}
    if isinstance(v, list):
        return [_times_as_text(x, True) for x in v]
    if isinstance(v, datetime.time):
        return v.isoformat()
    return v
