"""ZeroMQ CURVE on the native protocol: keys, the ZAP handler, socket options.

The native protocol (and the plain ingest gateway) can run over CURVE
(RFC 26, CurveZMQ): every connection encrypted, and every client
authenticated by its public key before ZeroMQ hands its first message up.
This module is shared by the server (``server/auth/security.py`` builds a
``CurveServer`` from the settings) and the clients (``client/connection.py``
applies ``CurveClient`` keys), so it sits below both.

Keys are Z85 text (40 characters), in ZeroMQ's certificate files
(``zmq.auth.load_certificate`` reads them):

    NAME.key          the public key: hand it out
    NAME.key_secret   the key pair: mode 0600, its owner only

written by ``write_keypair`` (``kafkalite curve keygen``). Their
``metadata`` section may carry ``principal = "User:alice"``.

Authorized keys (``native_curve_authorized_keys``) map client public keys
to Kafka principals, either

- a directory of ``*.key`` files: each one's principal is its metadata's
  ``principal``, else ``User:`` and the file name before ``.key``; or
- a text file of lines ``<Z85 public key> <principal>`` (lines starting
  with ``#`` are comments).

The ZAP handler (``KeyAuthenticator``, pyzmq's ThreadAuthenticator: a thread
of its own answering libzmq's ZAP requests, so a handshake never waits for
the process's event loop and the loop never runs ZAP code) accepts only
those keys and answers the principal as the ZAP User-Id; the listener reads
it from each message (``frame.get("User-Id")``). Unknown keys are refused
with ZAP status 400, which libzmq reports to the client as
HANDSHAKE_FAILED_AUTH. The file is read again when it changed
(``reload_if_changed``), so adding a client needs no restart.

A native port that takes SASL logins (server/auth/native_login.py: the server
has SASL users and the native protocol runs CURVE) is a CURVE server of
the domain ``LOGIN_ZAP_DOMAIN`` instead, where a key that is not
authorized is accepted too -- a remote client that holds no key pair of
its own makes a throwaway one -- and its User-Id is
``PENDING_PRINCIPAL_PREFIX`` followed by the key (Z85): not a principal
the authorizer knows (its type is not ``User``), only a name the listener
keeps that connection's SASL session under. Such a connection is still
encrypted to the server's key, so the password it sends is not in the
clear; until its login succeeded the listener serves it nothing else.

The channels between a cluster's own processes -- the controller's control
channel and relay, which other nodes' workers join (server/node/processes.py,
server/network/relay.py) -- are CURVE servers of another ZAP domain,
``NODE_ZAP_DOMAIN``, where the same handler accepts the server's own key
and nothing else: a client key authorized for the native ports does not
open them. Every node of a cluster holds the same key pair; a single node
without a key file makes one for the run (server/auth/security.py node_curve),
so those channels are closed to other local processes by default.

With security on, each native port also has a local door (server/
native_listener.py, local_socket.py): a ZeroMQ ``ipc://`` socket without
CURVE in the domain ``LOCAL_ZAP_DOMAIN``, for clients on the same host
that hold no keys. For a Unix-domain connection libzmq hands the ZAP
handler the peer's SO_PEERCRED as the address's last three fields
("…:uid:gid:pid"), which the kernel vouches for; ``local_principal``
makes the uid ``User:unix:<user name>`` (LOCAL_PRINCIPAL_PREFIX), the
principal the authorizer and quotas then see, as for a key. A NULL
handshake in any other domain is refused.

Who may call: any thread; a ``KeyAuthenticator``'s map is swapped whole,
so its thread reads a consistent one.
"""
from __future__ import annotations

import logging
import os
import pwd
import re
import time

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

log = logging.getLogger("kafkalite.curve")

Z85_KEY_LENGTH = 40
# The principal of a server's own key: its processes talking to each other
# (a super user for the authorizer).
BROKER_PRINCIPAL = "User:kafkalite-broker"
ZAP_DOMAIN = "kafkalite"
# The domain of the brokers' own channels: the server's key only.
NODE_ZAP_DOMAIN = "kafkalite-nodes"
# The domain of the native ports' local doors: a same-host peer's user id.
LOCAL_ZAP_DOMAIN = "kafkalite-local"
LOCAL_PRINCIPAL_PREFIX = "User:unix:"
# The domain of native ports that take SASL logins: any key, unknown ones
# pending their login.
LOGIN_ZAP_DOMAIN = "kafkalite-login"
# The User-Id of an unknown key there: this, then the key in Z85.
PENDING_PRINCIPAL_PREFIX = "Pending:"
# In the SASL_AUTHENTICATION_FAILED message of a request whose key has no
# session in that broker process (server/auth/native_login.py): a client that
# had logged in (into a process since restarted on the same address, which
# ZeroMQ reconnected to unseen) logs in again (client/connection.py).
LOGIN_NEEDED = "before a SASL login"
# Authorized keys are read again at most this often, on a handshake.
RELOAD_CHECK_S = 1.0
# A refused key on the brokers' own channels is logged at most this often.
REFUSAL_LOG_S = 10.0
_PRINCIPAL = re.compile(rb'^\s*principal\s*=\s*"?([^"\r\n]+)"?\s*$', re.M)


class CurveKeyError(ValueError):
    """A key or key file that cannot be used; the message names it."""


def load_key(value: str, *, secret: bool = False) -> bytes:
    """A Z85 key from ``value``: the key itself, or a certificate file
    (with ``secret``: the key pair file, whose secret key is taken)."""
    if not isinstance(value, str) or not value:
        raise CurveKeyError("a CURVE key must be 40 characters of Z85 or a key file's path")
    if len(value) == Z85_KEY_LENGTH and not os.path.exists(value):
        try:
            zmq.utils.z85.decode(value)
        except (ValueError, KeyError, TypeError):
            raise CurveKeyError(f"{value!r} is not a Z85 key") from None
        return value.encode("ascii")
    public, secret_key = load_keypair_file(value, need_secret=secret)
    return secret_key if secret else public


def load_keypair_file(path: str, *, need_secret: bool = True) -> tuple[bytes, bytes | None]:
    """(public, secret) from a ZeroMQ certificate file."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"cannot read the CURVE key file {path!r}: {exc}") from None
    if need_secret and not secret:
        raise CurveKeyError(f"{path!r} holds no secret key (use the .key_secret file)")
    return public, secret


def write_keypair(directory: str, name: str, principal: str | None = None) -> tuple[str, str]:
    """A new key pair (zmq.curve_keypair) as NAME.key (public) and
    NAME.key_secret (0600) in ``directory``; their paths. Existing files are
    not overwritten."""
    public, secret = zmq.curve_keypair()
    os.makedirs(directory, exist_ok=True)
    meta = f'metadata\n    principal = "{principal}"\n' if principal else "metadata\n"
    paths = []
    for suffix, body, mode in ((".key", f'curve\n    public-key = "{public.decode()}"\n', 0o644),
                               (".key_secret", f'curve\n    public-key = "{public.decode()}"\n'
                                               f'    secret-key = "{secret.decode()}"\n', 0o600)):
        path = os.path.join(directory, name + suffix)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as f:
            f.write(f"#   ZeroMQ CURVE {'secret key pair' if 'secret' in suffix else 'public key'}"
                    f" made by kafkalite curve keygen\n\n{meta}{body}")
        paths.append(path)
    return paths[0], paths[1]


def write_keypair_file(path: str, public: bytes, secret: bytes, why: str) -> None:
    """Key pair ``public``/``secret`` as a certificate file at ``path``, mode
    0600 (its owner only), replacing any file there; ``why`` goes in its
    comment."""
    tmp = f"{path}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"#   ZeroMQ CURVE secret key pair: {why}\n\nmetadata\ncurve\n"
                f'    public-key = "{public.decode()}"\n    secret-key = "{secret.decode()}"\n')
    os.replace(tmp, path)


def load_authorized_keys(path: str) -> dict[bytes, str]:
    """{Z85 public key: principal} from a directory of .key files or a text file."""
    keys: dict[bytes, str] = {}
    try:
        if os.path.isdir(path):
            for entry in sorted(os.listdir(path)):
                if not entry.endswith(".key"):
                    continue
                file = os.path.join(path, entry)
                public, _ = load_keypair_file(file, need_secret=False)
                with open(file, "rb") as f:
                    found = _PRINCIPAL.search(f.read())
                keys[public] = (found.group(1).decode().strip() if found
                                else "User:" + entry[:-len(".key")])
            return _checked(path, keys)
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()      # Z85 has '#': only whole lines are comments
                if not line or line.startswith(b"#"):
                    continue
                parts = line.split(None, 1)
                if len(parts) != 2 or len(parts[0]) != Z85_KEY_LENGTH or b":" not in parts[1]:
                    raise CurveKeyError(f"{path}:{number}: expected '<Z85 public key> "
                                        f"<principal, e.g. User:alice>'")
                keys[parts[0]] = parts[1].decode().strip()
    except OSError as exc:
        raise CurveKeyError(f"cannot read the authorized CURVE keys {path!r}: {exc}") from None
    return _checked(path, keys)


def _checked(path: str, keys: dict[bytes, str]) -> dict[bytes, str]:
    for principal in keys.values():
        if principal.startswith(PENDING_PRINCIPAL_PREFIX):   # would read as a login pending
            raise CurveKeyError(f"{path}: {principal!r} is not a principal a key may have")
    return keys


def _mtime(path: str) -> float:
    try:
        if os.path.isdir(path):
            return max([os.stat(path).st_mtime_ns] + [
                os.stat(os.path.join(path, e)).st_mtime_ns for e in os.listdir(path)])
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


class KeyAuthenticator(ThreadAuthenticator):
    """The ZAP handler of one ZeroMQ context: a client key is accepted when
    it is in ``authorized_keys`` (path) or ``extra`` ({key: principal}: the
    server's own key), and its principal becomes the ZAP User-Id."""

    def __init__(self, context: zmq.Context, authorized_keys: str | None,
                 extra: dict[bytes, str]):
        super().__init__(context, log=log)
        self._path = authorized_keys
        self._extra = dict(extra)
        self._checked = 0.0
        self._stamp = None
        self.principals: dict[bytes, str] = dict(extra)
        self.reload_if_changed(force=True)
        self.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=self)
        self.configure_curve_callback(domain=NODE_ZAP_DOMAIN,
                                      credentials_provider=_OwnKeys(set(self._extra)))

    def reload_if_changed(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._path is None or (not force and now - self._checked < RELOAD_CHECK_S):
            return
        self._checked = now
        stamp = _mtime(self._path)
        if stamp == self._stamp and not force:
            return
        try:
            keys = load_authorized_keys(self._path)
        except CurveKeyError as exc:
            if force:
                raise
            log.warning("kept the authorized CURVE keys as they were: %s", exc)
            return
        self._stamp = stamp
        self.principals = {**keys, **self._extra}     # swapped whole: the ZAP thread reads it

    async def handle_zap_message(self, msg: list) -> None:
        """A NULL handshake is a local door's: its principal is the peer's
        user id, in LOCAL_ZAP_DOMAIN only (pyzmq's own handler would let any
        NULL handshake in as "anonymous"). CURVE in LOGIN_ZAP_DOMAIN takes
        every key, an unknown one pending its SASL login. Other CURVE is
        pyzmq's handler, which asks ``callback``."""
        if len(msg) >= 6 and msg[0] == b"1.0" and msg[5] == b"NULL":
            principal = (local_principal(msg[3].decode("utf-8", "replace"))
                         if msg[2] == LOCAL_ZAP_DOMAIN.encode() else None)
            if principal is None:
                self._send_zap_reply(msg[1], b"400", b"not a local door's connection")
            else:
                self._send_zap_reply(msg[1], b"200", b"OK", principal)
            return
        if len(msg) == 7 and msg[0] == b"1.0" and msg[5] == b"CURVE" \
                and msg[2] == LOGIN_ZAP_DOMAIN.encode() and len(msg[6]) == 32:
            self.reload_if_changed()
            key = zmq.utils.z85.encode(msg[6])
            self._send_zap_reply(msg[1], b"200", b"OK", self.principals.get(
                key, PENDING_PRINCIPAL_PREFIX + key.decode("ascii")))
            return
        await super().handle_zap_message(msg)

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's credentials provider: is this Z85 client key authorized?"""
        self.reload_if_changed()
        return key in self.principals

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.principals.get(zmq.utils.z85.encode(client_public_key), "")


class _OwnKeys:
    """The credentials provider of NODE_ZAP_DOMAIN: the server's own keys.
    A refusal is logged (at most every REFUSAL_LOG_S): a node with another
    key pair, or someone trying keys."""

    def __init__(self, keys: set[bytes]):
        self.keys = keys
        self._next_log = 0.0

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.keys:
            return True
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + REFUSAL_LOG_S
            log.warning("refused a CURVE connection to the brokers' own channels (control "
                        "channel, relay) with key %s: not this cluster's key pair",
                        key.decode("ascii", "replace"))
        return False


class CurveServer:
    """A process's CURVE identity: its key pair, the ZAP handler of its
    context, and the principal its own key maps to. ``secure_server`` makes
    a listening socket a CURVE server; ``secure_client`` makes a socket the
    process connects to another broker process with its own key."""

    def __init__(self, public: bytes, secret: bytes, authorized_keys: str | None,
                 own_principal: str):
        self.public, self.secret = public, secret
        self.authorized_keys = authorized_keys
        self.own_principal = own_principal
        self.authenticator: KeyAuthenticator | None = None

    def start(self, context: zmq.Context) -> None:
        """Answer ZAP requests in ``context`` (once per context)."""
        if self.authenticator is None:
            self.authenticator = KeyAuthenticator(context, self.authorized_keys,
                                                  {self.public: self.own_principal})
            self.authenticator.start()

    def stop(self) -> None:
        if self.authenticator is not None:
            self.authenticator.stop()
            self.authenticator = None

    def secure_server(self, sock: zmq.Socket, *, login: bool = False) -> None:
        """Before bind: ``sock`` takes the authorized keys; with ``login``,
        any key, an unknown one pending its SASL login (LOGIN_ZAP_DOMAIN,
        enforced: with no ZAP handler answering, no handshake passes)."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt_string(zmq.ZAP_DOMAIN, LOGIN_ZAP_DOMAIN if login else ZAP_DOMAIN)
        if login:
            sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)

    def secure_node_server(self, sock: zmq.Socket, context: zmq.Context) -> None:
        """Before bind: ``sock`` is a channel between the brokers' own
        processes, open to the server's key pair only (NODE_ZAP_DOMAIN).
        ZAP_ENFORCE_DOMAIN makes a handshake fail, not pass unchecked, if
        no ZAP handler answered."""
        self.start(context)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt_string(zmq.ZAP_DOMAIN, NODE_ZAP_DOMAIN)
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)

    def secure_client(self, sock: zmq.Socket) -> None:
        secure_client(sock, self.public, self.public, self.secret)

    def local_door(self, sock: zmq.Socket, context: zmq.Context) -> None:
        """Before bind: ``sock`` is a local door -- an ipc:// socket without
        CURVE whose peers are their user ids (LOCAL_ZAP_DOMAIN; enforced, so
        that no handshake passes if no ZAP handler answered)."""
        self.start(context)
        sock.setsockopt_string(zmq.ZAP_DOMAIN, LOCAL_ZAP_DOMAIN)
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)

    def bind_local_door(self, sock: zmq.Socket, context: zmq.Context, name: str,
                        owner: str) -> bool:
        """Make ``sock`` a local door (``local_door``) in Linux's abstract
        namespace, ``name``, and bind it. False, ``sock`` closed and a
        warning naming ``owner`` logged, when the name is taken: clients
        without keys then stay refused."""
        self.local_door(sock, context)
        try:
            sock.bind(f"ipc://@{name}")
        except zmq.ZMQError as exc:
            sock.close()
            log.warning("%s: no local door for clients without keys: %s is taken (%s)",
                        owner, name, exc)
            return False
        return True


def secure_client(sock: zmq.Socket, server_key: bytes, public: bytes, secret: bytes) -> None:
    """Before connect: ``sock`` speaks CURVE to the server of ``server_key``."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)


def local_principal(address: str) -> str | None:
    """``User:unix:<name>`` of the Unix-domain peer whose ZAP address is
    ``address`` (libzmq: "<host>:uid:gid:pid"); None when it carries no
    credentials (not a Unix-domain peer)."""
    uid = peer_uid(address)
    if uid is None:
        return None
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:        # a uid without a passwd entry (a container's)
        name = str(uid)
    return LOCAL_PRINCIPAL_PREFIX + name


def peer_uid(address: str) -> int | None:
    """The uid in libzmq's address of a Unix-domain peer ("<host>:uid:gid:pid",
    from the kernel's SO_PEERCRED: ZAP's address, a message's Peer-Address);
    None for any other address."""
    parts = address.rsplit(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return int(parts[1])


def pending_key(principal: str) -> str | None:
    """The Z85 key of a LOGIN_ZAP_DOMAIN User-Id that is pending its SASL
    login; None for a principal."""
    if principal.startswith(PENDING_PRINCIPAL_PREFIX):
        return principal[len(PENDING_PRINCIPAL_PREFIX):]
    return None


def principal_of(frame: zmq.Frame) -> str | None:
    """The ZAP User-Id of a message received on a CURVE server socket."""
    try:
        return frame.get("User-Id") or None
    except zmq.ZMQError:
        return None
