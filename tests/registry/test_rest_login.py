"""The schema registry of a server with security on: HTTP Basic with the
server's SASL users (server/auth/http_login.py, as on the HTTP port), no
anonymous access, https with ``http_tls`` as the HTTP port, and the
registry still reaching its own node (with the owner's key pair) to write
and read ``_schemas``, under the ACLs on subjects (test_subject_acls.py has the
denials).

One server for the module: SASL_PLAINTEXT listeners, the authorizer on,
User:admin a super user, alice a user who may write and read subject
``secured-value``, ``http_tls`` with a dev CA's certificate
(kafkalite.tools.dev_certs).
"""
from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from harness import sasl_config, secured_server, stop_server
from kafkalite.tools.dev_certs import make_certs

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
SCHEMA = json.dumps({"type": "record", "name": "Secured", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("registry-certs")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, certs):
    root = tmp_path_factory.mktemp("registry-login")
    tls = root / "tls.toml"
    # the last --config is the one read: the authorizer's settings with the TLS ones
    tls.write_text(f'http_tls = true\nssl_certfile = "{certs["server"]}"\n'
                   f'ssl_keyfile = "{certs["server_key"]}"\n'
                   f'authorizer_enabled = true\nsuper_users = "User:admin"\n')
    srv = secured_server(root, PASSWORDS, ["--config", str(tls)])
    admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
    for f in admin.create_acls([AclBinding(
            ResourceType.TOPIC, "subject:secured-value", ResourcePatternType.LITERAL,
            "User:alice", "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ)]).values():
        f.result(30)
    yield srv
    stop_server(srv)


def call(url, cafile, user=None, password=None, method="GET", body=None):
    request = urllib.request.Request(url, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        context = ssl.create_default_context(cafile=cafile)
        with urllib.request.urlopen(request, timeout=20, context=context) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_anonymous_and_wrong_passwords_are_refused(server, certs):
    url, ca = server.info["schema_registry"], certs["ca"]
    status, headers, body = call(f"{url}/subjects", ca)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    # Confluent's error body, which its clients parse
    assert json.loads(body)["error_code"] == 401 and "application/json" in \
        headers["Content-Type"]
    assert call(f"{url}/subjects", ca, "alice", "wrong")[0] == 401
    assert call(f"{url}/subjects/x/versions", ca, method="POST", body={"schema": SCHEMA})[0] == 401


def test_a_sasl_user_registers_and_reads_through_confluents_client(server, certs):
    url = server.info["schema_registry"]
    assert url.startswith("https://127.0.0.1:")
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret",
                                   "ssl.ca.location": certs["ca"]})
    sid = client.register_schema("secured-value", Schema(SCHEMA, "AVRO"))
    assert client.get_schema(sid).schema_str == SCHEMA.replace(" ", "")
    status, _, body = call(f"{url}/subjects", certs["ca"], "admin", "admin-secret")
    assert status == 200 and "secured-value" in json.loads(body)
    anonymous = SchemaRegistryClient({"url": url, "ssl.ca.location": certs["ca"]})
    with pytest.raises(SchemaRegistryError) as refused:
        anonymous.get_subjects()
    assert refused.value.http_status_code == 401


def test_plain_http_and_an_untrusted_certificate_get_nothing(server):
    url = server.info["schema_registry"]
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{url}/subjects", timeout=10)
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url.replace("https://", "http://") + "/subjects",
                               timeout=10).read()


def test_connects_avro_converter_logs_in_with_user_info_or_the_url(server, certs):
    """Kafka Connect's AvroConverter (kafkalite/connect/registry_converters.py)
    with Confluent's ``basic.auth.credentials.source``: USER_INFO and
    ``basic.auth.user.info``, or the user info in the URL; a wrong password
    is the registry's 401 in the converter's DataException."""
    from kafkalite.connect.converters import converter_from_config
    from kafkalite.connect.data import Field
    from kafkalite.connect.data import Schema as ConnectSchema
    from kafkalite.connect.errors import DataException
    url = server.info["schema_registry"]
    row = ConnectSchema("struct", name="Secured", fields=(Field("a", ConnectSchema.INT32),))

    def converter(**settings):
        config = {"value.converter": "io.confluent.connect.avro.AvroConverter",
                  "value.converter.schema.registry.ssl.ca.location": certs["ca"],
                  **{f"value.converter.{k}": v for k, v in settings.items()}}
        return converter_from_config(config, "value.converter", False, "")

    by_user_info = converter(**{"schema.registry.url": url,
                                "basic.auth.credentials.source": "USER_INFO",
                                "basic.auth.user.info": "alice:alice-secret"})
    data = by_user_info.from_connect_data("secured", row, {"a": 7})
    by_url = converter(**{"schema.registry.url": url.replace("https://",
                                                             "https://alice:alice-secret@")})
    assert by_url.to_connect_data("secured", data) == (row, {"a": 7})
    wrong = converter(**{"schema.registry.url": url, "basic.auth.credentials.source": "USER_INFO",
                         "basic.auth.user.info": "alice:wrong"})
    with pytest.raises(DataException, match="401"):
        wrong.to_connect_data("secured", data)
    with pytest.raises(DataException, match="401"):
        converter(**{"schema.registry.url": url}).from_connect_data("secured", row, {"a": 8})
