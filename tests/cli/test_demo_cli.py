"""``kafkalite demo``: a local partition log written and read back, with no
server; by default in a temporary directory it removes (it wrote 115 MB
into ./kafkalite-data, the server's own default data directory)."""
import os
import re

from harness import run_cli


def test_demo_leaves_nothing_behind_unless_told_where(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_cli("demo", "--records", "5000", "--batch-size", "500")
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "read back 5,000 records" in text, text
    (removed,) = re.findall(r"removed (\S+) \(give --data-dir", text)
    assert not os.path.exists(removed)
    assert os.listdir(tmp_path) == []

    out = run_cli("demo", "--records", "5000", "--data-dir", str(tmp_path / "kept"))
    assert out.returncode == 0, out.stderr
    assert "removed" not in out.stdout.decode() and "kafkalite verify" in out.stdout.decode()
    assert os.listdir(tmp_path / "kept" / "demo-0")
