"""The run's bytecode (issue 73): every process of a test run reads the
compiled modules it can, and the checkout is compiled once, not by each
test process at once.

``write_beside_sources``: with PYTHONDONTWRITEBYTECODE (which some
environments set) every process the suite starts (servers and their
workers, CLI commands, clients, the xdist workers' rewritten test
modules) compiled its modules from source at each start. The run writes
bytecode again, in the ``__pycache__`` directories beside the sources as
Python does by default (git ignores them). Not in a cache directory of
the run's own (PYTHONPYCACHEPREFIX), as the suite did before: Python then
reads its cache only, so every process compiled the installed packages
and the standard library again although their bytecode was installed
beside them (1,942 and 328 modules a collection), and a docs walk, which
has a /tmp of its own (tests/readme_walk.py), did not see the cache
under the host's /tmp at all: each walk compiled everything anew.

``warm``: each pytest-xdist worker imports the whole suite to collect
it. On a checkout not compiled yet (a fresh clone) they all compiled
kafkalite and rewrote the test modules' asserts at the same moment:
about half of a worker's collection (a cold one 31-37 CPU-s, a warm one
17-19, measured with ``--collect-only -n 0``), once per worker. The
controlling process does it once before the workers start; they read
what it wrote. The rewritten test modules are written as pytest writes
them (its private functions in _pytest.assertion.rewrite: a pytest that
changes them loses the warm-up, not the run).
"""
from __future__ import annotations

import compileall
import fnmatch
import os
import re
import sys
from pathlib import Path

# what pytest rewrites (python_files adds to it): compiled by warm's second half
_REWRITTEN = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")


def write_beside_sources() -> None:
    """Bytecode written and read beside the sources, by this process and
    every process it starts (the environment is inherited)."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False


def warm(config, roots: list[Path]) -> int:
    """Compile the modules under ``roots`` and rewrite their test modules
    as pytest would (``config``: the run's); answers how many test
    modules it rewrote (those up to date are left)."""
    if sys.dont_write_bytecode:
        return 0
    for root in roots:
        compileall.compile_dir(str(root), quiet=2, rx=_REWRITTEN)
    try:
        from _pytest.assertion import rewrite
        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):
        return 0        # a pytest of other internals, or assertion rewriting off
    patterns = ["conftest.py", *config.getini("python_files")]
    done = 0
    for root in roots:
        for fn in sorted(Path(root).rglob("*.py")):
            if not any(fnmatch.fnmatch(fn.name, p) for p in patterns):
                continue
            pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc, state.trace) is not None:
                continue
            try:
                source_stat, co = rewrite._rewrite_test(fn, config)
            except (SyntaxError, ValueError):
                continue        # the worker's own import of it says what is wrong
            if rewrite.try_makedirs(pyc.parent):
                rewrite._write_pyc(state, co, source_stat, pyc)
                done += 1
    return done
