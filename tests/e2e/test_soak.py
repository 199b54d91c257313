"""`scripts/soak.py` in CI: two minutes of its mixed load against `aura-omni serve` on the tiny demo deploy (all six
stages), judged by the script's own pass criteria (0 unexpected errors, RSS growth after warm-up under its limit,
every stage idle once the load stops)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from serving import API_KEY

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


@pytest.mark.slow
def test_a_two_minute_cpu_soak_passes(start_server, tmp_path):
    server = start_server("deploy_demo.yaml")
    report = tmp_path / "soak.json"
    try:
        proc = subprocess.run(
            [sys.executable, str(SOAK), "--url", server.url, "--api-key", API_KEY, "--minutes", "2",
             "--server-pid", str(server.proc.pid), "--sample-s", "5", "--report", str(report)],
            capture_output=True, text=True, timeout=2 * 60 + 240)
    finally:
        server.stop()
    result = json.loads(report.read_text()) if report.exists() else {}
    log = server.log_path.read_text(errors="replace")[-3000:]
    assert proc.returncode == 0 and result.get("pass"), (
        f"soak failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}\n--- server log ---\n{log}")
    assert result["jobs"] > 20 and result["unexpected_errors"] == 0
    sys.stdout.write(proc.stdout[-2000:])
