"""A real device-side assert on CUDA is what `layers/device_loss.py` takes it for, and a stage loop whose step
raised it goes down for good. In a subprocess: the assert poisons that process's CUDA context. Skipped without CUDA."""

import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

SCRIPT = textwrap.dedent("""
    import torch
    from aura_omni.layers.device_loss import is_device_lost
    from aura_omni.stages.stage_engine import StageOutput, StageUnavailable
    from aura_omni.stages.loop import StageLoop

    class OutOfRange:  # each step indexes past the end of a tensor, on the GPU
        def __init__(self):
            self.pending = []
        def add(self, request_id, request):
            self.pending.append(request_id)
        def abort(self, request_id):
            self.pending = [r for r in self.pending if r != request_id]
        def has_work(self):
            return bool(self.pending)
        def step(self):
            x = torch.zeros(4, device="cuda")
            x[torch.tensor([9], device="cuda")].sum().item()
            return [StageOutput(r, None, True) for r in self.pending]
        def stats(self):
            return {}

    loop = StageLoop(OutOfRange(), "cuda", name="oob")
    try:
        list(loop.run("a", None))
    except StageUnavailable as e:
        print("failed:", e)
    print("lost:", is_device_lost(loop.device_lost), type(loop.device_lost).__name__)
    print("restarted:", loop.restart(), "alive:", loop.alive, "stats:", loop.stats()["device_lost"])
""")


def test_a_real_device_side_assert_takes_the_loop_down_for_good():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert "failed: stage oob is down: its GPU failed" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "lost: True" in out.stdout and "restarted: False alive: False stats: True" in out.stdout
