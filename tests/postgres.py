"""Test harness: a throwaway PostgreSQL server from the distribution's packages.

``PostgresServer`` initdb's a cluster in a temporary directory, starts it
on a free loopback port (its unix socket in the same directory, fsync off),
gives a DSN (``postgresql://postgres@127.0.0.1:<port>/postgres``, trust
authentication), and stops it and removes the directory at the end.
PostgreSQL refuses to run as root: when the tests run as root the server
runs as the ``postgres`` system user (created if missing) through
``runuser``. The binaries are found on PATH (``pg_ctl``, ``initdb``) or in
``/usr/lib/postgresql/<version>/bin``; without them ``find_binaries``
returns None (tools/install-system-deps installs the ``postgresql``
package). ``PostgresServer(wal_level="logical")`` starts it with logical
decoding on (replication slots for change data capture).
``PostgresServer(listen_on="10.1.2.1/24")`` listens on that address too
(besides loopback), trusts clients from its network, and gives it in the
DSN: what nodes in network namespaces (tests/netns.py) connect to.
"""
from __future__ import annotations

import glob
import ipaddress
import os
import pwd
import shutil
import subprocess
import tempfile

from harness import free_port


def find_binaries() -> str | None:
    """The directory holding pg_ctl and initdb, or None."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "pg_ctl")) and os.path.exists(os.path.join(d, "initdb")):
            return d
    ctl = shutil.which("pg_ctl")
    if ctl and shutil.which("initdb"):
        return os.path.dirname(os.path.realpath(ctl))
    return None


class PostgresServer:
    def __init__(self, bindir: str | None = None, wal_level: str | None = None,
                 listen_on: str | None = None):
        self.wal_level = wal_level
        self.listen_on = ipaddress.ip_interface(listen_on) if listen_on else None
        self.host = str(self.listen_on.ip) if self.listen_on else "127.0.0.1"
        self.bindir = bindir or find_binaries()
        if self.bindir is None:
            raise RuntimeError("PostgreSQL is not installed (run tools/install-system-deps)")
        self.dir = tempfile.mkdtemp(prefix="kafkalite-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:
            self.user = self._system_user()
            os.chown(self.dir, pwd.getpwnam(self.user).pw_uid, pwd.getpwnam(self.user).pw_gid)

    @staticmethod
    def _system_user() -> str:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/false",
                            "postgres"], check=True, capture_output=True)
        return "postgres"

    def _run(self, *cmd, check=True):
        argv = [os.path.join(self.bindir, cmd[0]), *cmd[1:]]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def start(self) -> "PostgresServer":
        try:
            self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--no-sync")
            if self.listen_on:
                with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
                    f.write(f"host all all {self.listen_on.network} trust\n")
            self._pg_ctl_start()
        except subprocess.CalledProcessError as e:
            log = ""
            try:
                with open(os.path.join(self.dir, "server.log")) as f:
                    log = f.read()[-2000:]
            except OSError:
                pass
            self.remove()
            raise RuntimeError(f"PostgreSQL did not start: {e.stderr or e.stdout}\n{log}") from None
        return self

    def _pg_ctl_start(self) -> None:
        listen = "127.0.0.1" + (f",{self.host}" if self.listen_on else "")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses={listen} -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off")
        if self.wal_level:
            opts += f" -c wal_level={self.wal_level} -c max_replication_slots=32"
        self._run("pg_ctl", "-D", self.data, "-o", opts, "-l",
                  os.path.join(self.dir, "server.log"), "-w", "-t", "60", "start")

    def halt(self, mode: str = "immediate") -> None:
        """Stop the server, keeping its data (``resume`` starts it again):
        what a PostgreSQL restart or failover looks like to its clients."""
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def resume(self) -> None:
        self._pg_ctl_start()

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop", check=False)
        self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class Database:
    """A database of its own on a shared PostgreSQL: a cluster of its own
    (``dsn``, as PostgresServer has)."""

    def __init__(self, dsn: str):
        self.dsn = dsn


def new_database(server) -> Database:
    """A new, empty database on ``server`` (a PostgresServer)."""
    import uuid

    import psycopg
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return Database(server.dsn.rsplit("/", 1)[0] + "/" + name)
