"""``kafkalite schemas`` (kafkalite/cli/schemas.py) against the shared
server's schema registry: register, list, versions, get, check, config,
delete, each printing one readable answer, and an error being one line
with the registry's message and a non-zero exit.
"""
from __future__ import annotations

import json

from harness import run_cli

V1 = json.dumps({"type": "record", "name": "Cli", "fields": [{"name": "a", "type": "int"}]})
V2 = json.dumps({"type": "record", "name": "Cli", "fields": [
    {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "x"}]})
BAD = json.dumps({"type": "record", "name": "Cli", "fields": [{"name": "a", "type": "string"}]})


def schemas(server, *args):
    return run_cli("schemas", *args, "--url", server.info["schema_registry"])


def test_register_list_get_check_config_delete(server, topic_name, tmp_path):
    subject = f"{topic_name}-value"
    first = schemas(server, "register", subject, "--schema", V1)
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().startswith("registered id ")
    assert first.stdout.decode().rstrip().endswith(f"as version 1 of {subject}")
    avsc = tmp_path / "v2.avsc"
    avsc.write_text(V2)
    assert schemas(server, "check", subject, "--schema-file", avsc).returncode == 0
    assert schemas(server, "register", subject, "--schema-file", avsc).returncode == 0
    assert subject in schemas(server, "list").stdout.decode().split()
    assert schemas(server, "versions", subject).stdout.decode().split() == ["1", "2"]
    got = schemas(server, "get", subject, "--version", "1").stdout.decode()
    assert got.startswith(f"# subject {subject}, version 1, id ") and '"int"' in got
    refused = schemas(server, "check", subject, "--schema", BAD)
    assert refused.returncode == 1 and "TYPE_MISMATCH" in refused.stdout.decode()
    assert schemas(server, "config", subject, "--set", "NONE").stdout.decode() == \
        f"{subject}: NONE\n"
    assert schemas(server, "check", subject, "--schema", BAD).returncode == 0
    deleted = schemas(server, "delete", subject)
    assert deleted.stdout.decode() == f"deleted (soft) {subject}: version(s) 1, 2\n"
    assert subject not in schemas(server, "list").stdout.decode().split()
    assert schemas(server, "delete", subject, "--permanent").returncode == 0


def test_errors_are_one_line_and_exit_non_zero(server, topic_name):
    missing = schemas(server, "versions", f"{topic_name}-none")
    assert missing.returncode == 1
    assert missing.stderr.decode() == (f"kafkalite schemas versions: Subject "
                                       f"'{topic_name}-none' not found. (error 40401)\n")
    invalid = schemas(server, "register", f"{topic_name}-x", "--schema", '{"type": "nope"}')
    assert invalid.returncode == 1 and "(error 42201)" in invalid.stderr.decode()
    assert invalid.stderr.decode().count("\n") == 1
    down = run_cli("schemas", "list", "--url", "http://127.0.0.1:1")
    assert down.returncode == 1
    assert "cannot reach the schema registry at http://127.0.0.1:1" in down.stderr.decode()
    neither = schemas(server, "register", f"{topic_name}-x")
    assert neither.returncode == 1 and "--schema or --schema-file" in neither.stderr.decode()
