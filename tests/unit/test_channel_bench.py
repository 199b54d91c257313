"""benchmarks/channel_bench.py runs: every message of every round crosses (the figures are docs/benchmarks.md's)."""

import asyncio
import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "channel_bench.py"


def test_every_message_crosses_and_the_costs_are_per_message():
    spec = importlib.util.spec_from_file_location("channel_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    send, cpu = asyncio.run(asyncio.wait_for(bench.rounds(4, 50), 30))  # returns only once all 200 arrived
    assert 0 < send < cpu < 0.01
