"""Engine decode benchmark: step time vs batch size against the memory-bandwidth floor.

    python benchmarks/engine_bench.py                 # H200: Qwen3-1.7B- and 8B-shaped LMs, bf16, batches 1 8 32 64
    python benchmarks/engine_bench.py --tiny          # CPU smoke run (CI): tiny shapes, a few steps
    python benchmarks/engine_bench.py --eager         # without CUDA graphs

Backbones get random weights (like `--load-format dummy`). Each row runs B requests with a
`--context`-token prompt through the real engine (scheduler, paged KV, sampler, CUDA graphs), then
times `--steps` decode steps. The floor is the bytes a decode step must read (backbone + LM head
weights; the KV cache read is reported separately) divided by the H200's 4.8 TB/s.
The Talker section times one audio frame through the Talker engine (engine/talker_adapter.py: a
backbone decode step plus one frame-decoder graph with the code predictor's 15 sub-steps) at batch
1, 8, 32, and the frame decoder alone (`predictor_ms`).
Prints one JSON object per row, then a table.
"""

import argparse
import json
import time

import torch
from torch import nn

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.layers import pdl
from aura_omni.models.qwen3 import Qwen3Config, Qwen3Model

H200_BANDWIDTH = 4.8e12  # bytes/s, NVIDIA H200 SXM spec (HBM3e)
VOCAB = 151936  # Qwen3 / Qwen3-VL text vocabulary

SHAPES = {
    # Qwen/Qwen3-1.7B config.json (tied embeddings)
    "qwen3-1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=6144, vocab=VOCAB),
    # Qwen3-VL-8B text_config (the AURA LM)
    "aura-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=128, intermediate_size=12288, vocab=VOCAB),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, intermediate_size=128, vocab=300),
}


class BenchLM(nn.Module):
    """Random-weight causal LM with the wrapper contract (backbone, embed_tokens, compute_logits)."""

    def __init__(self, shape: dict, device: torch.device, dtype: torch.dtype):
        super().__init__()
        shape = dict(shape)
        vocab = shape.pop("vocab")
        with torch.device("meta"):
            self.backbone = Qwen3Model(Qwen3Config(**shape))
            self.embed = nn.Embedding(vocab, shape["hidden_size"])
            self.lm_head = nn.Linear(shape["hidden_size"], vocab, bias=False)
        self.to_empty(device=device)
        self.to(dtype)
        gen = torch.Generator(device=device).manual_seed(0)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.fill_(1.0)
                else:
                    p.normal_(0, 0.02, generator=gen)
        self.backbone.rotary.__init__(shape["head_dim"], self.backbone.config.rope_theta)  # meta buffers -> real
        self.backbone.rotary.to(device)
        self.eval()

    def embed_tokens(self, ids):
        return self.embed(ids)

    def compute_logits(self, hidden):
        return self.backbone.logits(hidden, self.lm_head.weight)

    def decode_weight_bytes(self) -> int:
        params = list(self.backbone.parameters()) + list(self.lm_head.parameters())
        return sum(p.numel() * p.element_size() for p in params)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_lm(name: str, args, device: torch.device, dtype: torch.dtype) -> list[dict]:
    model = BenchLM(SHAPES[name], device, dtype)
    cfg = model.backbone.config
    rows = []
    max_len = args.context + args.steps + 8
    for batch in args.batches:
        blocks = batch * -(-max_len // args.block_size) + 1
        engine = LLMEngine(model, EngineConfig(
            max_model_len=max_len, max_num_seqs=max(batch, 1), max_num_batched_tokens=max(args.context * batch, 64),
            block_size=args.block_size, num_kv_blocks=blocks, enforce_eager=args.eager,
            cuda_graph_batch_sizes=[batch], cuda_graph_max_seq_len=max_len, async_scheduling=not args.sync_steps),
            name=name)
        params = SamplingParams(temperature=0, max_tokens=args.steps + 4, ignore_eos=True)
        gen = torch.Generator().manual_seed(batch)
        for i in range(batch):
            engine.add_request(str(i), torch.randint(0, SHAPES[name]["vocab"], (args.context,), generator=gen).tolist(),
                               params)
        engine.step()  # prefill of every prompt
        for _ in range(2):
            engine.step()  # warm-up decode steps
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            outs = engine.step()
            assert len(outs) == batch
        sync(device)
        step_s = (time.perf_counter() - t0) / args.steps
        weights = model.decode_weight_bytes()
        kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * model.lm_head.weight.element_size() \
            * batch * (args.context + args.steps)
        floor = weights / H200_BANDWIDTH
        rows.append(dict(model=name, batch=batch, context=args.context, step_ms=round(step_s * 1e3, 3),
                         floor_ms=round(floor * 1e3, 5), vs_floor=round(step_s / floor, 2),
                         floor_with_kv_ms=round((weights + kv) / H200_BANDWIDTH * 1e3, 5),
                         tokens_per_s=round(batch / step_s, 1), graphs=engine.runner.graphs is not None,
                         async_scheduling=engine.async_steps, one_row_gemv=model.backbone._gemv_wins,
                         pdl=pdl.enabled(device), device=str(device), dtype=str(dtype).removeprefix("torch.")))
        print(json.dumps(rows[-1]), flush=True)
        engine.runner.shutdown()
        del engine
    return rows


def bench_talker(args, device: torch.device, dtype: torch.dtype) -> list[dict]:
    """Per-frame time of the Talker through its engine (engine/talker_adapter.py): one engine step = the
    backbone decode (CUDA graph) + the frame decoder (codec head, code0 rules, 15 code-predictor steps,
    next-input embedding: one CUDA graph). Also the frame decoder alone (`predictor_ms`)."""
    from aura_omni.stages.talker import TalkerEngine
    from aura_omni.models.qwen3_tts.checkpoint_config import TalkerConfig
    from aura_omni.models.qwen3_tts.generate import TalkerInput
    from aura_omni.models.qwen3_tts.sampling import SamplingParams as TalkerSampling
    from aura_omni.models.qwen3_tts.talker import Talker

    if args.tiny:
        backbone = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, intermediate_size=128)
        cp = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  intermediate_size=64, vocab_size=2048, num_code_groups=16)
        extra = dict(text_hidden_size=32, text_vocab_size=300)
    else:  # Qwen3-TTS-12Hz-1.7B talker_config (../shared/reference/qwen3_tts.md §1.1)
        backbone = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                        head_dim=128, intermediate_size=6144)
        cp = dict(hidden_size=1024, num_hidden_layers=5, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=3072, vocab_size=2048, num_code_groups=16)
        extra = dict(text_hidden_size=2048, text_vocab_size=VOCAB)
    cfg = TalkerConfig.from_dict({**backbone, **extra, "vocab_size": 3072, "rope_theta": 1e6,
                                  "code_predictor_config": {**cp, "rope_theta": 1e6}})
    with torch.device("meta"):
        talker = Talker(cfg)
    talker.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in talker.named_parameters():
            p.fill_(1.0) if "norm" in name else p.normal_(0, 0.02)
    for m in talker.modules():  # rotary inv_freq buffers were on meta
        if hasattr(m, "inv_freq"):
            m.__init__(m.head_dim, cfg.backbone.rope_theta)
            m.to(device)
    talker.eval()
    h = cfg.hidden_size
    rows = []
    frames = 4 if args.tiny else 30
    prompt = 16
    batches = [int(b) for b in args.talker_batches.split(",")] if args.talker_batches else ([1, 2] if args.tiny else [1, 8, 32])
    for batch in batches:
        max_len = prompt + frames + 8
        engine = TalkerEngine(talker, torch.zeros(h, device=device, dtype=dtype), EngineConfig(
            max_model_len=max_len, max_num_seqs=batch, max_num_batched_tokens=prompt * batch, block_size=args.block_size,
            num_kv_blocks=batch * -(-max_len // args.block_size) + 1, enforce_eager=args.eager,
            cuda_graph_batch_sizes=[batch], cuda_graph_max_seq_len=max_len, async_scheduling=not args.sync_steps))
        sampling = dict(greedy=dict(do_sample=False, subtalker_dosample=False),
                        sampled=dict(do_sample=True, subtalker_dosample=True))[args.talker_sampling]
        params = TalkerSampling(**sampling, min_new_tokens=10_000, max_new_tokens=10_000)  # never stops
        for i in range(batch):
            engine.add_request(f"bench-{i}", TalkerInput(torch.randn(prompt, h, device=device, dtype=dtype) * 0.02,
                                                         torch.zeros(0, h, device=device, dtype=dtype), params, seed=i))
        engine.engine.step()  # prefill
        engine.engine.step()  # warm-up frame
        sync(device)
        t0 = time.perf_counter()
        for _ in range(frames):
            outs = engine.engine.step()
            assert len(outs) == batch and outs[0].new_extras
        sync(device)
        frame_s = (time.perf_counter() - t0) / frames
        decoder = engine.adapter.decoder
        hidden = torch.randn(batch, h, device=device, dtype=dtype)
        index = torch.tensor([[s.model_state.slot for s in engine.engine.requests.values()], [frames + 2] * batch])
        decoder.run(hidden, index)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(frames):
            decoder.run(hidden, index)
        sync(device)
        predictor_s = (time.perf_counter() - t0) / frames
        rows.append(dict(model="talker-1.7b" if not args.tiny else "talker-tiny", batch=batch,
                         frame_ms=round(frame_s * 1e3, 3), predictor_ms=round(predictor_s * 1e3, 3),
                         realtime_factor=round(frame_s / 0.080, 4), sampling=args.talker_sampling,
                         graphs=decoder.use_graphs, async_scheduling=engine.engine.async_steps, predictor_layers="triton" if getattr(
                             talker.code_predictor.model.layers[0], "is_fused", lambda: False)() else "torch",
                         device=str(device), dtype=str(dtype).removeprefix("torch.")))
        print(json.dumps(rows[-1]), flush=True)
        engine.engine.runner.shutdown()
        del engine, decoder
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, few steps (CPU smoke run)")
    ap.add_argument("--models", default=None, help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--batches", default=None, help="comma list, default 1,8,32,64")
    ap.add_argument("--context", type=int, default=None, help="prompt tokens per request (default 512)")
    ap.add_argument("--steps", type=int, default=None, help="timed decode steps (default 50)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs")
    ap.add_argument("--no-talker", action="store_true")
    ap.add_argument("--talker-only", action="store_true", help="only the Talker rows")
    ap.add_argument("--sync-steps", action="store_true",
                    help="each step's tokens are read before the next step is queued (no async scheduling)")
    ap.add_argument("--talker-batches", default=None, help="comma list, default 1,8,32")
    ap.add_argument("--talker-sampling", choices=["greedy", "sampled"], default="sampled")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default bfloat16 on CUDA, float32 on CPU")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    models = args.models.split(",") if args.models else (["tiny"] if args.tiny else ["qwen3-1.7b", "aura-8b"])
    args.batches = [int(b) for b in args.batches.split(",")] if args.batches else ([1, 2] if args.tiny else [1, 8, 32, 64])
    args.context = args.context or (8 if args.tiny else 512)
    args.steps = args.steps or (3 if args.tiny else 50)
    rows = []
    with torch.inference_mode():
        for name in ([] if args.talker_only else models):
            rows += bench_lm(name, args, device, dtype)
        if not args.no_talker:
            rows += bench_talker(args, device, dtype)
    print(f"\n{'model':<14}{'batch':>6}{'ms/step':>10}{'floor ms':>10}{'x floor':>9}{'tok/s':>10}")
    for r in rows:
        if "step_ms" in r:
            print(f"{r['model']:<14}{r['batch']:>6}{r['step_ms']:>10}{r['floor_ms']:>10}{r['vs_floor']:>9}{r['tokens_per_s']:>10}")
        else:
            print(f"{r['model']:<14}{r['batch']:>6}{r['frame_ms']:>10}  ms/frame (x realtime {r['realtime_factor']}), "
                  f"frame decoder {r['predictor_ms']} ms")
    return rows


if __name__ == "__main__":
    main()
