"""`kafkalite client-quotas describe|alter` (kafka-configs' --user/--client
shape) against a real server, as a user runs it: set, read back, delete,
validate-only, and one readable line with a non-zero exit for bad input."""
import json

from test_console import _one_line_error, cli


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
