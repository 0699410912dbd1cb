"""Topic name rules, metadata persistence, and server config loading."""
import pytest

from kafkalite.errors import (InvalidConfigurationError, InvalidPartitionsError, InvalidTopicError,
                              TopicAlreadyExistsError)
from kafkalite.server.config import ServerConfig
from kafkalite.server.metadata import MetadataStore, validate_topic_name


@pytest.mark.parametrize("name,why", [
    ("", "non-empty"), (".", "cannot be"), ("..", "cannot be"), ("a" * 250, "249"),
    ("has space", "' '"), ("ümlaut", "only ASCII"), ("slash/x", "'/'"), (None, "string")])
def test_bad_topic_names(name, why):
    with pytest.raises(InvalidTopicError, match=why):
        validate_topic_name(name)


def test_good_topic_names():
    for name in ("a", "a" * 249, "Orders_v2.eu-west-1", "...", "__internal"):
        assert validate_topic_name(name) == name


def test_metadata_survives_a_reload_and_epochs_only_grow(tmp_path):
    store = MetadataStore(str(tmp_path))
    topic = store.create_topic("orders", 4, {"retention.ms": "1000"}, workers=2)
    assert {p.worker for p in topic.partitions} == {0, 1}
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("orders", 1, {}, 2)
    with pytest.raises(InvalidPartitionsError):
        store.add_partitions("orders", 3, 2)
    assert store.add_partitions("orders", 6, 2) == [4, 5]
    started = store.start_leadership(0)
    again = MetadataStore(str(tmp_path))
    assert again.cluster_id == store.cluster_id
    t = again.get("orders")
    assert len(t.partitions) == 6 and t.configs == {"retention.ms": "1000"}
    assert all(again.get(name).partitions[p].leader_epoch == e for name, p, e in started)
    assert again.rebalance(1) > 0 and all(p.worker == 0 for p in again.get("orders").partitions)


def test_server_config_from_toml_and_flags(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('workers = 3\nport = 9999\n[topic_defaults]\n"retention.ms" = 1000\n')
    cfg = ServerConfig.load(str(path), port=1234, workers=None)
    assert (cfg.workers, cfg.port) == (3, 1234)
    assert cfg.log_config().retention_ms == 1000
    assert cfg.log_config({"retention.ms": "5"}).retention_ms == 5
    path.write_text("wrokers = 3\n")
    with pytest.raises(InvalidConfigurationError, match="wrokers"):
        ServerConfig.load(str(path))
    path.write_text("port = [\n")
    with pytest.raises(InvalidConfigurationError, match="k.toml"):
        ServerConfig.load(str(path))
    with pytest.raises(InvalidConfigurationError, match="port"):
        ServerConfig(port=70000)
    with pytest.raises(InvalidConfigurationError, match="segment.bytes"):
        ServerConfig(topic_defaults={"segment.bytes": "x"})
