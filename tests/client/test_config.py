"""Client configs: Kafka's property names, and clear errors for anything else."""
import pytest

from kafkalite.client import AdminClient, Consumer, Producer


def test_unknown_property_is_named():
    with pytest.raises(ValueError, match="linger.msec"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "linger.msec": 5})


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="acks"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "acks": 2})
    with pytest.raises(ValueError, match="batch.size"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "batch.size": "big"})
    with pytest.raises(ValueError, match="auto.offset.reset"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "auto.offset.reset": "sometime"})
    with pytest.raises(ValueError, match="compression"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "compression.type": "brotli"})
    with pytest.raises(ValueError, match="idempotence.*acks must be all"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "acks": 1})
    with pytest.raises(ValueError, match="transactional.id.*max.in.flight"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t",
                  "max.in.flight.requests.per.connection": 6})
    with pytest.raises(ValueError, match="transactional.id requires enable.idempotence"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t",
                  "enable.idempotence": False})


def test_idempotence_is_the_default_and_gives_way_to_explicit_acks():
    p = Producer({"bootstrap.servers": "127.0.0.1:1"})
    assert p._idempotent
    p.close(0)
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "acks": 1})
    assert not p._idempotent
    p.close(0)


def test_bootstrap_servers_is_required_and_checked():
    with pytest.raises(ValueError, match="bootstrap.servers"):
        AdminClient({})
    with pytest.raises(ValueError, match="host:port"):
        AdminClient({"bootstrap.servers": "nohostport"})


def test_a_server_that_is_down_gives_an_error_not_a_hang():
    from kafkalite.errors import NetworkError
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:1", "request.timeout.ms": 300})
    with pytest.raises(NetworkError, match="is the server running"):
        admin.list_topics(timeout=0.3)
    admin.close()


def test_librdkafka_aliases_and_subscribe_needs_a_group():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.ms": 7,
                  "request.required.acks": "all"})
    assert p.config["linger.ms"] == 7 and p.config["acks"] == -1
    p.close(0)
    from kafkalite.errors import InvalidGroupIdError
    c = Consumer({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(InvalidGroupIdError, match="group.id"):
        c.subscribe(["t"])
    c.close()


def test_curve_keys_that_cannot_be_used_are_named(tmp_path):
    missing = str(tmp_path / "nowhere.key")
    with pytest.raises(ValueError, match="nowhere.key"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "curve.server.key": missing})
    with pytest.raises(ValueError, match="curve.server.key is required"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "curve.secret.key": "0" * 40})
    with pytest.raises(ValueError, match="curve.public.key needs curve.secret.key"):
        AdminClient({"bootstrap.servers": "127.0.0.1:1", "curve.server.key": "0" * 40,
                     "curve.public.key": "0" * 40})
    with pytest.raises(ValueError, match="not a Z85 key"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "curve.server.key": '"' * 40})
