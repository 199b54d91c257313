"""Where a decode step's time goes (CUDA): one engine step split into host work and graph replay, per variant.

    python scripts/profile_decode.py [--models aura-8b,qwen3-1.7b] [--batches 1,64] [--out DIR]

Variants (random bf16 weights, the engine_bench shapes and workload: --context-token prompts):
- fast: the default engine (fused projections, Triton layers + paged decode, whole-step decode graph);
- torch: the same with the Triton kernels off (torch layers and gathered-SDPA decode inside the graph);
- eager: fast kernels, no CUDA graph.
Per row: engine.step() ms, graph replay alone (CUDA events), host = step - replay; and for one eager step
a torch.profiler count of kernels and the top kernels by device time. Prints a compact table; JSON to --out.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.engine_bench import SHAPES, BenchLM  # noqa: E402

from aura_omni.engine.engine_config import EngineConfig  # noqa: E402
from aura_omni.engine.llm_engine import LLMEngine  # noqa: E402
from aura_omni.engine.sampling_params import SamplingParams  # noqa: E402
from aura_omni.layers import attention_backend  # noqa: E402


def engine_for(model, name, batch, context, steps, variant):
    max_len = context + steps + 16
    attention_backend._selected.clear()
    eng = LLMEngine(model, EngineConfig(
        max_model_len=max_len, max_num_seqs=batch, max_num_batched_tokens=max(context * batch, 64),
        num_kv_blocks=batch * -(-max_len // 16) + 1, enforce_eager=variant == "eager",
        fast_attention=variant != "torch", cuda_graph_batch_sizes=[batch], cuda_graph_max_seq_len=max_len), name=name)
    gen = torch.Generator().manual_seed(batch)
    params = SamplingParams(temperature=0, max_tokens=steps + 8, ignore_eos=True)
    for i in range(batch):
        eng.add_request(str(i), torch.randint(0, SHAPES[name]["vocab"], (context,), generator=gen).tolist(), params)
    eng.step()
    for _ in range(3):
        eng.step()
    return eng


def kernel_profile(eng) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        eng.step()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    total = sum(e.self_device_time_total for e in events)
    top = sorted(events, key=lambda e: -e.self_device_time_total)[:12]
    return dict(kernels=sum(e.count for e in events), device_ms=round(total / 1e3, 3),
                top=[(e.key[:60], e.count, round(e.self_device_time_total / 1e3, 3)) for e in top])


def measure(name, batch, variant, args, model) -> dict:
    eng = engine_for(model, name, batch, args.context, args.steps, variant)
    times = []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        eng.step()
        times.append(time.perf_counter() - t)
    row = dict(model=name, batch=batch, variant=variant, step_ms=round(statistics.median(times) * 1e3, 3),
               kernels=attention_backend.enabled())
    graphs = eng.runner.graphs
    if graphs is not None:
        g = graphs.size_for(batch)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.steps):
            graphs.graphs[g].replay()
        end.record()
        torch.cuda.synchronize()
        row["replay_ms"] = round(start.elapsed_time(end) / args.steps, 3)
        row["host_ms"] = round(row["step_ms"] - row["replay_ms"], 3)
    else:
        row["profile"] = kernel_profile(eng)
    eng.runner.shutdown()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="aura-8b,qwen3-1.7b")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--variants", default="fast,torch,eager")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    with torch.inference_mode():
        for name in args.models.split(","):
            model = BenchLM(SHAPES[name], torch.device("cuda"), torch.bfloat16)
            floor = model.decode_weight_bytes() / 4.8e12 * 1e3
            for batch in [int(b) for b in args.batches.split(",")]:
                for variant in args.variants.split(","):
                    try:
                        row = measure(name, batch, variant, args, model)
                    except Exception as e:  # noqa: BLE001 - keep the other rows
                        row = dict(model=name, batch=batch, variant=variant, error=f"{type(e).__name__}: {e}")
                    row["floor_ms"] = round(floor, 3)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            del model
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    print(f"\n{'model':<12}{'b':>4} {'variant':<7}{'step':>8}{'replay':>8}{'host':>7}{'floor':>7}  eager kernels/step")
    for r in rows:
        prof = r.get("profile", {})
        print(f"{r['model']:<12}{r['batch']:>4} {r['variant']:<7}{r.get('step_ms', 'ERR'):>8}{r.get('replay_ms', '-'):>8}"
              f"{r.get('host_ms', '-'):>7}{r['floor_ms']:>7}  {prof.get('kernels', '')} {prof.get('device_ms', '')}"
              f"{'  ' + r['error'] if 'error' in r else ''}")


if __name__ == "__main__":
    main()
