"""The event loop's lag: a callback that holds the loop shows up as a late wake-up, and /metrics serves it."""

import asyncio
import time

from fastapi.testclient import TestClient

from aura_omni.deploy import parse_deploy_config
from aura_omni.pipeline.runtime import Runtime
from aura_omni.server.app import create_app
from aura_omni.server.loop_lag import LoopLag


def test_a_callback_that_holds_the_loop_is_measured_as_lag():
    async def main():
        lag = LoopLag(tick_s=0.005)
        lag.start()
        lag.start()  # idempotent: one measuring task
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # a callback holding the loop: the sleeping task wakes ~80 ms late
        await asyncio.sleep(0.03)
        await lag.stop()
        return lag.snapshot()

    snap = asyncio.run(main())
    assert snap.count >= 5
    late = [n for bound, n in snap.buckets if bound <= 0.05]
    assert late[-1] < snap.count  # at least one tick woke more than 50 ms late
    assert 0.06 <= snap.total <= 0.08 + 0.05 * snap.count  # the held 80 ms, less the tick it slept through


def test_metrics_serve_the_event_loop_lag_while_the_app_runs():
    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [{"stage_id": 0, "model": "asr"}]}, "one.yaml")
    with TestClient(create_app(deploy, "served", runtime=Runtime(deploy, {}))) as client:
        time.sleep(0.1)  # the app's loop runs in the client's thread meanwhile
        text = client.get("/metrics").text
    count = [line for line in text.splitlines() if line.startswith("aura_omni:event_loop_lag_seconds_count ")]
    assert count and float(count[0].split()[1]) >= 3
