"""Device placement helpers.

`on_device`: make a tensor's GPU the current CUDA device for work that reads the current device. Triton
launches, CUDA-graph capture and `torch.cuda.current_stream()` use the thread's current device, not the device
of the tensors involved, so a stage placed on cuda:1 (deploy `devices: "1"`) would launch on cuda:0. Plain torch
ops do not need this.

`upload_async`: a host tensor to the GPU without waiting for the work already queued there.

`stage_stream` / `on_stream`: a CUDA stream of a stage's own, for a stage whose inputs and outputs cross on the host
(the ASR stage: audio in, token ids out), so its kernels neither queue behind the other stages' on a shared GPU nor
race them. Per stage (EngineConfig.stage_stream, deploy `kernels.stage_stream`); `AURA_OMNI_STAGE_STREAMS=0` is the
process default that keeps every stage on the default stream (A/B benchmarks).
"""

import contextlib
import functools

import torch

STAGE_STREAMS_ENV = "AURA_OMNI_STAGE_STREAMS"


def on_device(device: torch.device):
    """Context: `device` is current while inside (no-op on CPU or when it already is)."""
    device = torch.device(device)
    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def stage_stream(device: torch.device, priority: int = 0, enabled: bool = True) -> "torch.cuda.Stream | None":
    """A stream of its own on `device` (None on CPU or when not `enabled`) that first waits for the work queued so
    far (the weights' upload). `priority` < 0 is served first when SMs free up; CUDA clamps it to the device's range."""
    device = torch.device(device)
    if device.type != "cuda" or not enabled:
        return None
    stream = torch.cuda.Stream(device, priority=priority)
    stream.wait_stream(torch.cuda.current_stream(device))
    return stream


def on_stream(stream: "torch.cuda.Stream | None"):
    """Context: the thread's work goes to `stream` while inside (no-op for None). Every tensor a stage makes in here
    belongs to the stream (the caching allocator reuses its memory only after the stream's work on it), so a stage
    must take device tensors from outside only with an event wait and hand out host data only."""
    return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)


def upload_async(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` (host) on `device`, without the host waiting: a plain copy from pageable memory waits for every kernel
    queued before it, which would undo an engine step queued ahead (async scheduling). Staged through pinned memory,
    whose caching allocator keeps the block until the copy has run."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def on_first_tensor_device(fn):
    """Decorator for kernel launchers: run with the first argument's device current."""
    @functools.wraps(fn)
    def wrapper(x: torch.Tensor, *args, **kwargs):
        with on_device(x.device):
            return fn(x, *args, **kwargs)
    return wrapper
