"""benchmarks/engine_bench.py runs end to end on CPU with --tiny (the lead runs the full one on the H200)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_bench.py"


def test_tiny_bench_reports_decode_rows_and_talker_frames():
    spec = importlib.util.spec_from_file_location("engine_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--tiny", "--steps", "2"])
    lm = [r for r in rows if r["model"] == "tiny"]
    assert [r["batch"] for r in lm] == [1, 2]
    assert all(r["step_ms"] > 0 and r["floor_ms"] > 0 and r["vs_floor"] > 0 for r in lm)
    talker = [r for r in rows if r["model"].startswith("talker")]
    assert [r["batch"] for r in talker] == [1, 2] and all(r["frame_ms"] > 0 for r in talker)
