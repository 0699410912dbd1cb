"""tests/bytecode.py: the run's processes read the bytecode installed
beside the packages and write the checkout's beside its sources; the
controlling process compiles the checkout (its modules, its test modules
rewritten as pytest does) once, before the xdist workers collect."""
from __future__ import annotations

import importlib.util
import os
import sys

from _pytest.assertion import rewrite

import bytecode


def test_the_run_reads_and_writes_bytecode_beside_the_sources():
    # the suite's own cache directory hid the installed bytecode from every
    # process (they compiled pyarrow, flask... again) and, under the host's
    # /tmp, from the docs walks; a PYTHONPYCACHEPREFIX the user set is theirs
    assert "kafkalite-test-pycache" not in os.environ.get("PYTHONPYCACHEPREFIX", "")
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert not sys.dont_write_bytecode


def test_write_beside_sources_undoes_dont_write_bytecode(monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    bytecode.write_beside_sources()
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ and not sys.dont_write_bytecode


def test_warm_compiles_modules_and_rewrites_test_modules_once(tmp_path, request, monkeypatch):
    monkeypatch.setattr(sys, "pycache_prefix", None)
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "mod.py"
    module.write_text("X = 1\n")
    test_module = tmp_path / "pkg" / "test_mod.py"
    test_module.write_text("def test_x():\n    assert 1 + 1 == 2\n")
    assert bytecode.warm(request.config, [tmp_path]) == 1
    assert os.path.exists(importlib.util.cache_from_source(str(module)))
    # the test module as pytest's rewrite of it, not plainly compiled
    assert not os.path.exists(importlib.util.cache_from_source(str(test_module)))
    pyc = tmp_path / "pkg" / "__pycache__" / ("test_mod" + rewrite.PYC_TAIL)
    code = rewrite._read_pyc(test_module, pyc)
    assert code is not None and any("@py_assert" in name for c in code.co_consts
                                    if hasattr(c, "co_varnames") for name in c.co_varnames)
    # up to date: nothing rewritten again; a changed source is
    assert bytecode.warm(request.config, [tmp_path]) == 0
    test_module.write_text("def test_x():\n    assert 2 + 2 == 4  # changed\n")
    assert bytecode.warm(request.config, [tmp_path]) == 1
