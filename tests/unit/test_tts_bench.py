"""benchmarks/tts_bench.py runs our side end to end on CPU with --tiny (the lead runs the full one, with the
qwen-tts reference, on the H200)."""

import argparse
import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "tts_bench.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("tts_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_tiny_bench_reports_ttfa_and_concurrency_rows_for_every_mode(tmp_path):
    bench = load_bench()
    rows = bench.main(["--tiny", "--no-reference", "--no-talker-frames", "--frames", "3",
                       "--workdir", str(tmp_path)])
    for mode in bench.MODES:
        ttfa = [r for r in rows if r["bench"] == "tts_ttfa" and r["mode"] == mode]
        assert [r["initial_chunk_frames"] for r in ttfa] == [1, 2] and all(r["ttfa_ms"] > 0 for r in ttfa)
        conc = [r for r in rows if r["bench"] == "tts_concurrency" and r["mode"] == mode]
        assert [r["concurrency"] for r in conc] == [1, 2] and conc[0]["serve"] == "stream"
        assert conc[1]["serve"] in bench.SERVES  # streams with a batching facade, else static_batch
        assert all(r["frames_mean"] == 3 and r["audio_s_per_s"] > 0 and r["ttfa_mean_ms"] > 0 for r in conc)
    assert {r["mode"] for r in rows if r["bench"] == "voice_prompt"} == {"base_xvector", "base_icl"}


def test_checkpoints_are_written_once_per_workdir(tmp_path):
    bench = load_bench()
    args = argparse.Namespace(tiny=True, workdir=str(tmp_path), num_layers=None, seed=0, modes=["custom_voice"])
    dirs, written = bench.write_checkpoints(args, None)
    weights = dirs["custom_voice"] / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert written["kinds"] == ["custom_voice"]
    assert bench.write_checkpoints(args, None) == (dirs, None) and weights.stat().st_mtime_ns == stamp
