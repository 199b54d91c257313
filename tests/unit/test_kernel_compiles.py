"""layers/kernel_compiles.py: Triton kernel variants made before the warm start ended are counted as such, later ones
as `serving`, timed and logged as warnings (a stall to explain). Triton's hooks are called here as Triton calls them
(keyword arguments); tests/gpu/test_kernel_compiles_cuda.py compiles a real kernel."""

import logging
import threading

import pytest

from aura_omni.layers import kernel_compiles


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(kernel_compiles, "_totals", {phase: [0, 0.0] for phase in kernel_compiles.PHASES})
    monkeypatch.setattr(kernel_compiles, "_started", {})
    monkeypatch.setattr(kernel_compiles, "_ready", False)


def _make(key: str, desc: str) -> None:
    assert kernel_compiles._before(key=key, repr=desc, fn=None, compile={}, is_manual_warmup=False,
                                   already_compiled=False) is None  # a true value would make Triton skip it
    kernel_compiles._after(key=key, repr=desc, fn=None, compile={}, is_manual_warmup=False, already_compiled=False)


def test_variants_are_counted_by_phase_and_those_made_while_serving_are_warned(fresh, caplog):
    _make("a", "_rmsnorm_kernel(n_cols: i32:16)")
    assert kernel_compiles.snapshot()["warm_start"][0] == 1 and kernel_compiles.snapshot()["serving"] == (0, 0.0)
    kernel_compiles.mark_ready()
    with caplog.at_level(logging.WARNING, logger="aura_omni.layers.kernel_compiles"):
        done = [threading.Thread(target=_make, args=(f"b{i}", f"_paged_prefill_kernel(stride_btb: i32) #{i}"))
                for i in range(3)]  # stage threads make variants concurrently
        for t in done:
            t.start()
        for t in done:
            t.join()
    serving = kernel_compiles.snapshot()["serving"]
    assert serving[0] == 3 and serving[1] >= 0 and kernel_compiles._started == {}
    assert caplog.text.count("made while serving") == 3 and "_paged_prefill_kernel(stride_btb: i32) #2" in caplog.text


def test_watch_without_triton_says_so(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("no triton")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(kernel_compiles, "_watching", False)
    monkeypatch.setattr(builtins, "__import__", no_triton)
    assert kernel_compiles.watch() is False


def test_watch_installs_the_hooks_once_and_leaves_anothers_alone(monkeypatch):
    """Run with Triton on the path (scripts/test_triton.sh); the main suite's CPU torch has none."""
    runtime = pytest.importorskip("triton").knobs.runtime
    monkeypatch.setattr(runtime, "jit_cache_hook", None)
    monkeypatch.setattr(runtime, "jit_post_compile_hook", None)
    monkeypatch.setattr(kernel_compiles, "_watching", False)
    assert kernel_compiles.watch() and kernel_compiles.watch()  # idempotent
    assert (runtime.jit_cache_hook, runtime.jit_post_compile_hook) == (kernel_compiles._before, kernel_compiles._after)
    monkeypatch.setattr(kernel_compiles, "_watching", False)
    monkeypatch.setattr(runtime, "jit_cache_hook", print)  # another tool's hook
    assert kernel_compiles.watch() is False and runtime.jit_cache_hook is print
