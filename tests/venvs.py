"""Virtualenvs of their own for third-party packages whose pins clash with
the test environment's: quixstreams pins confluent-kafka below 2.13, which
`pip install -e '.[test]'` would otherwise downgrade (issue 42). Its tests
and benchmarks/bench_streams.py run it as a process with such a
virtualenv's python.

One virtualenv per requirement set and interpreter version, built once per
machine under the test cache (~/.cache/kafkalite-tests/, or
$KAFKALITE_TEST_CACHE) and kept there: the directory is named after the
requirements (``quixstreams-3.28.1-py3.11``), so a changed pin builds a new
one beside the old. Parallel sessions take a lock per virtualenv and wait
for the first to build it; it is built under a temporary name and renamed
into place with its requirements recorded inside, so a directory under the
final name is a complete build. No pytest here: the benchmarks use it too.
"""
from __future__ import annotations

import fcntl
import os
import pathlib
import re
import shutil
import subprocess
import sys

CACHE = pathlib.Path(os.environ.get("KAFKALITE_TEST_CACHE",
                                    "~/.cache/kafkalite-tests")).expanduser()

# tests/compat/test_quixstreams.py and bench_streams.py's peer: one
# virtualenv for both (pinned, so that it is built once and reproducible)
QUIXSTREAMS = ("quixstreams==3.28.1",)

# written inside a virtualenv once its pip install succeeded
RECORD = "kafkalite-requirements.txt"


class VenvUnavailable(Exception):
    """This python cannot make a virtualenv (no venv module or ensurepip):
    the tests that need one skip."""


class VenvBuildFailed(Exception):
    """pip could not install the requirements (a failure, not a skip)."""


def venv_name(requirements) -> str:
    """``quixstreams-3.28.1-py3.11`` for ``("quixstreams==3.28.1",)``."""
    parts = [re.sub(r"[^A-Za-z0-9.]+", "-", r).strip("-") for r in requirements]
    return "+".join(parts) + f"-py{sys.version_info[0]}.{sys.version_info[1]}"


def _record(requirements) -> str:
    return "\n".join(requirements) + "\n"


def _built(venv: pathlib.Path, requirements) -> bool:
    python = venv / "bin" / "python"
    try:
        if (venv / RECORD).read_text() != _record(requirements):
            return False
    except OSError:
        return False
    # the interpreter it was made from may be gone (a removed pyenv version)
    return subprocess.run([str(python), "-c", "pass"], capture_output=True,
                          timeout=60).returncode == 0


def venv_python(requirements, cache: pathlib.Path | None = None) -> pathlib.Path:
    """The python of a virtualenv holding ``requirements`` (pip requirement
    strings), made from this python on first use and kept in ``cache``."""
    requirements = tuple(requirements)
    cache = CACHE if cache is None else pathlib.Path(cache)
    name = venv_name(requirements)
    venv = cache / name
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _built(venv, requirements):
            return venv / "bin" / "python"
        building = cache / f"{name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        try:
            r = subprocess.run([sys.executable, "-m", "venv", str(building)],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise VenvUnavailable(f"cannot make a virtualenv with {sys.executable}: "
                                      f"{r.stderr.strip()}")
            # the venv's own pip installs into it, whatever made the venv
            r = subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q",
                                "--disable-pip-version-check", *requirements],
                               capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                raise VenvBuildFailed(f"pip install {' '.join(requirements)} failed:\n"
                                      f"{r.stderr[-4000:]}")
            (building / RECORD).write_text(_record(requirements))
            shutil.rmtree(venv, ignore_errors=True)
            # a venv's python finds its packages from where it is (pyvenv.cfg
            # beside it): the renamed venv works as built
            building.rename(venv)
        finally:
            shutil.rmtree(building, ignore_errors=True)
        if not _built(venv, requirements):
            raise VenvBuildFailed(f"{venv} does not run after its build")
        return venv / "bin" / "python"
