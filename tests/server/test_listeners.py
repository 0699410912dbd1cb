"""kafkalite.server.listeners: the node's Kafka listeners from its settings
(flags, TOML with our names or Kafka's), each listener's own TLS and SASL
settings (security.listener_settings), and the refusals of bad ones."""
from __future__ import annotations

import os

import pytest

from kafkalite.errors import InvalidConfigurationError
from kafkalite.server.config import ServerConfig
from kafkalite.server.listeners import ListenerSpec, kafka_listeners
from kafkalite.server.auth.security import listener_settings


def test_no_listeners_setting_is_one_listener_named_after_the_protocol():
    cfg = ServerConfig(kafka_port=9999, kafka_worker_base_port=9200, host="10.0.0.1")
    assert kafka_listeners(cfg) == [ListenerSpec("PLAINTEXT", "PLAINTEXT", "10.0.0.1", 9999,
                                                 9200, None)]


def test_named_listeners_protocols_hosts_and_worker_ports():
    cfg = ServerConfig(listeners="internal://:9092,EXT://[::1]:9093,SASL_PLAINTEXT://0.0.0.0:0",
                       listener_security_protocol_map="INTERNAL:PLAINTEXT,ext:sasl_plaintext",
                       advertised_listeners="EXT://kafka.example.com:19093",
                       kafka_worker_base_port=9300)
    assert kafka_listeners(cfg) == [
        # names are upper case, as Kafka has them; an empty host binds `host`
        ListenerSpec("INTERNAL", "PLAINTEXT", "127.0.0.1", 9092, 9300, None),
        # only the first listener's workers take kafka_worker_base_port
        ListenerSpec("EXT", "SASL_PLAINTEXT", "::1", 9093, 0, "kafka.example.com"),
        # a listener named after a protocol speaks it without a map entry
        ListenerSpec("SASL_PLAINTEXT", "SASL_PLAINTEXT", "0.0.0.0", 0, 0, None)]


def test_kafka_names_in_a_toml_file(tmp_path):
    path = tmp_path / "server.toml"
    path.write_text('listeners = "PLAINTEXT://127.0.0.1:0,EXT://127.0.0.1:0"\n'
                    '"listener.security.protocol.map" = "EXT:SASL_PLAINTEXT"\n'
                    'advertised.listeners = "EXT://localhost:0"\n')
    specs = kafka_listeners(ServerConfig.load(str(path)))
    assert [(s.name, s.protocol, s.advertised_host) for s in specs] == [
        ("PLAINTEXT", "PLAINTEXT", None), ("EXT", "SASL_PLAINTEXT", "localhost")]


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "X://:1"}, "listener X has no security protocol"),
    ({"listeners": "PLAINTEXT://:1,plaintext://:2"}, "names listener PLAINTEXT more than once"),
    ({"listeners": "PLAINTEXT://:70000"}, "is not 0-65535"),
    ({"listeners": "PLAIN TEXT://:1"}, "is not NAME://host:port"),
    ({"listeners": "PLAINTEXT://:1,SASL_PLAINTEXT://:1"}, "share a port"),
    ({"listeners": "PLAINTEXT://:1", "listener_security_protocol_map": "PLAINTEXT"},
     "is not NAME:PROTOCOL"),
    ({"listeners": "A://:1", "listener_security_protocol_map": "A:SSL,A:PLAINTEXT"},
     "maps listener A more than once"),
    ({"advertised_listeners": "PLAINTEXT://h:1"}, "need listeners"),
    ({"listeners": "A://:1", "listener_security_protocol_map": "A:SASL_SSL"},
     "listener A (SASL_SSL) needs ssl_certfile"),
    ({"listeners": "A://:1", "listener_security_protocol_map": "A:SASL_PLAINTEXT",
      "sasl_enabled_mechanisms": ""}, "sasl_enabled_mechanisms must name"),
    ({"listeners": 5}, "listeners must be a string"),
])
def test_bad_settings_are_refused_with_the_reason(settings, message):
    with pytest.raises(InvalidConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ServerConfig(**settings)


def test_per_listener_settings_from_kafka_prefixes_and_a_toml_table(tmp_path):
    path = tmp_path / "server.toml"
    path.write_text(
        'listeners = "OPEN://127.0.0.1:0,MTLS://127.0.0.1:0,SCRAM://127.0.0.1:0"\n'
        '"listener.security.protocol.map" = "OPEN:SSL,MTLS:SSL,SCRAM:SASL_PLAINTEXT"\n'
        'ssl_certfile = "server.pem"\n'
        '"listener.name.mtls.ssl.client.auth" = "required"\n'    # Kafka's name for it
        'listener.name.mtls.ssl_cafile = "ca.pem"\n'            # ours, unquoted dotted key
        '[listener_overrides.scram]\n'
        'sasl_enabled_mechanisms = "SCRAM-SHA-512"\n')
    cfg = ServerConfig.load(str(path))
    assert cfg.listener_overrides == {
        "MTLS": {"ssl_client_auth": "required", "ssl_cafile": os.path.abspath("ca.pem")},
        "SCRAM": {"sasl_enabled_mechanisms": "SCRAM-SHA-512"}}
    assert listener_settings(cfg, "MTLS")["ssl_client_auth"] == "required"
    assert listener_settings(cfg, "OPEN")["ssl_client_auth"] == "none"
    assert listener_settings(cfg, "OPEN")["ssl_certfile"] == os.path.abspath("server.pem")
    assert listener_settings(cfg, "SCRAM")["sasl_enabled_mechanisms"] == "SCRAM-SHA-512"


@pytest.mark.parametrize("toml, message", [
    ('"listener.name.nope.ssl.client.auth" = "required"',
     "names listener NOPE, which is not one of this server's listeners (A, B)"),
    ('"listener.name.a.num.partitions" = "3"', "a listener may set only ssl_certfile"),
    ('"listener.name.a.ssl.client.auth" = "always"',
     "listener_overrides.A.ssl_client_auth must be one of none, requested, required"),
    ('"listener.name.a.ssl.client.auth" = "required"',
     "listener_overrides.A.ssl_client_auth requested/required needs ssl_cafile"),
    ('"listener.name.b.sasl.enabled.mechanisms" = "GSSAPI"',
     "listener_overrides.B.sasl_enabled_mechanisms must name some of"),
    ('"listener.name.a.ssl.client.auth" = "none"\n'
     '[listener_overrides.a]\nssl_client_auth = "none"', "a second time"),
])
def test_bad_per_listener_settings_are_refused_naming_the_key(tmp_path, toml, message):
    path = tmp_path / "server.toml"
    path.write_text('listeners = "A://127.0.0.1:0,B://127.0.0.1:0"\n'
                    '"listener.security.protocol.map" = "A:PLAINTEXT,B:SASL_PLAINTEXT"\n'
                    + toml + "\n")
    with pytest.raises(InvalidConfigurationError, match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        ServerConfig.load(str(path))
