"""The step trace (AURA_OMNI_STEP_TRACE): a stage's outputs handed to the event loop are traced with the loop's delay,
and scripts/step_trace_report.py sums those delays up, times calls crossing to stages in processes of their own, and
splits each stage's steps into those that took prompts and those that only decoded."""

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

from aura_omni import step_trace
from aura_omni.stages.outbox import AsyncSink, Outbox

REPORT = Path(__file__).resolve().parents[2] / "scripts" / "step_trace_report.py"


def test_a_steps_outputs_reach_the_event_loop_traced_with_its_delay(tmp_path, monkeypatch):
    monkeypatch.setattr(step_trace, "_DIR", str(tmp_path))
    monkeypatch.setattr(step_trace, "_local", threading.local())  # this thread's file is opened in tmp_path

    async def main():
        outbox = Outbox()
        sink = AsyncSink(outbox)
        sink.put("a")
        sink.put("b")
        step_trace.record("sent", "transcribe", "r1")  # the server's call to a stage in a process of its own
        step_trace.record("arrived", "transcribe", "r1")  # (the stage's process records its arrival)
        step_trace.record("submit", "asr", "r1")
        step_trace.record("engine_step", "asr", 60, 7)  # a new clip's prompt beside six decoding rows
        step_trace.record("step", "asr", "0.020000", 1, 7, 0, "0.015000")  # 15 ms of it waiting for the device
        step_trace.record("engine_step", "asr", 7, 7)
        step_trace.record("step", "asr", "0.004000", 0, 7, 0, "0.001000")
        step_trace.record("first_output", "asr", "r1")
        thread = threading.Thread(target=outbox.flush)  # the stage loop's thread
        thread.start()
        thread.join()
        return [await sink.queue.get(), await sink.queue.get()]

    assert asyncio.run(main()) == ["a", "b"]
    lines = [line.split() for path in tmp_path.glob("*.trace") for line in path.read_text().splitlines()]
    delivered = [f for f in lines if f[1] == "delivered"]
    assert len(delivered) == 1 and delivered[0][2] == "2" and 0 <= float(delivered[0][3]) < 5  # two items, one wake-up
    out = subprocess.run([sys.executable, str(REPORT), str(tmp_path), "--stage", "asr"], capture_output=True, text=True,
                         check=True).stdout
    assert "event loop: 1 deliveries of step outputs" in out
    assert "crossing to transcribe: mean" in out and "(n=1)" in out
    assert "asr submit -> first_output" in out
    assert "asr steps with prompts: 1, mean 20.0 ms, p95 20.0, launched after" in out
    assert "of them waiting for the device: mean 15.0 ms" in out and "decodes only: 1, mean 4.0 ms, p95 4.0" in out
