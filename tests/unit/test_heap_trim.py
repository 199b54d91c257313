"""The C heap's free pages go back to the system while the server runs (stages/heap_trim.py)."""

import ctypes
import sys
import threading
import time

import pytest
from fastapi.testclient import TestClient

from aura_omni.deploy import parse_deploy_config
from aura_omni.deploy.schema import DeployConfigError
from aura_omni.pipeline.runtime import Runtime
from aura_omni.stages import heap_trim
from aura_omni.server.app import create_app

glibc = pytest.mark.skipif(not heap_trim.TRIMMER.available, reason="no malloc_trim in this C library")


def _peak_left_behind(blocks: int = 150_000, size: int = 1024) -> int:
    """A peak of small blocks on the heap, all freed but the last (it holds the heap's top, so free() alone can
    give nothing back): the pages of a burst of concurrent work after it ends. Returns the kept block."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    pointers = [libc.malloc(size) for _ in range(blocks)]
    for p in pointers:
        ctypes.memset(p, 1, size)  # touched: resident
    for p in pointers[:-1]:
        libc.free(p)
    return pointers[-1]


@glibc
def test_a_trim_gives_back_what_a_freed_peak_left_resident():
    kept = _peak_left_behind()
    before = heap_trim.resident_bytes()
    released = heap_trim.HeapTrimmer().trim()
    assert released > 100 << 20, f"{released / 2**20:.1f} MiB given back of a ~150 MiB freed peak"
    assert heap_trim.resident_bytes() < before - (100 << 20)
    ctypes.CDLL(None).free(ctypes.c_void_p(kept))


@glibc
def test_the_trimmer_thread_trims_on_its_interval_and_stops():
    trimmer = heap_trim.HeapTrimmer()
    trimmer.start(0.05)
    try:
        deadline = time.monotonic() + 5
        while trimmer.snapshot()[0].count < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert trimmer.snapshot()[0].count >= 2
    finally:
        trimmer.stop()
    assert not any(t.name == "heap-trim" for t in threading.enumerate())
    count = trimmer.snapshot()[0].count
    time.sleep(0.15)
    assert trimmer.snapshot()[0].count == count


def test_the_server_trims_from_its_start_to_its_stop_and_reports_memory_in_metrics():
    deploy = parse_deploy_config({"pipeline": "aura_omni", "heap_trim_interval_s": 0.05,
                                  "stages": [{"stage_id": 0, "model": "x"}]})
    with TestClient(create_app(deploy, "served", runtime=Runtime(deploy, {}))) as client:
        if heap_trim.TRIMMER.available:
            deadline = time.monotonic() + 5
            while heap_trim.TRIMMER.snapshot()[0].count == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert heap_trim.TRIMMER.snapshot()[0].count > 0
        text = client.get("/metrics").text
        assert "aura_omni:heap_trim_seconds_count" in text
        assert "aura_omni:heap_trim_released_bytes_total" in text
        resident = next(line for line in text.splitlines() if line.startswith("aura_omni:resident_memory_bytes "))
        assert float(resident.split()[1]) == pytest.approx(heap_trim.resident_bytes(), rel=0.2)
        in_use = heap_trim.heap_in_use_bytes()
        if in_use is not None:  # glibc
            line = next(line for line in text.splitlines() if line.startswith("aura_omni:heap_in_use_bytes "))
            assert 0 < float(line.split()[1]) < float(resident.split()[1]) * 4
        blocks = next(line for line in text.splitlines() if line.startswith("aura_omni:python_allocated_blocks "))
        assert float(blocks.split()[1]) == pytest.approx(sys.getallocatedblocks(), rel=0.2)
        pinned = heap_trim.pinned_host_bytes()  # None without CUDA: nothing pinned to report
        assert ("aura_omni:pinned_host_memory_bytes" in text) == (pinned is not None)
    assert not any(t.name == "heap-trim" for t in threading.enumerate())


def test_a_negative_interval_is_refused_with_its_key_named():
    with pytest.raises(DeployConfigError, match="heap_trim_interval_s"):
        parse_deploy_config({"pipeline": "aura_omni", "heap_trim_interval_s": -1,
                             "stages": [{"stage_id": 0, "model": "x"}]})
