"""Qwen3-ASR throughput: audio-seconds transcribed per wall second at a given concurrency, and time to
first token, for our engine and (optionally) transformers' Qwen3ASR `generate` on the same weights.

    python benchmarks/asr_throughput.py --model Qwen/Qwen3-ASR-1.7B --load-format dummy --device cuda \
        --concurrency 1 16 64 --clips 128 --reference
    python benchmarks/asr_throughput.py --model /tmp/tiny-asr --device cpu --concurrency 1 4 --clips 8   # smoke
    python benchmarks/asr_throughput.py ... --beside python gpu   # again beside other threads' load (below)

Clips are 5-30 s speech-like signals (seeded). Every request decodes exactly --new-tokens tokens
(EOS ignored) so both sides do the same work with random weights.

`--beside KIND [KIND ...]` runs each concurrency again with three threads beside the engine, as the server's other
stage loops are: `python` spins the interpreter (each thread's Python holds the lock until the switch interval or a
torch call lets go), `gpu` (CUDA) replays a graph of many small kernels on a stream of its own and waits for it, as a
stage loop steps (the driver's launch path is shared by every thread). Under load a served ASR prompt step takes ~15 ms
where alone it takes ~4: which of the two makes up the difference.
"""

import argparse
import contextlib
import json
import sys
import threading
import time

import numpy as np
import torch

from aura_omni.stages.asr.service import AsrService
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams

SR = 16000


def make_clips(n: int, seed: int, lo: float, hi: float) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    clips = []
    for _ in range(n):
        t = np.arange(int(rng.uniform(lo, hi) * SR)) / SR
        f0 = rng.uniform(100, 250) + 20 * np.sin(2 * np.pi * 3 * t)
        phase = 2 * np.pi * np.cumsum(f0) / SR
        wav = sum(0.2 / k * np.sin(k * phase) for k in range(1, 5)) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.7 * t))
        clips.append((wav + 0.01 * rng.standard_normal(t.shape)).astype(np.float32))
    return clips


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_engine(svc: AsrService, max_concurrency: int) -> LLMEngine:
    """One engine for every run (KV pages are bound to the model's layers: a second engine would take them)."""
    return LLMEngine(svc.model, EngineConfig(max_num_seqs=max_concurrency, max_model_len=2048,
                                             max_num_batched_tokens=max(2048, 512 * max_concurrency),
                                             gpu_memory_utilization=0.5),
                     eos_token_ids=list(svc.eos_token_ids), name="asr")


@contextlib.contextmanager
def beside(kind: str, device: str, threads: int = 3):
    """`threads` threads of `kind` load (module docstring) while inside."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(i * i for i in range(2000))

    def captured() -> tuple[torch.cuda.Stream, torch.cuda.CUDAGraph, torch.Tensor]:
        """A graph of many small kernels (a Talker step replays ~1,600), captured here: one capture at a time. Its
        tensor goes with it: freed, its memory would go to the engine while the graph still writes there."""
        stream, graph = torch.cuda.Stream(device), torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            x = torch.zeros(64, 1024, device=device)
            x.add_(1.0)  # its first run outside the capture
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(1000):
                    x.add_(1.0)
        return stream, graph, x

    def launch(stream: torch.cuda.Stream, graph: torch.cuda.CUDAGraph, _: torch.Tensor) -> None:
        with torch.cuda.stream(stream):
            while not stop.is_set():
                graph.replay()
                stream.synchronize()

    workers = [threading.Thread(target=spin, daemon=True) if kind == "python" else
               threading.Thread(target=launch, args=captured(), daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        yield
    finally:
        stop.set()
        for w in workers:
            w.join()


def run_ours(svc: AsrService, engine: LLMEngine, clips, concurrency: int, new_tokens: int, device: str) -> dict:
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    pending = list(enumerate(clips))
    started, first = {}, {}
    sync(device)
    t0 = time.perf_counter()

    def admit(k: int) -> None:
        batch, pending[:] = pending[:k], pending[k:]
        if not batch:
            return
        pieces = svc.prepare([(c, SR) for _, c in batch])
        for (i, _), (ids, mm) in zip(batch, svc.engine_prompts(pieces)):
            started[f"r{i}"] = time.perf_counter()
            engine.add_request(f"r{i}", ids, params, mm=mm)

    steps = {True: [], False: []}  # took prompts -> seconds of each step, the clips' encoding included
    admit(concurrency)
    prompts, since = True, t0
    while engine.has_unfinished():
        done = 0
        for out in engine.step():
            if out.new_token_ids and out.request_id not in first:
                first[out.request_id] = time.perf_counter()
            done += out.finished
        now = time.perf_counter()
        steps[prompts].append(now - since)
        prompts, since = bool(done and pending), now
        if done:
            admit(done)
    sync(device)
    wall = time.perf_counter() - t0
    audio = sum(len(c) for c in clips) / SR
    ttft = [first[r] - started[r] for r in started]
    # a step that took new clips against one that only decoded (the host waits for each step's tokens, so a step's
    # time is the device's once the queue is full)
    step_ms = {f"{kind}_step_ms": round(1000 * float(np.mean(steps[k])), 2) if steps[k] else None
               for k, kind in ((True, "prompt"), (False, "decode"))}
    return dict(impl="aura-omni", concurrency=concurrency, audio_s_per_s=audio / wall, wall_s=wall,
                ttft_p50_ms=1000 * float(np.median(ttft)), ttft_p90_ms=1000 * float(np.percentile(ttft, 90)),
                **step_ms)


def reference_model(svc: AsrService, device: str, dtype: torch.dtype):
    """transformers' native Qwen3ASR with our weights (mapped to its layout)."""
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    a, t = svc.model.config.audio, svc.model.config.text
    cfg = Qwen3ASRConfig(
        audio_config=dict(d_model=a.d_model, encoder_layers=a.encoder_layers, encoder_attention_heads=a.encoder_attention_heads,
                          encoder_ffn_dim=a.encoder_ffn_dim, output_dim=a.output_dim, num_mel_bins=a.num_mel_bins,
                          downsample_hidden_size=a.downsample_hidden_size, n_window=a.n_window, n_window_infer=a.n_window_infer),
        text_config=dict(model_type="qwen3", vocab_size=svc.model.config.vocab_size, hidden_size=t.hidden_size,
                         intermediate_size=t.intermediate_size, num_hidden_layers=t.num_hidden_layers,
                         num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                         head_dim=t.head_dim, rms_norm_eps=t.rms_norm_eps, max_position_embeddings=65536,
                         rope_parameters={"rope_type": "default", "rope_theta": t.rope_theta},
                         tie_word_embeddings=svc.model.config.tie_word_embeddings),
        tie_word_embeddings=svc.model.config.tie_word_embeddings)
    with torch.device(device):
        ref = Qwen3ASRForConditionalGeneration(cfg).to(dtype).eval()
    state = {svc.model.hf_key(k): v for k, v in svc.model.state_dict().items()}
    ref.load_state_dict(state, strict=False)
    return ref


def run_reference(svc: AsrService, ref, clips, concurrency: int, new_tokens: int, device: str) -> dict:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the reference's inputs live with the parity tests
    from tests.parity.asr_reference import hf_asr_inputs

    sync(device)
    t0 = time.perf_counter()
    ttft = []
    for b in range(0, len(clips), concurrency):
        pieces = svc.prepare([(c, SR) for c in clips[b:b + concurrency]])
        inputs = hf_asr_inputs(pieces, svc.features(pieces))
        inputs = {k: v.to(device, ref.dtype) if k == "input_features" else v.to(device) for k, v in inputs.items()}
        tb = time.perf_counter()
        with torch.inference_mode():
            ref.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        sync(device)
        ttft.append(time.perf_counter() - tb)  # a static batch returns everything at once
    wall = time.perf_counter() - t0
    audio = sum(len(c) for c in clips) / SR
    return dict(impl="transformers", concurrency=concurrency, audio_s_per_s=audio / wall, wall_s=wall,
                ttft_p50_ms=1000 * float(np.median(ttft)), ttft_p90_ms=1000 * float(np.percentile(ttft, 90)))


def profile(svc: AsrService, engine: LLMEngine, clips, new_tokens: int, device: str) -> None:
    """Where a one-clip prompt step's time goes: host ops (the interpreter's and the launches') against the device's."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with torch_profile(activities=activities) as prof:
        print(json.dumps(run_ours(svc, engine, clips, 1, new_tokens, device) | {"profiled": True}), flush=True)
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=30))
    if device.startswith("cuda"):
        print(table.table(sort_by="self_cuda_time_total", row_limit=25))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--load-format", default="auto", choices=["auto", "dummy"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=[None, "bfloat16", "float32"])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--clips", type=int, default=128)
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--max-seconds", type=float, default=30.0)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reference", action="store_true", help="also run transformers' Qwen3ASR generate")
    ap.add_argument("--out", default=None, help="write results as JSON here")
    ap.add_argument("--beside", nargs="*", default=[], choices=["python", "gpu"],
                    help="then each concurrency again beside three threads of this load (module docstring)")
    ap.add_argument("--profile", type=int, default=0, metavar="CLIPS",
                    help="then this many clips one at a time under torch.profiler: the ops by host and device time")
    ap.add_argument("--switch-interval-ms", type=float, default=0.5,
                    help="the interpreter lock's switch interval (the server's `gil_switch_interval_ms` default)")
    a = ap.parse_args()
    sys.setswitchinterval(a.switch_interval_ms / 1000)
    dtype = getattr(torch, a.dtype) if a.dtype else None
    svc = AsrService.from_pretrained(a.model, device=a.device, dtype=dtype, load_format=a.load_format)
    clips = make_clips(a.clips, 0, a.min_seconds, a.max_seconds)
    engine = make_engine(svc, max(a.concurrency))
    graphs = svc.model.audio_tower.layer_graphs
    while graphs is not None and graphs.capture_next(max(a.concurrency)):  # the encoder's layers as a warm stage runs them
        pass
    results = []
    for c in a.concurrency:  # printed as they come: a time limit keeps what finished
        # a warm-up of this concurrency's step shapes first: their kernels' first compiles and tunings are not the
        # steady state a served stage runs in
        run_ours(svc, engine, clips[:2 * c], c, 4, a.device)
        results.append(run_ours(svc, engine, clips, c, a.new_tokens, a.device))
        print(json.dumps(results[-1]), flush=True)
    for kind in a.beside:
        for c in a.concurrency:
            with beside(kind, a.device):
                results.append(run_ours(svc, engine, clips, c, a.new_tokens, a.device) | {"beside": kind})
            print(json.dumps(results[-1]), flush=True)
    if a.profile:
        profile(svc, engine, clips[:a.profile], a.new_tokens, a.device)
    if a.reference:
        ref = reference_model(svc, a.device, svc.model.embed_tokens.weight.dtype)
        for c in a.concurrency:  # two static batches' worth of clips (at least 16): HF decodes ~25 ms/token at c=1
            results.append(run_reference(svc, ref, clips[:max(2 * c, 16)], c, a.new_tokens, a.device))
            print(json.dumps(results[-1]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
