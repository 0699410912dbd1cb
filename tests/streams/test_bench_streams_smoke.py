"""Smoke tests of benchmarks/bench_streams.py and bench_streams_restore.py:
each --quick run completes, exits 0 and writes every figure, the peers'
(quixstreams, faust) included (they check that the benchmarks work, not how
fast anything is).

quixstreams is not in the test environment (it pins confluent-kafka below
2.13): bench_streams.py runs its peer with the python of the virtualenv
tests/venvs.py builds, found in the test cache. The ``quix_python`` fixture
builds it first when it is missing, so that the build does not count
against the run's timeout, and the run makes ``import quixstreams`` fail in
the benchmark's own process (``sys.modules["quixstreams"] = None``, as when
it is not installed) to show it needs none there."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from venvs import QUIXSTREAMS, VenvUnavailable, venv_python

REPO = Path(__file__).resolve().parents[2]
WITHOUT_QUIXSTREAMS = "import sys, runpy; sys.modules['quixstreams'] = None; "


@pytest.fixture(scope="session")
def quix_python():
    """The python of the quixstreams virtualenv (built once per machine)."""
    try:
        return venv_python(QUIXSTREAMS)
    except VenvUnavailable as e:
        pytest.skip(str(e))


def test_quick_run_reports_every_figure(tmp_path, quix_python):
    out = tmp_path / "out"
    bench = str(REPO / "benchmarks" / "bench_streams.py")
    # --quick with a tenth of its records: the peers' start-up is most of the run
    argv = [bench, "--quick", "--records", "5000", "--keys", "500", "--quix-records", "1000",
            "--faust-records", "300", "--output-dir", str(out), "--work-dir",
            str(tmp_path / "work")]
    # as `python bench_streams.py ...` would: its directory first on sys.path
    r = subprocess.run([sys.executable, "-c", WITHOUT_QUIXSTREAMS +
                        f"sys.argv = {argv!r}; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); "
                        f"runpy.run_path({bench!r}, run_name='__main__')"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    for kind in ("stateless", "stateful"):
        for guarantee in ("at_least_once", "exactly_once_v2"):
            for impl in ("columnar", "per_record", "quix", "faust"):
                figure = doc["figures"][f"{kind}_{guarantee}_{impl}"]
                # a peer that failed is a warning in the output: say it
                assert figure["value"] > 0 and len(figure["runs"]) == 1, (
                    (kind, guarantee, impl), r.stdout[-3000:] + r.stderr[-6000:])
    for guarantee in ("at_least_once", "exactly_once_v2"):
        for impl in ("columnar", "per_record"):
            assert doc["figures"][f"join_{guarantee}_{impl}"]["value"] > 0
    assert "count per key" in (out / "results.md").read_text()
    assert "faust, count per key, exactly_once_v2" in r.stdout
    assert f"its own process: {quix_python}" in r.stdout
    assert "stream-table join" in (out / "results.md").read_text()


def test_restore_quick_run_reports_every_figure(tmp_path):
    """benchmarks/bench_streams_restore.py --quick: every figure, beside its ceiling."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_streams_restore.py"),
                        "--quick", "--records", "5000", "--keys", "500", "--tail", "200",
                        "--output-dir", str(out), "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads((out / "results.json").read_text())["figures"]
    for key in ("plain_read_rocksdb", "restore_rocksdb", "plain_read_in_memory",
                "restore_in_memory", "restore_full_seconds", "restore_tail_seconds",
                "session_timeout", "resume_after_kill"):
        assert figures[key]["value"] > 0, key
