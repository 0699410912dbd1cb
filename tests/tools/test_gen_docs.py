"""The generated references (docs/configuration.md, docs/cli.md) match the
code, and the Kafka names they document really load: through the config
loader, through `kafkalite server --config` in a real server, and as one
readable error for a key that is neither ours nor Kafka's."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
from harness import ServerProcess

from kafkalite.errors import InvalidConfigurationError
from kafkalite.server.config import SETTINGS, ServerConfig
from kafkalite.tools import gen_docs


def test_checked_in_references_match_the_code():
    out_of_date = gen_docs.stale()
    assert not out_of_date, (
        f"{', '.join(map(str, out_of_date))} differ from what the code generates: "
        f"run `{gen_docs.REGENERATE}` and commit the result")


def test_every_server_setting_is_documented_once():
    fields = [f.name for f in dataclasses.fields(ServerConfig)]
    assert list(SETTINGS) == fields, "SETTINGS must list ServerConfig's fields, in order"
    assert all(s.doc for s in SETTINGS.values())


def test_references_name_every_key_and_command():
    from kafkalite.cli import build_parser
    from kafkalite.storage.config import LogConfig
    config_md, cli_md = gen_docs.configuration_md(), gen_docs.cli_md()
    for name in SETTINGS:
        assert f"| `{name}` |" in config_md
    for key in LogConfig.keys():
        assert f"| `{key}` |" in config_md
    assert "`num.partitions`" in config_md and "`log.retention.hours`" in config_md
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:
        assert f"## `kafkalite {command}`" in cli_md
    # every option of every command is in that command's section
    parts = re.split(r"\n#{2,4} `([^`]+)`\n", cli_md)
    sections = {"kafkalite": parts[0], **dict(zip(parts[1::2], parts[2::2]))}
    for parser, _, _ in gen_docs._commands(build_parser()):
        section = sections[parser.prog]
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section or f", {option}" in section, \
                        (parser.prog, option)


@pytest.mark.processes
def test_check_mode_names_the_stale_file_and_the_command(tmp_path):
    (tmp_path / "docs").mkdir()
    assert gen_docs.main(["--root", str(tmp_path)]) == 0
    assert gen_docs.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "docs" / "cli.md").write_text("old\n")
    r = subprocess.run([sys.executable, "-m", "kafkalite.tools.gen_docs", "--root",
                        str(tmp_path), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == ("docs/cli.md is out of date; run "
                                "`python -m kafkalite.tools.gen_docs`")


def test_kafka_server_properties_names_load(tmp_path):
    path = tmp_path / "server.toml"
    path.write_text(
        '"num.partitions" = 3\n'                 # quoted, as copied
        'auto.create.topics.enable = "false"\n'  # dotted, a properties string
        'broker.id = 7\n'
        'sasl.enabled.mechanisms = ["PLAIN", "SCRAM-SHA-256"]\n'
        'log.retention.hours = 168\n'
        'log.retention.minutes = 90\n'           # finer than hours: wins, as in Kafka
        'log.segment.bytes = 1048576\n'
        '"log.cleanup.policy" = "compact,delete"\n'
        '[topic_defaults]\n'
        'max.compaction.lag.ms = 60000\n')
    cfg = ServerConfig.load(str(path))
    assert (cfg.default_partitions, cfg.auto_create_topics, cfg.node_id) == (3, False, 7)
    assert cfg.sasl_enabled_mechanisms == "PLAIN,SCRAM-SHA-256"
    log = cfg.log_config()
    assert (log.retention_ms, log.segment_bytes) == (90 * 60_000, 1 << 20)
    assert (log.compact, log.delete, log.max_compaction_lag_ms) == (True, True, 60_000)
    path.write_text("log.retention.hours = -1\n")
    assert ServerConfig.load(str(path)).log_config().retention_ms == -1


@pytest.mark.parametrize("text, message", [
    ("num.partition = 3\n", "unknown setting 'num.partition' (did you mean 'num.partitions'?)"),
    ('"num.io.threads" = 8\n', "unknown setting 'num.io.threads'"),
    ("[log]\nretention = 5\n", "unknown setting 'log.retention'"),
    ("node.id = 2\nnode_id = 3\n", "node.id and node_id both set node_id"),
    ('log.retention.ms = 5\n[topic_defaults]\n"retention.ms" = 6\n',
     "both set topic config retention.ms"),
    ('"log.dirs" = "/a,/b"\n', "log.dirs lists several directories"),
    ('"num.partitions" = "three"\n', "num.partitions must be an integer, not 'three'"),
    ("log.retention.hours = 1.5\n", "log.retention.hours must be an integer"),
    ("[topic_defaults]\nretention.hours = 5\n", "unknown topic config 'retention.hours'"),
    ('"log.cleanup.policy" = "shred"\n', "invalid value 'shred' for cleanup.policy"),
    ("topic_defaults = 5\n", "topic_defaults must be a table of topic configs, not 5"),
])
def test_bad_keys_fail_naming_the_key(tmp_path, text, message):
    path = tmp_path / "server.toml"
    path.write_text(text)
    with pytest.raises(InvalidConfigurationError, match="config file .*server.toml: ") as info:
        ServerConfig.load(str(path))
    assert message in str(info.value)


@pytest.mark.processes
def test_a_server_started_with_kafka_names_has_their_values(tmp_path):
    from kafkalite.client import AdminClient, ConfigResource, NewTopic
    from kafkalite.client.connection import parse_bootstrap
    from kafkalite.client.metadata import Metadata
    from kafkalite.errors import UnknownTopicOrPartitionError
    conf = tmp_path / "server.toml"
    conf.write_text('"num.partitions" = 3\nlog.retention.hours = 2\n'
                    'auto.create.topics.enable = false\n')
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(conf)]).start()
    admin = AdminClient(srv.config())
    try:
        for f in admin.create_topics([NewTopic("orders")]).values():   # the server's count
            f.result()
        assert len(admin.list_topics("orders").topics["orders"].partitions) == 3
        res = ConfigResource("topic", "orders")
        entry = admin.describe_configs([res])[res].result()["retention.ms"]
        assert entry.value == str(2 * 3_600_000)
        assert not entry.is_default               # from the server's config, not Kafka's default
        # a client asking for an unknown topic, allowing auto-creation, does not create it
        meta = Metadata(parse_bootstrap(srv.bootstrap), "test")
        try:
            answer = meta.refresh(["nosuch"], auto_create=True)
        finally:
            meta.close()
        assert [t["error_code"] for t in answer["topics"]] == [
            UnknownTopicOrPartitionError.code]
        assert "nosuch" not in admin.list_topics().topics
    finally:
        admin.close()
        assert srv.stop() == 0
        srv.kill()


@pytest.mark.processes
def test_server_with_an_unknown_key_exits_with_one_line_naming_it(tmp_path):
    conf = tmp_path / "server.toml"
    conf.write_text('"num.partitions" = 2\n"log.retention.hourz" = 5\n')
    r = subprocess.run([sys.executable, "-m", "kafkalite", "server", "--config", str(conf),
                        "--data-dir", str(tmp_path / "data")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "unknown setting 'log.retention.hourz' (did you mean 'log.retention.hours'?)" \
        in lines[0]
