"""Time the small-M Triton GEMVs (aura_omni/layers/triton_gemv.py) against the sequences they replace (CUDA).

    python scripts/bench_gemv.py            # < 60 s on an H200: us and GB/s per projection at M = 1..16
    python scripts/bench_gemv.py --sweep    # also other tiles: ~130 per shape at one row, the neighbours above
    python scripts/bench_gemv.py --rows 1 --sweep --write-table    # store each shape's fastest in gemv_tiles.json

Shapes: the AURA 8B LM, the Qwen3-TTS Talker (1.7B) and its code predictor, with the LM heads of AURA and of the
Qwen3-ASR LMs that share the last two's layer shapes. `torch` is what the fused layer
runs today (cuBLAS F.linear + triton_ops norm / SiLU*mul + torch adds); `layer` is the four projections of one
decoder layer with their norms and residual adds, as each path runs them (attention left out). Every op runs
back to back in one CUDA graph -- no launch overhead, as in a decode graph -- cycling over enough weight
copies that the weights come from HBM, not L2. GB/s counts the bytes each op must move once (weights,
activations in and out) over its time.
"""

import argparse
import json
import math
import re

import torch
import torch.nn.functional as F

from aura_omni.layers import triton_gemv, triton_ops

EPS = 1e-6
DEVICE = torch.device("cuda")
MODELS = {  # hidden, intermediate, heads * head_dim (o_proj input), q + k + v width, LM head rows
    "aura-8b": (4096, 12288, 4096, 6144, 151936),
    "talker": (2048, 6144, 2048, 4096, 151936),  # = the Qwen3-ASR-1.7B LM's layers; the head timed is the ASR's
    "code-predictor": (1024, 3072, 2048, 4096, 151936),  # = Qwen3-ASR-0.6B and the 0.6B Talkers; the ASR-0.6B head
}


def weight_sets(shapes: dict[str, tuple[int, int]], dtype, l2_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Enough copies of the weights that one pass over them evicts L2 three times over."""
    size = sum(n * k for n, k in shapes.values()) * dtype.itemsize
    copies = min(64, max(1, math.ceil(3 * l2_bytes / size)))
    return [{name: torch.randn(n, k, device=DEVICE, dtype=dtype) * k ** -0.5 for name, (n, k) in shapes.items()}
            for _ in range(copies)]


def time_us(step, sets, min_calls: int = 24) -> float:
    """Mean us of `step(weights)` captured back to back in one graph over the weight copies."""
    calls = [sets[i % len(sets)] for i in range(max(min_calls, len(sets)))]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the graph
        for w in calls[:2]:
            step(w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in calls:
            step(w)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 5
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / (reps * len(calls))


def cases(hidden: int, inter: int, attn: int, qkv: int, vocab: int, m: int, dtype):
    """(name, weight shapes, fused step, torch step, activation bytes) for one model at M rows."""
    rnd = lambda *s: torch.randn(*s, device=DEVICE, dtype=dtype)
    x, delta, nw = rnd(m, hidden), rnd(m, hidden), rnd(hidden) * 0.1 + 1
    a, gu = rnd(m, attn), rnd(m, 2 * inter)
    tg = triton_gemv
    act = lambda *widths: sum(widths) * m * dtype.itemsize
    yield ("qkv rms_gemv", {"w": (qkv, hidden)}, lambda w: tg.rms_gemv(x, nw, EPS, w["w"]),
           lambda w: F.linear(triton_ops.rmsnorm(x, nw, EPS), w["w"]), act(hidden, qkv))
    yield ("o gemv+residual", {"w": (hidden, attn)}, lambda w: tg.gemv(a, w["w"], residual=x),
           lambda w: x + F.linear(a, w["w"]), act(attn, 2 * hidden))
    yield ("gate_up rms_gemv", {"w": (2 * inter, hidden)}, lambda w: tg.rms_gemv(x, nw, EPS, w["w"]),
           lambda w: F.linear(triton_ops.rmsnorm(x, nw, EPS), w["w"]), act(hidden, 2 * inter))
    yield ("down silu_mul_gemv+res", {"w": (hidden, inter)}, lambda w: tg.silu_mul_gemv(gu, w["w"], residual=x),
           lambda w: x + F.linear(triton_ops.silu_mul(gu), w["w"]), act(2 * inter, 2 * hidden))
    if vocab:
        yield ("lm_head rms_gemv", {"w": (vocab, hidden)}, lambda w: tg.rms_gemv(x, nw, EPS, w["w"]),
               lambda w: F.linear(triton_ops.rmsnorm(x, nw, EPS), w["w"]), act(hidden, vocab))

    def fused_layer(w):
        tg.rms_gemv(x, nw, EPS, w["qkv"])  # would feed attention, whose output `a` stands in
        h = tg.gemv(a, w["o"], residual=x)
        return tg.silu_mul_gemv(tg.rms_gemv(h, nw, EPS, w["gate_up"]), w["down"], residual=h)

    def torch_layer(w):  # today's fused layer: the residual adds ride in the next norm
        res, hn = triton_ops.add_rmsnorm(x, delta, nw, EPS)
        F.linear(hn, w["qkv"])
        res, hn = triton_ops.add_rmsnorm(res, F.linear(a, w["o"]), nw, EPS)
        return F.linear(triton_ops.silu_mul(F.linear(hn, w["gate_up"])), w["down"])

    layer = {"qkv": (qkv, hidden), "o": (hidden, attn), "gate_up": (2 * inter, hidden), "down": (hidden, inter)}
    yield "layer", layer, fused_layer, torch_layer, act(hidden, qkv, attn, 2 * hidden, 4 * inter, hidden)


def sweep_configs(m: int, n: int, k: int, itemsize: int, device: torch.device):
    """The pick, then for one row a grid (BLOCK_N x weight-tile bytes x pipeline depth x warps); for more rows its
    neighbours: half / double BLOCK_N and pipeline depth."""
    dot, _, bn, _, _, stages = pick = triton_gemv._config(m, n, k, itemsize, device)
    yield pick
    if m == 1:
        for block_n in (2, 4, 8, 16, 32):
            for tile in (4096, 8192, 16384, 32768):
                block_k = tile // itemsize // block_n
                if 64 <= block_k <= k:
                    for stages in (1, 2, 3, 4):
                        for warps in (4, 8):
                            yield False, 1, block_n, block_k, warps, stages
        return
    for other in (bn // 2, bn * 2):
        if 8 <= other <= 128:
            yield triton_gemv._tile(other, k, itemsize, stages)
    yield from (triton_gemv._tile(bn, k, itemsize, s) for s in (2, 6))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--out", default=None, help="JSON lines of every sweep timing")
    ap.add_argument("--write-table", action="store_true", help="store the fastest one-row tiles in gemv_tiles.json")
    args = ap.parse_args()
    dtype = torch.bfloat16
    props = torch.cuda.get_device_properties(0)
    l2, sms = getattr(props, "L2_cache_size", 50 << 20), props.multi_processor_count
    print(f"{props.name}, {sms} SMs, L2 {l2 >> 20} MiB, {dtype}; us per op in a CUDA graph, weights from HBM")
    if args.sweep:
        precompile(args.models.split(","), list(map(int, args.rows.split(","))))
    totals, fastest = {}, {}
    for model in args.models.split(","):
        dims = MODELS[model]
        for m in map(int, args.rows.split(",")):
            for name, shapes, fused, base, act_bytes in cases(*dims, m, dtype):
                sets = weight_sets(shapes, dtype, l2)
                nbytes = sum(n * k for n, k in shapes.values()) * dtype.itemsize + act_bytes
                t_fused, t_base = time_us(fused, sets), time_us(base, sets)
                print(f"{model:15s} M={m:<2d} {name:24s} gemv {t_fused:7.1f} us {nbytes / t_fused / 1e3:6.0f} GB/s"
                      f" | torch {t_base:7.1f} us {nbytes / t_base / 1e3:6.0f} GB/s | x{t_base / t_fused:.2f}",
                      flush=True)
                if name == "layer":
                    totals[model, m] = (t_fused, t_base)
                elif args.sweep:
                    n, k = shapes["w"]
                    results = sweep(fused, sets, m, n, k, dtype.itemsize, nbytes)
                    if m == 1:
                        fastest[n, k] = min(results)[1][2:]
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(dict(model=model, m=m, op=name, n=n, k=k, bytes=nbytes,
                                                    results=results)) + "\n")
                del sets
    print("layer projections (us, gemv / torch):",
          "  ".join(f"{model} M={m}: {f:.0f}/{b:.0f}" for (model, m), (f, b) in totals.items()))
    if args.write_table and fastest:
        write_table(props.name, fastest)


def write_table(device_name: str, fastest: dict) -> None:
    """Merge the fastest one-row tiles into layers/gemv_tiles.json under this GPU's name."""
    tables = json.loads(triton_gemv.TILES_FILE.read_text())
    table = tables.setdefault(device_name, {}).setdefault("one_row", {})
    table.update({f"{n}x{k}": list(tile) for (n, k), tile in fastest.items()})
    tables[device_name]["one_row"] = dict(sorted(table.items(), key=lambda kv: tuple(map(int, kv[0].split("x")))))
    one_line_tiles = re.sub(r"\[\s+([\d,\s]+?)\s+\]", lambda t: "[" + " ".join(t[1].split()) + "]",
                            json.dumps(tables, indent=1))
    triton_gemv.TILES_FILE.write_text(one_line_tiles + "\n")
    print(f"wrote {len(fastest)} one-row tiles for {device_name} to {triton_gemv.TILES_FILE}")


def _compile(job) -> None:
    """Compile (by launching on a few weight rows) one sweep config of one op: fills Triton's disk cache. N is not
    a compile-time constant, and 64 rows keep N's divisibility by 16, so the real launch hits the same entry."""
    model, m, op, cfg = job
    triton_gemv._config = lambda *_: cfg
    for name, shapes, fused, *_ in cases(*MODELS[model], m, torch.bfloat16):
        if name == op:
            n, k = shapes["w"]
            fused({"w": torch.zeros(64, k, device=DEVICE, dtype=torch.bfloat16)})
    torch.cuda.synchronize()


def precompile(models: list[str], rows: list[int], workers: int = 12) -> None:
    """Every sweep config compiled in parallel processes first: ~800 Triton compiles one by one take minutes."""
    import concurrent.futures
    import multiprocessing

    jobs = [(model, m, name, cfg) for model in models for m in rows
            for name, shapes, *_ in cases(*MODELS[model], m, torch.bfloat16) if name != "layer"
            for cfg in dict.fromkeys(sweep_configs(m, *shapes["w"], 2, DEVICE))]
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile, jobs, chunksize=4))
    print(f"precompiled {len(jobs)} sweep launches", flush=True)


def sweep(fused, sets, m, n, k, itemsize, nbytes):
    pick_config = triton_gemv._config
    results = []
    try:
        for cfg in dict.fromkeys(sweep_configs(m, n, k, itemsize, DEVICE)):
            triton_gemv._config = lambda *_, cfg=cfg: cfg
            results.append((time_us(fused, sets), cfg))
    finally:
        triton_gemv._config = pick_config
    best_t, best = min(results)
    pick_t = results[0][0]
    print(f"    sweep (DOT, M_PAD, BLOCK_N, BLOCK_K, warps, stages): pick {results[0][1]} {pick_t:.1f} us;"
          f" best {best} {best_t:.1f} us {nbytes / best_t / 1e3:.0f} GB/s ({pick_t / best_t - 1:+.0%} to gain)")
    print("    fastest:", "  ".join(f"{cfg[2:]} {t:.1f}" for t, cfg in sorted(results)[:6]), flush=True)
    return results


if __name__ == "__main__":
    main()
