"""Which fast kernels the running stage may use: set per stage (EngineConfig, from the deploy file's `kernels:`), read
where kernels are chosen and launched.

Model code that launches kernels has no handle on its stage, so a stage's switches travel in a context variable: an
engine's runner enters its stage's `KernelSwitches` around everything it runs (start-up checks, warm-ups and graph
capture, every step), and so does other stage work (AURA's vision encoder). Two stages, each on its own threads, keep
their own switches, and a graph keeps the choice made when it was captured. Outside any stage the process default
applies: every kernel on, unless the environment turns one off (aura_omni/env.py: A/B runs).
"""

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass

from aura_omni import env


@dataclass(frozen=True)
class KernelSwitches:
    fast_attention: bool = True  # flash / Triton attention and the fused Triton layers (off: plain torch)
    gemv: bool = True  # one-row Triton GEMVs, on top of the fused layers
    pdl: bool = True  # programmatic dependent launch of our Triton kernels (sm_90+)

    @classmethod
    def resolve(cls, fast_attention: bool = True, gemv: bool | None = None, pdl: bool | None = None) -> "KernelSwitches":
        """None: the process default."""
        process = env.current()
        return cls(fast_attention, process.gemv if gemv is None else gemv, process.pdl if pdl is None else pdl)


_current: ContextVar[KernelSwitches | None] = ContextVar("aura_omni_kernel_switches", default=None)


def current() -> KernelSwitches:
    """The running stage's switches (the process default outside any stage)."""
    switches = _current.get()
    return KernelSwitches.resolve() if switches is None else switches


@contextlib.contextmanager
def using(switches: KernelSwitches):
    """Context: code run inside (this thread, this task) uses `switches`."""
    token = _current.set(switches)
    try:
        yield switches
    finally:
        _current.reset(token)
