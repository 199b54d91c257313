"""The shared Qwen3 backbone against transformers' Qwen3, and paged-cache decode against full prefill."""

import torch
from transformers import Qwen3Config as HFQwen3Config, Qwen3ForCausalLM

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.models.qwen3 import Qwen3Config, Qwen3Model


def _tiny_pair():
    torch.manual_seed(0)
    hf_cfg = HFQwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    ref = Qwen3ForCausalLM(hf_cfg).eval()
    ours = Qwen3Model(Qwen3Config.from_hf(hf_cfg.to_dict())).eval()
    sd = {k.removeprefix("model."): v for k, v in ref.state_dict().items() if k.startswith("model.layers") or k == "model.norm.weight"}
    ours.load_state_dict(sd)
    return ref, ours


def test_prefill_matches_transformers_for_mixed_lengths():
    ref, ours = _tiny_pair()
    seqs = [torch.randint(0, 300, (n,)) for n in (7, 3, 11)]
    with torch.no_grad():
        flat = torch.cat(seqs)
        positions = torch.cat([torch.arange(len(s)) for s in seqs])
        hidden = ours(ref.model.embed_tokens(flat), positions, AttentionMetadata.prefill([len(s) for s in seqs]))
        logits = ref.lm_head(hidden)
        off = 0
        for s in seqs:
            expect = ref(s[None]).logits[0]
            assert torch.allclose(logits[off:off + len(s)], expect, atol=1e-5)
            off += len(s)


def test_paged_decode_matches_prefill():
    ref, ours = _tiny_pair()
    block_size, num_blocks = 4, 16
    for attn in ours.attention_layers():
        attn.k_cache = torch.zeros(num_blocks, block_size, 2, 16)
        attn.v_cache = torch.zeros(num_blocks, block_size, 2, 16)
    seq = torch.randint(0, 300, (10,))
    table = torch.tensor([[5, 2, 9]], dtype=torch.int32)  # scattered blocks on purpose
    slots = lambda pos: torch.tensor([int(table[0, p // block_size]) * block_size + p % block_size for p in pos])
    emb = ref.model.embed_tokens
    with torch.no_grad():
        full = ours(emb(seq), torch.arange(10), AttentionMetadata.prefill([10]))
        # prefill 6 tokens into the cache, then decode the remaining 4 one at a time
        meta = AttentionMetadata(torch.tensor([0, 6], dtype=torch.int32), [6], [0], slots(range(6)), table)
        out = [ours(emb(seq[:6]), torch.arange(6), meta)]
        for p in range(6, 10):
            meta = AttentionMetadata(torch.tensor([0, 1], dtype=torch.int32), [1], [p], slots([p]), table)
            out.append(ours(emb(seq[p:p + 1]), torch.tensor([p]), meta))
    assert torch.allclose(torch.cat(out), full, atol=1e-5)

