"""Giving the C heap's free pages back to the system while serving.

glibc's malloc keeps memory that was freed inside its heaps (one per arena; threads that contend get arenas of their
own) and gives back only what lies above a heap's top. So each new peak of concurrent work (many sessions committing
at once, a burst of long replies) raises resident memory, and the pages freed after it stay resident: under a soak
the resident size climbs in steps that never come down (docs/reliability.md), although no object outlives its request.
`malloc_trim(0)` returns every whole free page of every arena (madvise), the pages that peak left behind.

The process's one `TRIMMER` (malloc is the process's) trims on a thread of its own every `heap_trim_interval_s` (a
deploy key; 0: never), from the server's start to its stop. The call runs outside the interpreter lock (ctypes lets go
of it) and holds one arena's lock at a time; it is timed (`aura_omni:heap_trim_seconds`) and what it gave back is
counted (`aura_omni:heap_trim_released_bytes`). Other C libraries (musl, macOS) have no `malloc_trim`: nothing runs
there.
"""

import ctypes
import logging
import os
import threading
import time

from .loop_metrics import LatencyHistogram, LatencySnapshot

log = logging.getLogger(__name__)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _libc(name: str, restype, argtypes=()):
    """The C library's function `name`, or None where this C library has none."""
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.restype, function.argtypes = restype, list(argtypes)
    return function


def resident_bytes() -> int:
    """This process's resident set size (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]


_MALLINFO2 = _libc("mallinfo2", _MallInfo2)  # glibc 2.33 and later


def heap_in_use_bytes() -> int | None:
    """Bytes the C heap has handed out and not had back (its arenas' and its mmapped blocks'): what the process's
    C code holds, as opposed to freed pages a trim can return. None without glibc's mallinfo2."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd


def pinned_host_bytes() -> int | None:
    """Page-locked host memory held by torch's pinned-memory allocator (resident, and never trimmed: its blocks are
    cached for reuse), or None where CUDA is not in use."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.host_memory_stats().get("allocated_bytes.current", 0))


class HeapTrimmer:
    """Trims the C heap every `interval_s` seconds, from `start(interval_s)` until `stop()`."""

    def __init__(self):
        self.pauses = LatencyHistogram()
        self.released_bytes = 0
        self._trim = _libc("malloc_trim", ctypes.c_int, [ctypes.c_size_t])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self._trim is not None

    def trim(self) -> int:
        """One trim now; the resident bytes it gave back (0 where there is no malloc_trim)."""
        if self._trim is None:
            return 0
        before, start = resident_bytes(), time.perf_counter()
        self._trim(0)
        took = time.perf_counter() - start
        released = max(0, before - resident_bytes())
        self.pauses.observe(took)
        self.released_bytes += released
        if released >= 16 << 20:
            log.info("heap trim gave back %.0f MiB in %.0f ms", released / 2**20, 1000 * took)
        return released

    def start(self, interval_s: float) -> None:
        if interval_s <= 0 or self._thread is not None:
            return
        if self._trim is None:
            log.info("this C library has no malloc_trim: freed heap pages stay resident")
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), name="heap-trim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def snapshot(self) -> tuple[LatencySnapshot, int]:
        """The trims' durations and the bytes they gave back in all."""
        return self.pauses.snapshot(), self.released_bytes

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.trim()
            except Exception:  # noqa: BLE001 - a failed trim must not end the server's trimming for good
                log.exception("heap trim failed")


TRIMMER = HeapTrimmer()
