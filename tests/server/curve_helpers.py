"""CURVE set-ups shared by the server tests: key pairs made by `kafkalite
curve keygen`, a server with CURVE and the authorizer on, and a native
client's key settings."""
from __future__ import annotations

from harness import ServerProcess, run_cli

# a SASL user of the same name as the super user's key: /metrics, with
# security on, asks for a login (server/auth/http_login.py)
ADMIN_PASSWORD = "admin-metrics-pw"


def keygen(directory, name: str) -> None:
    r = run_cli("curve", "keygen", name, "--dir", str(directory))
    assert r.returncode == 0, r.stderr
    assert f"User:{name}" in r.stdout.decode()


def start_curve_server(keys, **kwargs) -> ServerProcess:
    """A server whose key pair is ``keys/server.key*`` and whose clients are
    ``keys/authorized``, with the authorizer on and User:admin a super user."""
    config = keys / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n')
    r = run_cli("users", "add", "admin", "--password", ADMIN_PASSWORD,
                "--data-dir", str(keys / "data"))
    assert r.returncode == 0, r.stderr
    return ServerProcess(str(keys / "data"), extra_args=[
        "--config", str(config),
        "--native-curve-secret-key-file", str(keys / "server.key_secret"),
        "--native-curve-authorized-keys", str(keys / "authorized")], **kwargs).start()


def client_keys(keys, user: str, server: str | None = None) -> dict:
    """A native client's CURVE settings for ``user`` (``mallory``: a key the
    server does not know)."""
    folder = keys / ("strangers" if user == "mallory" else "authorized")
    return {"curve.server.key": str(server or keys / "server.key"),
            "curve.public.key": str(folder / f"{user}.key"),
            "curve.secret.key": str(folder / f"{user}.key_secret")}
