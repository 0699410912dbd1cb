"""Smoke test of benchmarks/bench_storage.py: the --quick run completes,
exits 0 and writes every figure, the Markdown table and the plot.

It checks that the benchmark works, not how fast anything is: a benchmark
never fails on timing.
"""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_storage.py"

# Every figure the Foundation issue asks for (test number in the comment).
FIGURES = [
    # 1. append vs a plain os.write loop, build, build + append
    "append_records_per_s", "append_mb_per_s", "plain_write_mb_per_s",
    "append_vs_plain_write_ratio", "append_bytes_records_per_s", "append_bytes_mb_per_s",
    "build_records_per_s", "build_append_records_per_s",
    # 2. read + decode, read only, decode only
    "read_decode_records_per_s", "read_only_mb_per_s", "plain_pread_mb_per_s",
    "decode_only_records_per_s",
    # 3. CRC-32C software path (hardware path and peer added below when present)
    "crc_sw_gb_per_s", "crc_dispatch_gb_per_s",
    # 4. append at a small log vs a big log
    "small_log_append_mb_per_s", "big_log_append_mb_per_s", "big_vs_small_log_ratio",
    # 5. one-record appends (plain, idempotent) beside os.pwrite, to 1 log and to
    # --quick's 10 in turn (100 by default)
    "one_record_pwrite_us", "one_record_append_us", "one_record_idempotent_append_us",
    "one_record_pwrite_us_10_logs", "one_record_append_us_10_logs",
    "one_record_idempotent_append_us_10_logs",
]

TARGETED = ["append_records_per_s", "append_vs_plain_write_ratio", "read_decode_records_per_s",
            "big_vs_small_log_ratio"]


def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "out"
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output-dir", str(out),
         "--work-dir", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"

    doc = json.loads((out / "results.json").read_text())
    machine, figures = doc["machine"], doc["figures"]
    for key in ("cpu_model", "logical_cores", "python", "kafkalite_crc32c_hardware"):
        assert key in machine, key

    required = list(FIGURES)
    if machine["kafkalite_crc32c_hardware"]:
        required.append("crc_hw_gb_per_s")
    if machine["crc32c_package"]:
        required.append("crc_peer_gb_per_s")
    for key in required:
        assert key in figures, f"{key} missing from results.json"
        value = figures[key]["value"]
        assert isinstance(value, (int, float)) and value > 0, f"{key} = {value!r}"

    # pass/fail against the targets is recorded, as information only
    targeted = TARGETED + (["crc_hw_gb_per_s"] if machine["kafkalite_crc32c_hardware"] else [])
    for key in targeted:
        assert isinstance(figures[key]["meets_target"], bool), key
        assert isinstance(doc["meets_target"][key], bool), key

    table = (out / "results.md").read_text()
    assert "| # | Figure |" in table
    assert "read + decode_columns" in table and "plain os.write loop" in table
    assert "read + decode_columns" in proc.stdout  # the table is printed too

    if importlib.util.find_spec("matplotlib") is not None:
        png = out / "results.png"
        assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "plot skipped" in proc.stdout

    # the data directory is removed at the end
    assert work.is_dir() and not any(work.iterdir())
