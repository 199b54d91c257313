"""GPU errors after which this process cannot use its GPU again.

A device-side assert, an illegal memory access or a launch failure poisons the CUDA context: every later call of
every thread fails with the same error, so retrying the step or restarting a stage loop only fails again. The stage
loops treat one as fatal (the loop goes down and is not restarted, `/health` says `device_lost`) and `aura-omni
serve` then exits with status 1 so that its supervisor (systemd, Kubernetes) starts a fresh process.
"""

FATAL_CUDA_ERRORS = (
    "device-side assert triggered",
    "an illegal memory access was encountered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
    "uncorrectable ECC error",
    "hardware stack error",
    "invalid program counter",
)


def is_device_lost(error: BaseException | None) -> bool:
    """Whether `error`, or an error it was raised from, is a CUDA error that poisons the context."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if isinstance(error, RuntimeError) and "CUDA error" in text and any(m in text for m in FATAL_CUDA_ERRORS):
            return True
        error = error.__cause__ or error.__context__
    return False
