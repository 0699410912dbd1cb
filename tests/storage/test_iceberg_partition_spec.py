"""iceberg.partition.spec (Redpanda's redpanda.iceberg.partition.spec):
the text Redpanda takes, refused with a reason where Iceberg or the
table's columns would refuse it, and pyiceberg's PartitionSpec of it."""
import pytest

from kafkalite.errors import InvalidConfigurationError
from kafkalite.storage import LogConfig
from kafkalite.storage.iceberg.partition_spec import (DEFAULT_PARTITION_SPEC,
                                                      parse_partition_spec, partition_spec)


def test_redpandas_default_is_the_spec_tables_always_had():
    pytest.importorskip("pyiceberg")
    [field] = partition_spec(DEFAULT_PARTITION_SPEC).fields
    assert (field.source_id, field.field_id, field.name, str(field.transform)) == (
        5, 1000, "redpanda_timestamp_hour", "hour")
    assert LogConfig().iceberg_partition_spec == DEFAULT_PARTITION_SPEC


def test_every_transform_on_the_columns_it_takes():
    pytest.importorskip("pyiceberg")
    spec = partition_spec("( day(redpanda.timestamp), bucket(16, redpanda.key), "
                          "redpanda.partition, truncate(4, value), void(redpanda.offset) )")
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("redpanda_timestamp_day", "day"), ("redpanda_key_bucket", "bucket[16]"),
        ("redpanda_partition", "identity"), ("value_trunc", "truncate[4]"),
        ("redpanda_offset_null", "void")]
    assert partition_spec("()").fields == ()


@pytest.mark.parametrize("text,why", [
    ("hour(redpanda.timestamp)", "parentheses"),
    ("(minute(redpanda.timestamp))", "unknown transform"),
    ("(hour(redpanda.key))", "not a timestamp"),
    ("(bucket(redpanda.key))", "positive width"),
    ("(bucket(0, redpanda.key))", "positive width"),
    ("(day(3, redpanda.timestamp))", "no width"),
    ("(page)", "no column 'page'"),
    ("(redpanda.key, identity(redpanda.key))", "twice"),
    ("(hour(redpanda.timestamp)", "not a column"),
])
def test_a_spec_iceberg_would_refuse_is_refused_with_the_reason(text, why):
    with pytest.raises(ValueError, match=why):
        parse_partition_spec(text)
    with pytest.raises(InvalidConfigurationError, match=why):
        LogConfig.from_properties({"redpanda.iceberg.partition.spec": text})


def test_a_decoded_table_is_partitioned_by_its_redpanda_columns_only():
    with pytest.raises(InvalidConfigurationError, match="no column 'value'"):
        LogConfig.from_properties({"iceberg.mode": "value_schema_id_prefix",
                                   "iceberg.partition.spec": "(value)"})
    LogConfig.from_properties({"iceberg.mode": "value_schema_id_prefix",
                               "iceberg.partition.spec": "(redpanda.partition)"})
