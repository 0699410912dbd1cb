"""`kafkalite client-quotas describe|alter` (kafka-configs' --user/--client
shape) against a real server, as a user runs it: set, read back, delete,
validate-only, and one readable line with a non-zero exit for bad input."""
import json

from test_cli import _one_line_error, cli


def test_alter_describe_delete_and_errors(server):
    bs = ["--bootstrap-server", server.bootstrap]
    out = cli("client-quotas", "alter", "--user", "alice", "--client-defaults", "--add-config",
              "producer_byte_rate=1048576,consumer_byte_rate=2097152", *bs)
    assert out.returncode == 0, out.stderr
    assert b"user-principal 'alice', the default client-id" in out.stdout
    assert cli("client-quotas", "alter", "--client", "etl", "--add-config",
               "request_percentage=25", *bs).returncode == 0
    out = cli("client-quotas", "describe", "--user", "alice", "--client-defaults", *bs)
    assert out.stdout.decode().strip() == (
        "Quota configs for user-principal 'alice', the default client-id are "
        "consumer_byte_rate=2.09715e+06, producer_byte_rate=1.04858e+06")
    rows = [json.loads(line) for line in cli("client-quotas", "describe", "--output", "json",
                                              *bs).stdout.splitlines()]
    assert {"entity": {"client-id": "etl"}, "quotas": {"request_percentage": 25.0}} in rows
    # validate-only changes nothing; delete-config removes
    assert cli("client-quotas", "alter", "--client", "etl", "--add-config",
               "request_percentage=50", "--validate-only", *bs).returncode == 0
    assert cli("client-quotas", "alter", "--user", "alice", "--client-defaults",
               "--delete-config", "consumer_byte_rate", *bs).returncode == 0
    rows = [json.loads(line) for line in cli("client-quotas", "describe", "--output", "json",
                                              *bs).stdout.splitlines()]
    assert {"entity": {"client-id": "etl"}, "quotas": {"request_percentage": 25.0}} in rows
    assert {"entity": {"client-id": None, "user": "alice"},
            "quotas": {"producer_byte_rate": 1048576.0}} in rows
    # bad input: the server's INVALID_REQUEST, and the CLI's own checks
    assert "no_such_quota" in _one_line_error(cli(
        "client-quotas", "alter", "--user", "bob", "--add-config", "no_such_quota=5", *bs))
    assert "positive" in _one_line_error(cli(
        "client-quotas", "alter", "--user", "bob", "--add-config", "producer_byte_rate=-1", *bs))
    assert "number" in _one_line_error(cli(
        "client-quotas", "alter", "--user", "bob", "--add-config", "producer_byte_rate=lots", *bs))
    assert "--user" in _one_line_error(cli(
        "client-quotas", "alter", "--add-config", "producer_byte_rate=5", *bs))


def test_ip_quotas_alter_describe_delete_and_errors(server):
    """--ip / --ip-defaults (kafka-configs' --ip): connection_creation_rate
    set, read back, deleted; an IP with a user, a bad address and a byte
    rate on an IP are one readable line each."""
    bs = ["--bootstrap-server", server.bootstrap]
    out = cli("client-quotas", "alter", "--ip", "192.0.2.9", "--add-config",
              "connection_creation_rate=40", *bs)
    assert out.returncode == 0, out.stderr
    assert b"ip '192.0.2.9'" in out.stdout
    assert cli("client-quotas", "alter", "--ip-defaults", "--add-config",
               "connection_creation_rate=100", *bs).returncode == 0
    out = cli("client-quotas", "describe", "--ip", "192.0.2.9", *bs)
    assert out.stdout.decode().strip() == (
        "Quota configs for ip '192.0.2.9' are connection_creation_rate=40")
    rows = [json.loads(line) for line in cli("client-quotas", "describe", "--ip-defaults",
                                              "--output", "json", *bs).stdout.splitlines()]
    assert rows == [{"entity": {"ip": None}, "quotas": {"connection_creation_rate": 100.0}}]
    for args in (["--ip", "192.0.2.9"], ["--ip-defaults"]):
        assert cli("client-quotas", "alter", *args, "--delete-config",
                   "connection_creation_rate", *bs).returncode == 0
    rows = [json.loads(line) for line in cli("client-quotas", "describe", "--output", "json",
                                              *bs).stdout.splitlines()]
    assert not any("ip" in r["entity"] for r in rows)
    assert "--ip" in _one_line_error(cli(
        "client-quotas", "alter", "--ip", "192.0.2.9", "--user", "bob", "--add-config",
        "connection_creation_rate=5", *bs))
    assert "not a valid IP address" in _one_line_error(cli(
        "client-quotas", "alter", "--ip", "host.example", "--add-config",
        "connection_creation_rate=5", *bs))
    assert "connection_creation_rate" in _one_line_error(cli(
        "client-quotas", "alter", "--ip", "192.0.2.9", "--add-config",
        "producer_byte_rate=5", *bs))
