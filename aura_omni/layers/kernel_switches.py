"""Which fast kernels the running stage may use: set per stage (EngineConfig, from the deploy file's `kernels:`), read
where kernels are chosen and launched.

Model code that launches kernels has no handle on its stage, so a stage's switches travel in a context variable: an
engine's runner enters its stage's `KernelSwitches` around everything it runs (start-up checks, warm-ups and graph
capture, every step), and so does other stage work (AURA's vision encoder). Two stages, each on its own threads, keep
their own switches, and a graph keeps the choice made when it was captured. Outside any stage the process default
applies: every kernel on, unless `AURA_OMNI_GEMV=0` / `AURA_OMNI_PDL=0` (A/B runs).
"""

import contextlib
import os
from contextvars import ContextVar
from dataclasses import dataclass

GEMV_ENV = "AURA_OMNI_GEMV"  # "0": cuBLAS + separate norm/SiLU kernels at small M
PDL_ENV = "AURA_OMNI_PDL"  # "0": Triton kernels launched without programmatic dependent launch


def env_default(name: str) -> bool:
    """A process-wide default switch: on unless the variable is "0"."""
    return os.environ.get(name, "1") != "0"


@dataclass(frozen=True)
class KernelSwitches:
    fast_attention: bool = True  # flash / Triton attention and the fused Triton layers (off: plain torch)
    gemv: bool = True  # one-row Triton GEMVs, on top of the fused layers
    pdl: bool = True  # programmatic dependent launch of our Triton kernels (sm_90+)

    @classmethod
    def resolve(cls, fast_attention: bool = True, gemv: bool | None = None, pdl: bool | None = None) -> "KernelSwitches":
        """None: the process default."""
        return cls(fast_attention, env_default(GEMV_ENV) if gemv is None else gemv,
                   env_default(PDL_ENV) if pdl is None else pdl)


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
