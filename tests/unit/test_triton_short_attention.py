"""The one-launch attention of short decode steps (layers/triton_short_attention.py) equals q/k norm + RoPE + KV write
followed by paged decode, alone and inside the fused decoder layer over a real paged cache.

Needs Triton and either CUDA or Triton's interpreter on the CPU (triton_env.py).
"""

import pytest
import torch
from triton_env import DEVICE, fused_layer_model, needs_triton

from aura_omni.layers import attention_backend, triton_short_attention
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.kv_cache import allocate_kv_cache

pytestmark = needs_triton


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hq,hkv,d", [(16, 8, 128), (8, 2, 64), (6, 2, 32)])  # the code predictor's layout first
def test_kernel_matches_the_two_kernel_references(dtype, hq, hkv, d):
    assert triton_short_attention.self_check(DEVICE, dtype, head_dim=d, hq=hq, hkv=hkv) < (
        1e-5 if dtype == torch.float32 else 2e-3)


def test_decode_steps_of_the_fused_layer_match_the_unfused_attention(monkeypatch):
    """Prefill 3 sequences, then 4 decode steps through the fused layers, short attention on and off: same hidden
    states and the same KV pages."""
    model = fused_layer_model()
    cfg = model.config
    model.fuse_projections()
    bs, lens = 4, [5, 1, 9]
    tables = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], dtype=torch.int32, device=DEVICE)
    runs, calls = {}, []
    kernel = triton_short_attention.short_attention
    monkeypatch.setattr(triton_short_attention, "short_attention", lambda *a: calls.append(1) or kernel(*a))
    for short in (False, True):
        monkeypatch.setattr(attention_backend, "short_attention_enabled", lambda x, on=short: on)
        allocate_kv_cache(model.attention_layers(), 12, bs, torch.float32, DEVICE)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(sum(lens), cfg.hidden_size, generator=g).to(DEVICE)
        pos = torch.cat([torch.arange(n) for n in lens]).to(DEVICE)
        slots = torch.cat([tables[i, torch.arange(n) // bs].long() * bs + torch.arange(n, device=DEVICE) % bs
                           for i, n in enumerate(lens)])
        meta = AttentionMetadata.prefill(lens, DEVICE)
        meta.slot_mapping, meta.block_tables = slots, tables
        outs = []
        with torch.no_grad():
            model(x, pos, meta)
            seq = list(lens)
            for _ in range(4):
                at = torch.tensor(seq, device=DEVICE)
                step_slots = tables.long().gather(1, (at // bs)[:, None])[:, 0] * bs + at % bs
                seq = [n + 1 for n in seq]
                step = AttentionMetadata(torch.arange(4, dtype=torch.int32, device=DEVICE), [1] * 3, seq, step_slots,
                                         tables, torch.tensor(seq, dtype=torch.int32, device=DEVICE), max(seq))
                xs = torch.randn(3, cfg.hidden_size, generator=g).to(DEVICE)
                cos, sin = model.rotary(at)
                outs.append(model._fused_forward(xs, cos, sin, step, None))
        runs[short] = outs, [a.k_cache.clone() for a in model.attention_layers()]
    assert len(calls) == 4 * cfg.num_hidden_layers  # every decode step of every layer took it, only when on
    for got, want in zip(runs[True][0], runs[False][0]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for got, want in zip(runs[True][1], runs[False][1]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
