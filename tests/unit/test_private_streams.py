"""Private CUDA streams (layers/device.py): torch's pool hands its 32 streams per priority out round-robin; a stage or
a graph family must never get a stream that another holds (they would share its cuBLAS workspace,
layers/cuda_graph.py). Runs on the CPU against a stand-in for torch's pool."""

import contextlib
import itertools
from types import SimpleNamespace

import pytest
import torch

from aura_omni.layers import device as device_module


def fake_pool(levels=(0, -1)):
    """torch.cuda.Stream as its pool behaves: 32 handles per priority level, handed out round-robin."""
    turn = {p: itertools.cycle(range(32)) for p in levels}

    def stream(device=None, priority=0):
        p = min(max(priority, levels[-1]), levels[0])
        return SimpleNamespace(device_index=0, cuda_stream=1000 * (1 - p) + next(turn[p]))

    stream.priority_range = lambda: (levels[0], levels[-1])
    stream.turn = turn
    return stream


@pytest.fixture
def pool(monkeypatch):
    fake = fake_pool()
    monkeypatch.setattr(torch.cuda, "Stream", fake, raising=False)
    monkeypatch.setattr(device_module, "_held", set())
    monkeypatch.setattr(device_module, "on_device", lambda d: contextlib.nullcontext())
    return fake


def test_streams_handed_out_are_never_shared_and_spill_to_the_other_priority(pool):
    taken = [device_module.private_stream("cuda:0", priority=-1)]
    for _ in range(31):
        next(pool.turn[0])  # torch itself drew from the pool in between
        taken.append(device_module.private_stream("cuda:0"))
    assert taken[0].cuda_stream >= 2000  # the high-priority level the stage asked for
    assert len({s.cuda_stream for s in taken}) == 32
    more = [device_module.private_stream("cuda:0") for _ in range(32)]  # level 0 runs out: then level -1's
    assert len({s.cuda_stream for s in taken + more}) == 64
    assert sum(s.cuda_stream >= 2000 for s in taken + more) == 32
    with pytest.raises(RuntimeError, match="every CUDA stream"):
        device_module.private_stream("cuda:0")


def test_a_released_stream_is_handed_out_again(pool):
    streams = [device_module.private_stream("cuda:0", priority=p) for p in (0, -1) for _ in range(32)]
    device_module.release_stream(streams[5])
    assert device_module.private_stream("cuda:0").cuda_stream == streams[5].cuda_stream
