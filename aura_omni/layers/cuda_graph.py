"""Capture CUDA graphs the way every graph here is captured, each family of graphs on a stream of its own.

`fn` first runs outside the graph (`warmups` times: lazy inits, Triton compiles, cuBLAS workspaces must not
happen during capture) on the capture stream, which then records the capture. The capture is thread-local: other
stages' threads keep running while a graph is captured lazily during serving (a vision layout seen twice, Code2Wav's
graphs after its state rows grew); in CUDA's default global mode their allocations or synchronisations would be
refused and invalidate the capture.

Why a stream of its own (`private_stream`): torch keeps one cuBLAS workspace per (handle, stream), and a captured
GEMM writes into the workspace of its capture stream at every replay. torch's streams come from a pool of 32 per
priority, handed out round-robin, so a fresh `torch.cuda.Stream()` per capture soon returns a stream that an earlier
capture used. Two stages' graphs then shared one workspace and wrote it concurrently from their own streams, and when
a graph was destroyed (the GEMV benchmark's at load, an evicted vision layout) torch freed the workspace of its
capture stream, which other live graphs still wrote into at every replay: whatever later took that memory (step
metadata, KV blocks) was overwritten (pytorch/pytorch#193402 is the same hazard). A step then hangs with the GPU
busy, or computes on garbage (docs/reliability.md has the hang this explained). Hence the rules:
- a family of graphs (those replayed only one after another, on one stage's thread) captures on one private stream;
- a graph is reset before its stream captures again (`reset`), and a stream goes back (`release_stream`) only once
  every graph captured on it is reset.
Stage streams (`device.stage_stream`) are private streams too.
"""

import threading
import weakref
from typing import Any, Callable

import torch

from aura_omni.layers.device import on_device, private_stream, release_stream  # noqa: F401 - the graph families' API


def capture(fn: Callable[[], Any], device: torch.device, stream: torch.cuda.Stream, pool=None,
            warmups: int = 1) -> tuple[torch.cuda.CUDAGraph, Any]:
    """(graph, what `fn` returned during capture: the static outputs its replays overwrite). `stream`: the family's
    private stream. `pool`: share the memory pool of earlier graphs that never replay at the same time."""
    with on_device(device):
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(warmups):
                fn()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with _one_capture_at_a_time, torch.cuda.graph(graph, pool=pool, stream=stream,
                                                       capture_error_mode="thread_local"):
            out = fn()
    return graph, out


# torch.cuda.graph begins each capture with a device-wide synchronize, which CUDA refuses while any stream of the
# process is capturing: two stages capturing at once (stages load in parallel; a lazy capture beside a background one)
# would fail the second ("operation not permitted when stream is capturing"). Captures take milliseconds; the warm-up
# runs before them (compiles) still overlap.
_one_capture_at_a_time = threading.Lock()


def reset(graphs) -> None:
    """Reset graphs (their memory and their capture stream's cuBLAS workspaces go now, not at garbage collection),
    before their stream captures anything again. Drop every reference to them too before it does: torch may also
    clear the workspaces when a graph object is destroyed."""
    for graph in graphs:
        graph.reset()


def owns(owner: Any, graphs: dict, streams: list) -> weakref.finalize:
    """When `owner` (a family) is collected, or the returned finalizer is called (once, whichever comes first): `drop`
    the graphs in `graphs`, then give the capture streams in `streams` back (a list the family may add to). Families
    live as long as their stage, so this matters for processes that build many (tests, benchmarks)."""
    return weakref.finalize(owner, _reset_and_release, graphs, streams)


def drop(graphs: dict) -> None:
    """Reset and destroy every graph in `graphs` (values: a graph, or a tuple or record holding one first or as
    `.graph`), before their stream captures again or goes back."""
    reset(v if isinstance(v, torch.cuda.CUDAGraph) else getattr(v, "graph", None) or v[0] for v in graphs.values())
    graphs.clear()


def _reset_and_release(graphs: dict, streams: list) -> None:
    drop(graphs)
    for stream in streams:
        release_stream(stream)
