"""Capture one CUDA graph the way every graph here is captured.

`fn` first runs outside the graph (`warmups` times: lazy inits, Triton compiles, cuBLAS workspaces must not
happen during capture) on a side stream of the graph's device, which then records the capture: torch's default
capture stream is per process, not per device, so a stage on cuda:1 needs its own.

The capture is thread-local: other stages' threads keep running while a graph is captured lazily during serving
(a vision layout seen twice, Code2Wav's graphs after its state rows grew), and in CUDA's default global mode their
allocations or synchronizations would be refused, and invalidate the capture.
"""

from typing import Any, Callable

import torch

from aura_omni.layers.device import on_device


def capture(fn: Callable[[], Any], device: torch.device, pool=None, warmups: int = 1) -> tuple[torch.cuda.CUDAGraph, Any]:
    """(graph, what `fn` returned during capture: the static outputs its replays overwrite). `pool`: share the
    memory pool of earlier graphs that never replay at the same time."""
    with on_device(device):
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmups):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=side, capture_error_mode="thread_local"):
            out = fn()
    return graph, out
