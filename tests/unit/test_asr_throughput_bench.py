"""benchmarks/asr_throughput.py runs end to end on CPU on a tiny checkpoint, its profile included (the lead runs the
full one on the GPU)."""

import json
import subprocess
import sys
from pathlib import Path

from aura_omni.testing.tiny_asr import write_tiny_asr

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "asr_throughput.py"


def test_tiny_bench_reports_step_costs_and_the_profile(tmp_path):
    model = write_tiny_asr(tmp_path, size="1.7b")
    out = subprocess.run([sys.executable, str(BENCH), "--model", str(model), "--device", "cpu", "--concurrency", "1",
                          "2", "--clips", "3", "--min-seconds", "1", "--max-seconds", "2", "--new-tokens", "3",
                          "--profile", "2"], capture_output=True, text=True, timeout=300, check=True).stdout
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["concurrency"] for r in runs] == [1, 2, 1] and runs[-1]["profiled"]
    assert all(r["prompt_step_ms"] > 0 and r["decode_step_ms"] > 0 and r["audio_s_per_s"] > 0 for r in runs)
    assert "Self CPU time total" in out and "aten::" in out  # the profiler's table of ops
