"""A tiny random Qwen3 causal LM for engine tests: transformers' weights loaded into our backbone."""

import torch
from torch import nn
from transformers import Qwen3Config as HFQwen3Config, Qwen3ForCausalLM

from aura_omni.models.qwen3 import Qwen3Config, Qwen3Model

VOCAB = 300


class TinyLM(nn.Module):
    """backbone + embed_tokens + compute_logits, the wrapper contract of docs/architecture.md."""

    def __init__(self, ref: Qwen3ForCausalLM, mrope_section: list[int] | None = None):
        super().__init__()
        cfg = Qwen3Config.from_hf(ref.config.to_dict())
        cfg.mrope_section = mrope_section
        self.backbone = Qwen3Model(cfg).eval()
        sd = {k.removeprefix("model."): v for k, v in ref.state_dict().items()
              if k.startswith("model.layers") or k == "model.norm.weight"}
        self.backbone.load_state_dict(sd)
        self.embed = ref.model.embed_tokens
        self.lm_head = ref.lm_head

    def embed_tokens(self, ids):
        return self.embed(ids)

    def compute_logits(self, hidden):
        return self.lm_head(hidden)


def tiny_reference(seed: int = 0, layers: int = 2) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = HFQwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
                        tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg).eval()


def tiny_lm(seed: int = 0, mrope_section: list[int] | None = None) -> TinyLM:
    return TinyLM(tiny_reference(seed), mrope_section).eval()


def prompts(lengths, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]


def prefix_waves(model) -> list[list[tuple]]:
    """Two waves of (id, prompt ids, MultimodalPrompt or None): mixed lengths, then a prompt whose system prefix
    the first wave cached and a prompt given as embeddings."""
    from aura_omni.engine.sequence import MultimodalPrompt

    system = prompts([13])[0]
    ps = prompts([5, 19, 2, 9], seed=3)
    with torch.no_grad():
        embeds = model.embed_tokens(torch.tensor(ps[1]))
    return [[("a", system + ps[0], None), ("b", ps[1], None), ("c", ps[2], None)],
            [("d", system + ps[3], None), ("e", [], MultimodalPrompt(embeds=embeds))]]


def drive(engine, wave, params) -> dict[str, list[int]]:
    """Run one wave to completion; each request's output tokens."""
    got = {rid: [] for rid, _, _ in wave}
    for rid, ids, mm in wave:
        engine.add_request(rid, ids, params, mm=mm)
    while engine.has_unfinished():
        for o in engine.step():
            got[o.request_id] += o.new_token_ids
    return got
