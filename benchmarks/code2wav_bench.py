"""Code2Wav step time by batch, chunk length, dtype and launch mode (the stage that bounds TTS throughput).

    python benchmarks/code2wav_bench.py                       # H200: the 12 Hz codec decoder, random weights
    python benchmarks/code2wav_bench.py --profile 32x25       # + a kernel table for one shape and dtype
    python benchmarks/code2wav_bench.py --tiny                # CPU smoke run

Each row decodes `--steps` chunks of B streams x n frames through `Code2Wav.forward` on carried stream state, and
reports ms per step, audio-s per second and the error against fp32 on the same codes (bf16 rounds the whole net).
Modes: `eager`, `graph` (the step captured once per shape and replayed, the stage's CUDA-graph path).
"""

import argparse
import json
import time

import torch

from aura_omni.models.qwen3_tts.code2wav import Code2Wav
from aura_omni.models.qwen3_tts.code2wav_graphs import Code2WavGraphs
from aura_omni.models.qwen3_tts.code2wav_stream import Code2WavSlots
from aura_omni.models.qwen3_tts.codec_config import CodecConfig, Code2WavConfig
from aura_omni.models.loader import PRESETS_DIR

FRAME_SECONDS = 0.08


def build(dtype: torch.dtype, device: str, tiny: bool) -> Code2Wav:
    cfg = (Code2WavConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=2, head_dim=16, latent_dim=32, codebook_dim=32, decoder_dim=32)
           if tiny else CodecConfig.from_dir(PRESETS_DIR / "Qwen__Qwen3-TTS-Tokenizer-12Hz").decoder)
    return Code2Wav(cfg).init_dummy(seed=0).to(device).cast(dtype).eval()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_shape(model: Code2Wav, batch: int, frames: int, steps: int, mode: str, device: str) -> tuple[float, torch.Tensor]:
    """ms per step of `batch` streams x `frames` frames through the stage's path (slot rows, graphs or eager)."""
    gen = torch.Generator().manual_seed(batch * 1000 + frames)
    codes = [torch.randint(0, model.config.codebook_size, (batch, frames, 16), generator=gen).to(device)
             for _ in range(steps + 2)]
    slots = Code2WavSlots(model, batch)
    ids = [slots.acquire() for _ in range(batch)]
    graphs = Code2WavGraphs(slots, [frames], batch) if mode == "graph" else None
    ids_t = torch.tensor(ids, device=device)
    outs = []
    with torch.inference_mode():
        if graphs is not None:  # what the warm start pays per graph (cuDNN timing its algorithms, the capture)
            t0 = time.perf_counter()
            graphs.capture_all()
            sync(device)
            print(json.dumps(dict(bench="code2wav_capture", batch=batch, frames=frames, graphs=len(graphs),
                                  seconds=round(time.perf_counter() - t0, 3))), flush=True)
        for i, c in enumerate(codes):
            if i == 2:
                sync(device)
                t0 = time.perf_counter()
            outs.append(graphs.decode(ids, c) if graphs is not None else slots.decode(ids_t, c))
        sync(device)
        if graphs is not None:
            graphs.close()  # its capture stream goes back (layers/cuda_graph.py)
    ms = (time.perf_counter() - t0) * 1e3 / steps
    return ms, torch.cat([o.float() for o in outs], dim=1).cpu()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shapes", default="1x1,1x2,1x4,1x25,8x25,32x25,64x25", help="BxN list")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cudnn-benchmark", type=int, default=1, help="torch.backends.cudnn.benchmark")
    ap.add_argument("--profile", default=None, help="BxN: print the top kernels of one eager step per dtype")
    args = ap.parse_args(argv)
    if args.tiny:
        args.shapes, args.steps = "1x1,2x3", 2
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows, ref = [], {}
    for dt in args.dtypes.split(","):
        model = build(getattr(torch, dt), args.device, args.tiny)
        row_bytes = sum(t[0].numel() * t.element_size() for t in model.new_stream(1).tensors.values())
        print(json.dumps(dict(bench="code2wav_state", dtype=dt, bytes_per_stream=row_bytes)), flush=True)
        for mode in args.modes.split(","):
            if mode == "graph" and args.device != "cuda":
                continue
            for b, n in shapes:
                ms, wav = time_shape(model, b, n, args.steps, mode, args.device)
                key = (b, n)
                ref.setdefault(key, wav)
                err = (wav - ref[key]).abs()
                row = dict(bench="code2wav", dtype=dt, mode=mode, batch=b, frames=n, step_ms=round(ms, 3),
                           audio_s_per_s=round(b * n * FRAME_SECONDS / (ms / 1e3), 1),
                           max_abs_err=float(err.max()), rms_err=float(err.pow(2).mean().sqrt()),
                           rms=float(ref[key].pow(2).mean().sqrt()))
                rows.append(row)
                print(json.dumps(row), flush=True)
        if args.profile and args.device == "cuda":
            b, n = (int(v) for v in args.profile.split("x"))
            state = model.new_stream(b)
            codes = torch.randint(0, model.config.codebook_size, (b, n, 16), device=args.device)
            with torch.inference_mode():
                model.forward(codes, state)
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    model.forward(codes, state)
                    sync(args.device)
            print(f"## {dt} {b}x{n}")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70))
    print("| dtype | mode | B x n | ms/step | audio-s/s | max abs err vs fp32 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['mode']} | {r['batch']}x{r['frames']} | {r['step_ms']} | {r['audio_s_per_s']} | "
              f"{r['max_abs_err']:.2e} |")


if __name__ == "__main__":
    main()
