"""Smoke test of benchmarks/bench_security.py: the --quick run starts a
PLAINTEXT, an SSL and a SASL_SSL server, then a plain, a CURVE and a
secured one (SASL listener and the authorizer, no key file: its ring and the
native local door's figures) for the native and ring figures, completes,
exits 0 and writes every figure. It checks that
the benchmark works, not how fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIGURES = [f"{p}_{k}_records_per_s" for k in ("produce", "consume")
           for p in ("plaintext", "ssl", "sasl_ssl")] + [
    f"native_{p}_{k}_records_per_s" for k in ("produce", "consume") for p in ("plain", "curve")] + [
    f"ring_{p}_produce_records_per_s" for p in ("plain", "secured")] + [
    "native_door_produce_records_per_s"]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_security.py"),
                        "--quick", "--records", "1000", "--output-dir", str(out),
                        "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["figures"]) == FIGURES
    assert all(doc["figures"][k]["value"] > 0 for k in FIGURES)
    assert "SASL_SSL SCRAM-SHA-256" in (out / "results.md").read_text()
