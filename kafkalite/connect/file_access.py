"""Which files a connector may open: only under the directories the
worker's operator lists, never a kafkalite data directory, never through a
symbolic link (issue 67).

A connector is configured by whoever may call the worker's REST API, and
it runs as the worker's Unix user: a ``FileStreamSource`` whose ``file``
names the broker's key pair or ``sasl-users.json`` would copy the server's
secrets into its creator's topic, and a ``FileStreamSink`` could create a
file anywhere the worker may write. Kafka's answer is to leave its file
connectors off the default plugin path (since 3.2) and, for its config
providers, KIP-993's ``allowed.paths``. Ours is one rule for every file a
connector or a config provider names:

- the worker setting ``kafkalite.file.allowed.paths`` (comma-separated
  directories; relative ones from the worker's working directory) lists
  where connectors may read and write; unset, they may open no file at all
  (the file connectors still read stdin and write stdout when ``file`` is
  unset, as Kafka's);
- the path, made absolute without following links, must lie under one of
  those directories, and every component below that directory is opened
  with ``O_NOFOLLOW`` one at a time (``dir_fd``), so a symbolic link placed
  below it -- before the check or after it -- is refused, not followed;
- no directory above the file may be a kafkalite data directory (one that
  holds ``server.json`` or ``.node-keys``), even when the operator listed
  it or a directory above it: partitions, key pairs and credential stores
  are the broker's alone;
- only regular files: no FIFOs, devices or directories.

Refusals raise ConnectException with a message naming the path and the
rule, which a connector's ``validate`` turns into a 400 at create time.

Who calls: connectors/file.py (its connectors' validate, its tasks'
opens), config_providers.py; the worker builds one FileAccess per task or
connector from its config (``from_worker_config``).
"""
from __future__ import annotations

import errno
import os
import stat

from kafkalite.connect.errors import ConnectException

ALLOWED_PATHS = "kafkalite.file.allowed.paths"
# what every kafkalite data directory holds (the server's own layout: server/node/
# processes.py SERVER_FILE and NODE_KEYS_FILE); the connector layer may not import the
# server's, so the two names are repeated here and tests/connect/test_file_access.py
# checks them against a real data directory
DATA_DIR_MARKERS = ("server.json", ".node-keys")


class FileAccess:
    """The directories a connector may open files under (absolute, links
    resolved once, at the worker's start)."""

    def __init__(self, allowed, setting: str = ALLOWED_PATHS):
        self.allowed = [os.path.realpath(p) for p in allowed]
        self.setting = setting

    @classmethod
    def from_worker_config(cls, config: dict) -> "FileAccess":
        return cls(parse_paths(config.get(ALLOWED_PATHS)))

    def check(self, path: str) -> tuple[str, str]:
        """(the allowed directory, the path below it) for ``path``, or
        ConnectException. Only the names are checked; ``open`` checks the
        file system again as it opens."""
        if not self.allowed:
            raise ConnectException(
                f"{path}: this worker lets connectors open no file; list the directories "
                f"they may read and write in the worker setting {self.setting}")
        full = os.path.abspath(path)
        for directory in self.allowed:
            if full == directory:
                raise ConnectException(f"{path} is a directory, not a file")
            if full.startswith(directory.rstrip("/") + "/"):
                below = os.path.relpath(full, directory)
                self._refuse_data_dir(path, full)
                return directory, below
        raise ConnectException(
            f"{path} is not under a directory listed in {self.setting} "
            f"({', '.join(self.allowed)})")

    def open(self, path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """An fd of ``path`` opened with ``flags`` under the rules above; a
        missing file raises FileNotFoundError (a source waits for it)."""
        directory, below = self.check(path)
        parts = below.split("/")
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                nxt = self._step(path, part, os.O_RDONLY | os.O_DIRECTORY, 0, fd)
                os.close(fd)
                fd = nxt
            out = self._step(path, parts[-1], flags | os.O_NONBLOCK, mode, fd)
        finally:
            os.close(fd)
        try:
            st = os.fstat(out)
            if not stat.S_ISREG(st.st_mode):
                raise ConnectException(f"{path} is not a regular file")
            # O_NONBLOCK was only there so that opening a FIFO cannot hang the task
            os.set_blocking(out, True)
        except BaseException:
            os.close(out)
            raise
        return out

    @staticmethod
    def _step(path: str, part: str, flags: int, mode: int, dir_fd: int) -> int:
        try:
            return os.open(part, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as e:
            # ELOOP: the last component is a link; ENOTDIR: an earlier one is (O_DIRECTORY
            # with O_NOFOLLOW refuses a link to a directory that way)
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, dir_fd):
                raise ConnectException(f"{path}: {part} is a symbolic link, which connectors "
                                       f"do not follow") from None
            raise

    @staticmethod
    def _refuse_data_dir(path: str, full: str) -> None:
        directory = os.path.dirname(full)
        while True:
            for marker in DATA_DIR_MARKERS:
                if os.path.lexists(os.path.join(directory, marker)):
                    raise ConnectException(
                        f"{path} is in a kafkalite data directory ({directory}), which no "
                        f"connector may read or write")
            parent = os.path.dirname(directory)
            if parent == directory:
                return
            directory = parent


def _is_link(part: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def parse_paths(value) -> list[str]:
    """A comma-separated list of paths (a list is taken as it is)."""
    if not value:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [p.strip() for p in items if p.strip()]
