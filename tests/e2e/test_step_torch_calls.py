"""scripts/step_torch_calls.py counts the torch calls of each stage's step on the tiny checkpoints (docs/benchmarks.md,
session 39): it runs, and the Talker's prompt step and the decode steps after it make no torch call per request (each
call may wait for the interpreter lock behind the other stages' threads)."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "step_torch_calls.py"


def test_the_talkers_steps_make_as_many_torch_calls_for_eight_requests_as_for_two(tiny_dir):
    out = subprocess.run([sys.executable, str(SCRIPT), str(tiny_dir), "--requests", "2", "8"], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    calls = {(int(n), stage): (int(c), then) for n, stage, c, then in
             re.findall(r"^(\d+) requests, (\w+): prompt step (\d+) torch calls, then \[(.*)\]", out, re.M)}
    assert {stage for _, stage in calls} == {"aura", "asr", "talker"}, out
    assert calls[2, "talker"][0] == calls[8, "talker"][0] > 0, out
    # its decode steps (the first one stacks every row's trailing text): one frame's text row a request, no call each
    assert calls[2, "talker"][1] == calls[8, "talker"][1], out
