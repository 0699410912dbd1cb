"""SASL users: the credentials file the Kafka listeners authenticate against.

``kafkalite users add|list|delete`` (cli/users.py) writes the file; every broker
process (the supervisor and each worker) reads it through one
``CredentialStore``, which re-reads it when its modification time changes,
so a user added while the server runs can log in at once.

No clear password is ever stored. File format (JSON, mode 0600, replaced
atomically)::

    {"version": 1,
     "users": {
       "alice": {
         "SCRAM-SHA-256": {"salt": b64, "stored_key": b64, "server_key": b64,
                           "iterations": 4096},        # RFC 5802 section 3
         "SCRAM-SHA-512": {...same fields...},
         "PLAIN": {"salt": b64, "pbkdf2_sha512": b64, "iterations": 4096}}}}

``update_users(path, change)`` is the one way to change the file: under an
exclusive lock on ``<file>.lock``, it reads, applies ``change`` and writes,
so the CLI and the supervisor (AlterUserScramCredentials, scram_control.py)
never lose each other's edits.

In a cluster (``--cluster``) the users are the ``kafkalite_users`` row of
the cluster's PostgreSQL, and each node's file is a mirror of it
(cluster_store.UsersMirror), written by ``write_mirror`` under the same
lock, with one more key saying whose copy it is::

    "mirror": {"cluster_id": "...", "version": 7}   # the row's version

A mirror is never replaced by an older version of the same cluster's
users; ``mirrored_cluster`` tells the CLI not to edit it (the node would
overwrite the edit). The listeners read a mirror like any users file.

SCRAM entries are what Kafka keeps for a SCRAM user (its
``UserScramCredentialsRecord``): the salted StoredKey and ServerKey, from
which a password cannot be recovered. PLAIN (RFC 4616) sends the password
itself, so the server keeps a PBKDF2-HMAC-SHA-512 hash of it with a per-user
salt and compares in constant time. Its work factor is SCRAM's (4096
iterations by default): a stolen file is no easier to attack through one
entry than the other, and a login costs the broker's event loop ~5 ms, not
the ~80 ms of scrypt's interactive setting, which wrong passwords sent in a
loop could turn into a stall of every client of that process.

Who may call: any process; a ``CredentialStore`` belongs to one thread.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os

from kafkalite.errors import InvalidConfigurationError

USERS_FILE = "sasl-users.json"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = ("PLAIN",) + SCRAM_MECHANISMS
SCRAM_DEFAULT_ITERATIONS = 4096          # Kafka's kafka-configs default
SCRAM_MIN_ITERATIONS = 4096              # RFC 7677's minimum for SHA-256
SCRAM_MAX_ITERATIONS = 16384             # Kafka's ScramMechanism.maxIterations
# Kafka's ScramMechanism type, the int8 ``mechanism`` of the SCRAM APIs.
SCRAM_MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_TYPE_OF = {name: t for t, name in SCRAM_MECHANISM_TYPES.items()}
_SCRAM_HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
SALT_BYTES = 16
# The user name of the server's own CURVE key (protocol/curve.py's
# BROKER_PRINCIPAL, not imported here: that module loads zmq's ZAP): a super
# user under an authorizer, and the only principal that may produce on behalf
# of others. No SASL user may have it: adding one is refused, and a users
# file that has one anyway (written by hand or by an older kafkalite) does
# not log it in.
RESERVED_USER = "kafkalite-broker"


# the names of principals that are not SASL users: a local door's Unix user is
# ``User:unix:<name>`` (protocol/curve.py's LOCAL_PRINCIPAL_PREFIX, not imported here:
# the package's codecs would load with it, before a server's workers are spawned), so a
# SASL user ``unix:root`` would be the local root to the authorizer
_RESERVED_PREFIX = "unix:"
LOCAL_PRINCIPAL_PREFIX = "User:" + _RESERVED_PREFIX


def reserved(name: str) -> str | None:
    """Why no SASL user may be named ``name`` (None: it may): the server's
    own principal, and the local doors' Unix users."""
    if name == RESERVED_USER:
        return f"the user name {RESERVED_USER!r} is reserved for the server's own key"
    if name.startswith(_RESERVED_PREFIX):
        return (f"user names starting {_RESERVED_PREFIX!r} are reserved for the local Unix "
                f"users of the native ports' local doors (principal {LOCAL_PRINCIPAL_PREFIX}"
                f"<name>)")
    return None


def check_user_name(name: str) -> None:
    """Raise InvalidConfigurationError for a name no SASL user may have."""
    if not name:
        raise InvalidConfigurationError("a SASL user needs a name")
    why = reserved(name)
    if why:
        raise InvalidConfigurationError(why)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def users_file(data_dir: str, configured: str = "") -> str:
    """The credentials file a server with ``data_dir`` uses (``configured`` wins)."""
    return configured or os.path.join(data_dir, USERS_FILE)


def make_credential(mechanism: str, password: str,
                    iterations: int = SCRAM_DEFAULT_ITERATIONS) -> dict:
    """The stored form of ``password`` for ``mechanism`` (never the password)."""
    if iterations < SCRAM_MIN_ITERATIONS:
        raise InvalidConfigurationError(
            f"iterations must be at least {SCRAM_MIN_ITERATIONS}, not {iterations}")
    if mechanism in SCRAM_MECHANISMS:
        import scramp
        salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations)
        return {"salt": _b64(salt), "stored_key": _b64(stored_key),
                "server_key": _b64(server_key), "iterations": count}
    if mechanism == "PLAIN":
        salt = os.urandom(SALT_BYTES)
        digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
        return {"salt": _b64(salt), "pbkdf2_sha512": _b64(digest), "iterations": iterations}
    raise InvalidConfigurationError(
        f"unknown SASL mechanism {mechanism!r}; known: {', '.join(MECHANISMS)}")


def scram_credential(mechanism: str, salt: bytes, salted_password: bytes,
                     iterations: int) -> dict:
    """The stored form of a SCRAM credential from what AlterUserScramCredentials
    carries: RFC 5802's ClientKey = HMAC(SaltedPassword, "Client Key"),
    StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    digest = _SCRAM_HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return {"salt": _b64(salt), "stored_key": _b64(digest(client_key).digest()),
            "server_key": _b64(server_key), "iterations": iterations}


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, i): what a client sends in an upsertion."""
    name = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)


def read_users(path: str) -> dict:
    """{user: {mechanism: credential}} from ``path``; {} when it does not exist."""
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidConfigurationError(f"SASL users file {path}: {exc}") from None
    users = doc.get("users") if isinstance(doc, dict) else None
    if not isinstance(users, dict):
        raise InvalidConfigurationError(f"SASL users file {path} has no \"users\" object")
    return users


def write_users(path: str, users: dict) -> None:
    from kafkalite.storage.checkpoint import write_atomically
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomically(path, json.dumps({"version": 1, "users": users}, indent=1,
                                      sort_keys=True).encode(), mode=0o600)


@contextlib.contextmanager
def _locked(path: str):
    """The file's lock (``<file>.lock``), held for the block."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # 0600 as the file it guards (an open with mode "a" made it 0644, issue 67): who may
    # take the lock may stall every login's write of the file
    fd = os.open(path + ".lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)        # one an earlier version made 0644
    with open(fd, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)


def update_users(path: str, change) -> object:
    """Read the users, ``change(users)`` them in place, write them back
    (unless ``change`` raised), all under the file's lock; ``change``'s
    result is returned."""
    with _locked(path):
        users = read_users(path)
        before = json.dumps(users, sort_keys=True)
        result = change(users)
        if json.dumps(users, sort_keys=True) != before:
            write_users(path, users)
        return result


def _read_document(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def mirrored_cluster(path: str) -> str | None:
    """The cluster id if ``path`` is a cluster node's mirror of the users
    in PostgreSQL (``write_mirror``), else None."""
    mirror = _read_document(path).get("mirror")
    return mirror.get("cluster_id") if isinstance(mirror, dict) else None


def write_mirror(path: str, users: dict, cluster_id: str, version: int) -> dict | None:
    """Make ``path`` version ``version`` of cluster ``cluster_id``'s users
    (cluster_store.UsersMirror), under the file's lock, unless it already
    is that version or a newer one; returns the users it replaced, or None
    if it wrote nothing."""
    with _locked(path):
        doc = _read_document(path)
        mirror = doc.get("mirror")
        if isinstance(mirror, dict) and mirror.get("cluster_id") == cluster_id \
                and isinstance(mirror.get("version"), int) and mirror["version"] >= version:
            return None
        from kafkalite.storage.checkpoint import write_atomically
        write_atomically(path, json.dumps(
            {"version": 1, "mirror": {"cluster_id": cluster_id, "version": version},
             "users": users}, indent=1, sort_keys=True).encode(), mode=0o600)
        replaced = doc.get("users")
        return replaced if isinstance(replaced, dict) else {}


class CredentialStore:
    """The users file as the listener sees it, re-read when it changes."""

    def __init__(self, path: str):
        self.path = path
        self._stamp = None
        self._users: dict = {}

    def _current(self) -> dict:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            try:
                self._users = read_users(self.path) if stamp else {}
            except InvalidConfigurationError:
                return self._users      # a broken edit keeps the last good users
            self._stamp = stamp
        return self._users

    def scram(self, mechanism: str, user: str):
        """(salt, stored_key, server_key, iterations) of ``user``, or None."""
        # a reserved name never logs in, even where a store made before the rule has it
        cred = self._current().get(user, {}).get(mechanism) if not reserved(user) else None
        if not cred:
            return None
        return (_unb64(cred["salt"]), _unb64(cred["stored_key"]), _unb64(cred["server_key"]),
                int(cred["iterations"]))

    def verify_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s under any mechanism the file
        holds for them: the PLAIN hash, or a SCRAM credential's StoredKey
        recomputed from it (HTTP logins, http_login.py, take the same users
        as the Kafka listeners)."""
        if self.verify_plain(user, password):
            return True
        for mechanism in SCRAM_MECHANISMS:
            cred = self.scram(mechanism, user)
            if cred is None:
                continue
            salt, stored_key, _, iterations = cred
            mine = scram_credential(mechanism, salt,
                                    salted_password(mechanism, password, salt, iterations),
                                    iterations)
            if hmac.compare_digest(_unb64(mine["stored_key"]), stored_key):
                return True
        return False

    def verify_plain(self, user: str, password: str) -> bool:
        cred = self._current().get(user, {}).get("PLAIN") if not reserved(user) else None
        if not cred:
            return False
        digest = hashlib.pbkdf2_hmac("sha512", password.encode(), _unb64(cred["salt"]),
                                     int(cred["iterations"]))
        return hmac.compare_digest(digest, _unb64(cred["pbkdf2_sha512"]))
