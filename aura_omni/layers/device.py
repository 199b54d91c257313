"""Device placement helpers.

`on_device`: make a tensor's GPU the current CUDA device for work that reads the current device. Triton
launches, CUDA-graph capture and `torch.cuda.current_stream()` use the thread's current device, not the device
of the tensors involved, so a stage placed on cuda:1 (deploy `devices: "1"`) would launch on cuda:0. Plain torch
ops do not need this.

`upload_async`: a host tensor to the GPU without waiting for the work already queued there.
"""

import contextlib
import functools

import torch


def on_device(device: torch.device):
    """Context: `device` is current while inside (no-op on CPU or when it already is)."""
    device = torch.device(device)
    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


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
