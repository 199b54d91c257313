"""A Triton kernel variant made after the warm start is counted and timed as `serving` (layers/kernel_compiles.py).
Skipped without CUDA."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_a_kernel_first_launched_after_the_warm_start_counts_as_serving(monkeypatch):
    import triton
    import triton.language as tl

    from aura_omni.layers import kernel_compiles

    monkeypatch.setattr(kernel_compiles, "_ready", False)
    monkeypatch.setattr(triton.knobs.runtime, "jit_cache_hook", None)
    monkeypatch.setattr(triton.knobs.runtime, "jit_post_compile_hook", None)
    monkeypatch.setattr(kernel_compiles, "_watching", False)
    assert kernel_compiles.watch()

    @triton.jit
    def _plus_one(x_ptr, n, BLOCK: tl.constexpr):  # defined here: never compiled before in this process
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

    x = torch.zeros(100, device="cuda")
    before = kernel_compiles.snapshot()
    kernel_compiles.mark_ready()
    _plus_one[(1,)](x, 100, BLOCK=128)
    _plus_one[(1,)](x, 100, BLOCK=128)  # the same variant: made once
    after = kernel_compiles.snapshot()
    assert after["serving"][0] - before["serving"][0] == 1 and after["serving"][1] > before["serving"][1]
    assert float(x.sum()) == 200.0
