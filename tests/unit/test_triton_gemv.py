"""The small-M Triton GEMVs (layers/triton_gemv.py) match their torch references, and the fused decoder layers
(GEMV and triton_ops) compute the plain layer's function.

Needs Triton and either CUDA or Triton's interpreter on the CPU (triton_env.py).
"""

import pytest
import torch
from triton_env import DEVICE, fused_layer_model, needs_triton

from aura_omni.layers import triton_gemv
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.models.qwen3 import DeepStack

pytestmark = needs_triton
SHAPES = [(1, 272, 208), (16, 272, 208), (3, 100, 37), (1, 1040, 24)]  # (M, K, N): tile edges, one or many K steps


def _rand(*shape, scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.randn(*shape, generator=gen) * scale).to(DEVICE)


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


@pytest.mark.parametrize("tile", [(2, 64, 4, 3), (8, 128, 8, 1), (4, 512, 4, 2)])  # (BLOCK_N, BLOCK_K, warps, stages)
def test_every_one_row_tile_computes_the_same_fused_gemvs(tile, monkeypatch):
    monkeypatch.setattr(triton_gemv, "_config", lambda *_: (False, 1, *tile))
    k, n = 272, 208  # several K steps (one of them partial) and a partial last column tile for each tile
    x, w, residual = _rand(1, k), _rand(n, k, scale=k ** -0.5), _rand(1, n, seed=1)
    nw, gate_up = _rand(k, scale=0.5, seed=2) + 1, _rand(1, 2 * k, seed=3)
    _close(triton_gemv.gemv(x, w, residual), triton_gemv.ref_gemv(x, w, residual))
    _close(triton_gemv.rms_gemv(x, nw, 1e-6, w), triton_gemv.ref_rms_gemv(x, nw, 1e-6, w))
    _close(triton_gemv.silu_mul_gemv(gate_up, w, residual), triton_gemv.ref_silu_mul_gemv(gate_up, w, residual))


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_gemv_matches_linear(m, k, n):
    x, w, residual = _rand(m, k), _rand(n, k, scale=k ** -0.5), _rand(m, n, seed=1)
    _close(triton_gemv.gemv(x, w), triton_gemv.ref_gemv(x, w))
    _close(triton_gemv.gemv(x, w, residual), triton_gemv.ref_gemv(x, w, residual))


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_rms_gemv_matches_rmsnorm_then_linear(m, k, n):
    x, w, nw = _rand(m, k), _rand(n, k, scale=k ** -0.5), _rand(k, scale=0.5, seed=2) + 1
    _close(triton_gemv.rms_gemv(x, nw, 1e-6, w), triton_gemv.ref_rms_gemv(x, nw, 1e-6, w))


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_silu_mul_gemv_matches_swiglu_down(m, k, n):
    gate_up, w, residual = _rand(m, 2 * k), _rand(n, k, scale=k ** -0.5), _rand(m, n, seed=1)
    _close(triton_gemv.silu_mul_gemv(gate_up, w), triton_gemv.ref_silu_mul_gemv(gate_up, w))
    _close(triton_gemv.silu_mul_gemv(gate_up, w, residual), triton_gemv.ref_silu_mul_gemv(gate_up, w, residual))


@pytest.mark.parametrize("gemv", [True, False], ids=["gemv", "triton_ops"])
def test_fused_layers_match_plain_layer(gemv):
    model = fused_layer_model()
    cfg = model.config
    lens = [1] if gemv else [3, 4]  # the model takes the GEMV layer for one row only
    x, positions = _rand(sum(lens), cfg.hidden_size), torch.cat([torch.arange(n) for n in lens]).to(DEVICE)
    meta = AttentionMetadata.prefill(lens, DEVICE)
    rows = [0] if gemv else [0, 5]
    deepstack = DeepStack(torch.tensor(rows, device=DEVICE), [_rand(len(rows), cfg.hidden_size, seed=4)])
    with torch.no_grad():
        want = model(x, positions, meta, deepstack)
        model.fuse_projections()
        model._gemv_wins = gemv  # what the start-up timing would decide on a GPU
        assert model._gemv(x) == gemv
        cos, sin = model.rotary(positions)
        got = model._fused_forward(x, cos, sin, meta, deepstack)
    _close(got, want)
