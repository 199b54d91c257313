"""Programmatic dependent launch (PDL, Hopper and later) for our Triton kernels.

A decode step at batch 1 is a chain of ~250 short kernels (the code predictor's frame ~600). Without PDL each
kernel's programs start only after the previous kernel has drained, so every boundary costs a launch plus the
previous kernel's tail, when only its last programs still stream memory. Launched with PDL, a kernel's programs
start once every program of the previous kernel has called `gdc_launch_dependents` (ours do so first thing):
they do the work that needs nothing from it (a GEMV loads its first weight tile) and then `gdc_wait` until it has
finished and its writes are visible. CUDA-graph capture keeps these edges, so the decode graphs replay them.

Every kernel launched with PDL must obey, or it races:
- no global read of another kernel's output and no global write before `gdc_wait` (weights are never written,
  so they may be read before it);
- `gdc_wait` in every program, unconditionally: a kernel that has completed then implies that the kernels
  before it have, which later kernels rely on when they read older outputs.

Kernels take a `PDL: tl.constexpr`, start with `begin(PDL)` (or its two steps around their early work) and are
launched with `**flags(device)`. Off on CPU (the interpreter), before sm_90, and for a stage whose switches say so
(`kernels.pdl` in the deploy file; or the process default, aura_omni/env.py: A/B benchmarks: layers/kernel_switches.py).
"""

import functools
import os

import torch

from aura_omni.layers import kernel_switches


try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines and CI
    triton = tl = None
try:
    from triton.language.extra.cuda import gdc_wait  # noqa: F401 - only probes that this Triton has it

    _HAS_GDC = True
except ImportError:
    _HAS_GDC = False

if triton is not None:

    @triton.jit
    def begin(PDL: tl.constexpr):
        """The start of a kernel with nothing to do before the previous kernel's results: let the next kernel
        launch, then wait for the previous one."""
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()


@functools.lru_cache(maxsize=None)
def _supported(device: torch.device) -> bool:
    return (_HAS_GDC and device.type == "cuda" and os.environ.get("TRITON_INTERPRET", "0") != "1"
            and torch.cuda.get_device_capability(device)[0] >= 9)


def enabled(device: torch.device) -> bool:
    return kernel_switches.current().pdl and _supported(torch.device(device))


def flags(device: torch.device) -> dict:
    """Keyword arguments of a kernel launch: the kernel's PDL constexpr and Triton's `launch_pdl` option."""
    return {"PDL": True, "launch_pdl": True} if enabled(device) else {"PDL": False}
