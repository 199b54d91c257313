"""Device placement helpers.

`on_device`: make a tensor's GPU the current CUDA device for work that reads the current device. Triton
launches, CUDA-graph capture and `torch.cuda.current_stream()` use the thread's current device, not the device
of the tensors involved, so a stage placed on cuda:1 (deploy `devices: "1"`) would launch on cuda:0. Plain torch
ops do not need this.

`upload_async`: a host tensor to the GPU without waiting for the work already queued there.

`download`: a GPU result to the host through pinned memory, waited on with an event.

`wait_event` / `device_wait_s`: a stage thread's waits for its GPU results, summed per thread, so a stage loop can say
how much of each step waited for the device (the rest is the host's: launches, scheduling, the interpreter lock).

`private_stream`: a stream of torch's pool that no stage or CUDA-graph family shares (layers/cuda_graph.py).

`stage_stream` / `on_stream`: a CUDA stream of a stage's own, for a stage whose inputs and outputs cross on the host
(the ASR stage: audio in, token ids out), so its kernels neither queue behind the other stages' on a shared GPU nor
race them. Per stage (EngineConfig.stage_stream, deploy `kernels.stage_stream`); the process default (aura_omni/env.py)
can keep every stage on the default stream (A/B benchmarks).
"""

import contextlib
import functools
import threading
import time

import numpy as np
import torch



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
    stream = private_stream(device, priority)  # never one that a graph family or another stage has
    stream.wait_stream(torch.cuda.current_stream(device))
    return stream


_POOL = 32  # torch's streams per priority level and device (c10 kStreamsPerPool)
_streams_lock = threading.Lock()
_held: set[tuple[int, int]] = set()  # (device index, stream handle) of every private stream handed out


def private_stream(device: torch.device, priority: int = 0) -> torch.cuda.Stream:
    """A stream from torch's pool that no other holder of a private stream has (stages and CUDA-graph families:
    layers/cuda_graph.py says why they must not share one): of `priority`, else of another
    level once its 32 are taken (a capture stream's priority does not matter)."""
    device = torch.device(device)
    least, greatest = torch.cuda.Stream.priority_range()
    levels = [priority] + [p for p in range(least, greatest - 1, -1) if p != priority]
    with _streams_lock, on_device(device):
        for p in levels:
            for _ in range(2 * _POOL):  # round-robin: every stream of the level within _POOL draws
                stream = torch.cuda.Stream(device, priority=p)
                key = (stream.device_index, stream.cuda_stream)
                if key not in _held:
                    _held.add(key)
                    return stream
    raise RuntimeError(f"every CUDA stream of torch's pool on {device} is taken by a stage or a graph family "
                       f"({len(_held)} held): too many stages on one GPU")


def release_stream(stream: torch.cuda.Stream | None) -> None:
    """Give back a private stream once every graph captured on it has been reset."""
    if stream is not None:
        with _streams_lock:
            _held.discard((stream.device_index, stream.cuda_stream))


def on_stream(stream: "torch.cuda.Stream | None"):
    """Context: the thread's work goes to `stream` while inside (no-op for None). Every tensor a stage makes in here
    belongs to the stream (the caching allocator reuses its memory only after the stream's work on it), so a stage
    must take device tensors from outside only with an event wait and hand out host data only."""
    return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)


def upload_async(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` (host) on `device`, without the host waiting: a plain copy from pageable memory waits for every kernel
    queued before it, which would undo an engine step queued ahead (async scheduling). Staged through pinned memory,
    whose caching allocator keeps the block until the copy has run."""
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def upload(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Several small int arrays to the device in one copy; returns device views in the same dtypes.
    Each view starts 16-byte aligned: Triton specialises kernels on pointer alignment, so a view whose
    alignment changed with the step's shape (e.g. the number of sequences) would cost a recompile."""
    sizes = [-(-a.nbytes // 16) * 16 for a in arrays]
    blob = np.zeros(sum(sizes), dtype=np.uint8)
    at = 0
    for a, size in zip(arrays, sizes):
        blob[at:at + a.nbytes] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        at += size
    dev = upload_async(torch.from_numpy(blob), device)
    out, at = [], 0
    for a, size in zip(arrays, sizes):
        t = dev[at:at + a.nbytes].view(getattr(torch, a.dtype.name))
        out.append(t if a.ndim == 1 else t.view(a.shape))  # (each torch call may wait for the interpreter lock)
        at += size
    return out


def upload_into(dst: torch.Tensor, t: torch.Tensor) -> None:
    """`dst.copy_(t)`; from the host to a GPU without the host waiting (as `upload_async`), and `t` may be reused at
    once."""
    if dst.device.type != "cuda" or t.device.type != "cpu":
        dst.copy_(t)
    else:
        dst.copy_(t.pin_memory(), non_blocking=True)


def on_first_tensor_device(fn):
    """Decorator for kernel launchers: run with the first argument's device current."""
    @functools.wraps(fn)
    def wrapper(x: torch.Tensor, *args, **kwargs):
        with on_device(x.device):
            return fn(x, *args, **kwargs)
    return wrapper


def download(t: torch.Tensor) -> np.ndarray:
    """`t.cpu().numpy()`, for a stage's GPU result that the host waits for (Code2Wav's samples). A plain `.cpu()`
    copies into pageable memory: the driver stages it through its own buffers, synchronously, on the calling thread,
    while the other stages' threads on this GPU launch their steps. Here the copy goes by DMA into a block of the
    caching pinned allocator and the thread waits on an event. The array is a view of that block, which stays taken
    while any slice of the array lives: copy out what is kept, so the block goes back to the allocator at once (a
    new pinned allocation synchronises the whole device)."""
    if t.device.type != "cuda":
        return t.cpu().numpy()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    wait_event(done)
    return host.numpy()


_waits = threading.local()


def wait_event(event: "torch.cuda.Event") -> None:
    """`event.synchronize()`, its wait added to this thread's `device_wait_s`."""
    start = time.perf_counter()
    event.synchronize()
    _waits.total = getattr(_waits, "total", 0.0) + time.perf_counter() - start


def device_wait_s() -> float:
    """Seconds this thread has waited in `wait_event` so far."""
    return getattr(_waits, "total", 0.0)
