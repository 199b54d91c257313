"""`scripts/soak.py` in CI: two minutes of its mixed load against `aura-omni serve` on the tiny demo deploy (all six
stages), judged by the script's own pass criteria (0 unexpected errors, RSS growth after warm-up under its limit,
every stage idle once the load stops)."""

from __future__ import annotations

import json
import os
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
    assert result["finished"] and result["rss_flat"] is not None and "RSS flatness: " in proc.stdout
    assert result["stages_after"]["detached_sessions"] == 0  # the last sample waited for dropped sessions to expire
    assert result["anon_flat"] is not None and isinstance(result["rss_growth_by_mapping"], dict)
    sample = result["memory_samples"][-1]
    assert 0 < sample["anon_mb"] < sample["rss_mb"] and sample["file_mb"] > 0  # the server's RSS by kind
    assert sample["py_blocks"] > 100_000  # the interpreter's memory blocks, from /metrics
    assert sample["prefix_blocks"]["aura"] > 0  # the AURA prefix cache's registered blocks, by stage
    sys.stdout.write(proc.stdout[-2000:])


def test_the_flatness_verdict_reads_the_end_against_warm_up_and_gives_the_slope():
    sys.path.insert(0, str(SOAK.parent))
    import soak

    leak = [(60.0 + 10 * i, 1000.0 + 0.5 * i) for i in range(30)]  # 3 MB a minute for 5 minutes: +1.45%
    flat = [(60.0 + 10 * i, 1000.0 + (3 if i % 7 == 0 else 0)) for i in range(30)]  # spikes, no trend
    verdict = soak.flatness(leak, 0.01)
    assert not verdict["flat"] and verdict["slope_mb_per_min"] == pytest.approx(3.0) and verdict["change"] > 0.01
    verdict = soak.flatness(flat, 0.01)
    assert verdict["flat"] and abs(verdict["slope_mb_per_min"]) < 0.5
    assert soak.flatness(leak[:1], 0.01) is None
    low_start = [(60.0, 985.0)] + flat[1:]  # the first sample taken in a lull: the first 3's mean, not it alone
    assert soak.flatness(low_start, 0.01)["flat"]


def test_the_growth_by_mapping_names_what_grew_largest_first():
    sys.path.insert(0, str(SOAK.parent))
    import soak

    now = soak.mapping_rss(os.getpid())
    assert now.get("[anon]", 0) > 0 and any(k.endswith(".so") or ".so." in k for k in now)  # libraries by path
    before = {"[heap]": 100.0, "/lib/libcublasLt.so": 50.0, "[anon]": 200.0}
    after = {"[heap]": 100.05, "/lib/libcublasLt.so": 58.0, "[anon]": 197.0, "/lib/new.so": 1.0}
    assert soak.mapping_growth(before, after) == {"/lib/libcublasLt.so": 8.0, "[anon]": -3.0, "/lib/new.so": 1.0}


def test_kinds_narrow_the_mix_and_growth_is_told_per_job():
    import argparse
    import asyncio

    sys.path.insert(0, str(SOAK.parent))
    import heap_by_kind
    import soak

    args = argparse.Namespace(url="http://127.0.0.1:9", api_key=None, job_timeout=5, seed=0,
                              kinds=["hostile", "chat_leave"])
    load = soak.Soak(args)
    asked = []

    async def job(kind):
        asked.append(kind)
        await asyncio.sleep(0.001)
        return "ok"

    load.job = job
    asyncio.run(load.worker(soak.time.monotonic() + 0.2))
    assert asked and set(asked) == {"hostile", "chat_leave"}
    asyncio.run(load.client.aclose())

    before = {"heap_mb": 100.0, "anon_mb": 200.0, "rss_mb": 300.0, "py_blocks": 1_000_000}
    after = {"heap_mb": 101.0, "anon_mb": 199.0, "rss_mb": 302.0, "py_blocks": 1_000_500}
    assert heap_by_kind.growth_per_job(before, after, 100) == {
        "heap_kib": 10.24, "anon_kib": -10.24, "rss_kib": 20.48, "py_blocks": 5.0}
    assert heap_by_kind.growth_per_job(before, {**after, "heap_mb": None}, 100).keys() == {
        "anon_kib", "rss_kib", "py_blocks"}  # a server without glibc's figure
    assert heap_by_kind.growth_per_job(before, after, 0) == {}


def test_the_last_sample_waits_for_dropped_duplex_sessions_to_expire():
    import argparse
    import asyncio

    import httpx

    sys.path.insert(0, str(SOAK.parent))
    import soak

    held = [2, 1, 0]  # what /metrics says at each scrape: the held sessions expiring

    def handler(request):
        if request.url.path == "/health":
            return httpx.Response(200, json={"stages": {"aura": {"in_flight": 0, "free_blocks": 4, "total_blocks": 4}}})
        return httpx.Response(200, text=f"aura_omni:realtime_sessions_detached {held.pop(0) if held else 0}.0\n")

    load = soak.Soak(argparse.Namespace(url="http://x", api_key=None, job_timeout=5, seed=0, kinds=None))
    load.client = httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(handler))
    settled = asyncio.run(load.settled())
    assert settled["idle"] and settled["detached_sessions"] == 0 and not held and settled["seconds"] >= 2
