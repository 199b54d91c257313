"""AURA stage benchmark (Qwen3-VL-8B shape): prefill, decode, and a prefix-cached turn vs a cold one.

    python benchmarks/aura_bench.py --reference            # H200: dummy 8B from presets/aurateam__AURA, bf16
    python benchmarks/aura_bench.py --model DIR --device cpu --dtype float32 --frames 2 --height 64 --width 64 --text-tokens 20 --new-tokens 4

Workload (issue 5): a turn with 2 video frames at 640x480 plus ~200 text tokens.
- cold turn: time to first token of the whole prompt on empty caches (fresh frames: the vision encoder runs);
- warm turn: the next turn of the same conversation (system prompt + previous turn with its video in the
  prefix cache and the vision-embedding cache) adding ~200 new text tokens: only the new tokens are prefilled;
  compared with the same-length prompt cold (fresh frames, another system prompt);
- session turn (`--history-turns N`): turn N+1 of a live session whose every earlier turn brought its own
  frames and a short exchange; the new turn brings new frames too. Warm = the history is cached (the usual
  case), cold = the same prompt with nothing cached (a new server, or evicted);
- decode ms/token at batch 1 and 4 (the engine's decode steps, after prefill);
- one-time costs (first cold turn, first prefix-cached turn: kernel compiles, allocator growth) are run
  on a warm-up conversation first and reported on their own (`aura_one_time`), not inside the TTFTs;
- session encode split (`--encode-reps R`): the warm session turn's encode repeated R times with new frames each
  time; medians of the frame preprocessing, the vision encoder call (device work on a GPU) and the rest (host work:
  content hashes, cache lookups, tokenising, MRoPE positions, prompt tensors);
- `--profile N`: torch.profiler tables (CPU ops, CUDA kernels) of the warm session turn with N history turns;
- reference: transformers' Qwen3VLForConditionalGeneration.generate on the same config and inputs
  (prefill = generate 1 token; decode = (generate N - generate 1) / (N - 1)).
Prints one JSON line per measurement.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from aura_omni.deploy import Stage
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.media.vision_preprocess import preprocess_video
from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
from aura_omni.models.loader import resolve_checkpoint
from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.stages.aura.stage import AuraPipelineStage, AuraRequest
from aura_omni.pipeline.processors import asr2aura

PRESET = Path(__file__).resolve().parents[1] / "aura_omni" / "presets" / "aurateam__AURA"
FILLER = "Please describe what is happening in the scene and whether anything changed since the last frame. "


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def user_text(tokenizer, n_tokens: int) -> str:
    text = ""
    while len(tokenizer.encode(text)) < n_tokens:
        text += FILLER
    return text


def run_to_first_token(engine: LLMEngine, rid: str, ids, mm, params) -> float:
    t = time.perf_counter()
    engine.add_request(rid, ids, params, mm)
    while True:
        outs = [o for o in engine.step() if o.request_id == rid]
        if outs and outs[0].new_token_ids:
            return time.perf_counter() - t


def finish(engine: LLMEngine) -> None:
    while engine.has_unfinished():
        engine.step()


def decode_ms_per_token(engine: LLMEngine, prompts, new_tokens: int, device) -> float:
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    for i, (ids, mm) in enumerate(prompts):
        engine.add_request(f"dec{i}-{time.monotonic_ns()}", ids, params, mm)
    while any(s.num_output_tokens == 0 for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()  # prefill everything first
    sync(device)
    t, steps = time.perf_counter(), 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
    sync(device)
    return (time.perf_counter() - t) / max(steps, 1) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(PRESET), help="checkpoint dir, or the preset dir with --load-format dummy")
    ap.add_argument("--load-format", default=None, choices=[None, "auto", "dummy"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, choices=[None, "bfloat16", "float32"])
    ap.add_argument("--frames", type=int, default=2)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--text-tokens", type=int, default=200)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--history-turns", type=int, nargs="*", default=[4, 8, 16],
                    help="earlier turns of each session-turn row (none: skip them)")
    ap.add_argument("--session-text-tokens", type=int, default=40, help="user text per session turn")
    ap.add_argument("--encode-reps", type=int, default=20, help="repeats of each session row's encode split (0: skip)")
    ap.add_argument("--profile", type=int, default=None, metavar="TURNS",
                    help="print profiler tables of the warm session turn with this many history turns")
    ap.add_argument("--reference", action="store_true", help="also time transformers' Qwen3-VL generate")
    args = ap.parse_args()
    device = args.device
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.startswith("cuda") else "float32"))
    fmt = args.load_format or ("dummy" if Path(args.model) == PRESET else "auto")
    model = Qwen3VLForCausalLM.from_pretrained(args.model, dtype=dtype, device=device, load_format=fmt)
    tok = load_tokenizer(dummy_tokenizer_dir("aura") if fmt == "dummy" else resolve_checkpoint(args.model))
    pixels = np.random.RandomState(0)

    def new_frames():
        """New frames each call: nothing about them is in any cache."""
        return pixels.randint(0, 256, (args.frames, args.height, args.width, 3), dtype=np.uint8)

    def fresh_video():
        return preprocess_video(new_frames(), video_fps=2.0)

    video = fresh_video()
    text1, text2 = user_text(tok, args.text_tokens), "And now? " + user_text(tok, args.text_tokens)

    cfg = EngineConfig(max_model_len=16384, max_num_seqs=8, max_num_batched_tokens=16384, enable_prefix_caching=True,
                       gpu_memory_utilization=0.4, kv_cache_bytes=None if device.startswith("cuda") else 256 << 20)
    engine = LLMEngine(model, cfg, eos_token_ids=[151645], name="aura-bench")
    stage = AuraPipelineStage(model, tok, None, Stage(stage_id=1, model=args.model))
    one = SamplingParams(temperature=0, max_tokens=1)
    rows = []

    def encode(prompt, videos) -> tuple[float, list[int], object]:
        sync(device)
        t = time.perf_counter()
        prepared = stage.prepare(AuraRequest(stage.prompt_ids(prompt, videos), videos, one))
        ids, mm = prepared.ids, prepared.mm
        sync(device)
        return time.perf_counter() - t, ids, mm

    def turn(system: str, second: bool, videos=None):
        """(encode seconds, ids, mm) of turn 1 (video + text) or turn 2 (turn 1 as history + new text)."""
        history = [("user", text1, ["video"]), ("assistant", "Okay.")]
        prompt = (asr2aura(None, text_parts=[text2], history=history, system_prompt=system) if second
                  else asr2aura(None, vision_items=["video"], text_parts=[text1], system_prompt=system))
        return encode(prompt, videos or [video])

    def ttft(rid, encoded) -> tuple[float, int, float]:
        enc, ids, mm = encoded
        total = enc + run_to_first_token(engine, rid, ids, mm, one)
        finish(engine)
        return total, len(ids), enc

    # a whole warm-up conversation: turn 1 cold, turn 2 prefix-cached, so one-time costs stay out of the rows
    first_cold, _, _ = ttft("warmup1", turn("warm-up system prompt", False))
    first_cached, _, _ = ttft("warmup2", turn("warm-up system prompt", True))
    video = fresh_video()
    cold1, n1, enc1 = ttft("t1", turn("System prompt A.", False))
    rows.append(dict(bench="aura_turn1_cold_ttft", prompt_tokens=n1, vision_tokens=video.num_tokens, ttft_ms=cold1 * 1000,
                     encode_ms=enc1 * 1000))
    warm2, n2, enc_w = ttft("t2", turn("System prompt A.", True))  # system + turn 1 are in both caches
    cold2, _, enc_c = ttft("t2cold", turn("System prompt B.", True, [fresh_video()]))  # same length, nothing cached
    rows.append(dict(bench="aura_turn2_ttft", prompt_tokens=n2, warm_ms=warm2 * 1000, cold_ms=cold2 * 1000,
                     warm_encode_ms=enc_w * 1000, cold_encode_ms=enc_c * 1000, speedup=cold2 / warm2,
                     engine_warm_ms=(warm2 - enc_w) * 1000, engine_cold_ms=(cold2 - enc_c) * 1000,
                     engine_speedup=(cold2 - enc_c) / (warm2 - enc_w),
                     prefix_cache_hit_rate=engine.stats().get("prefix_cache_hit_rate")))
    rows.append(dict(bench="aura_one_time", first_cold_turn_ms=first_cold * 1000,
                     first_cached_turn_ms=first_cached * 1000,
                     first_cold_extra_ms=(first_cold - cold1) * 1000, first_cached_extra_ms=(first_cached - warm2) * 1000))
    for turns in args.history_turns:
        rows.append(session_turn(turns, args, tok, encode, ttft, fresh_video, profile=args.profile == turns))
        if args.encode_reps:
            rows.append(session_encode_split(turns, args, tok, stage, new_frames))

    _, ids, mm = turn("System prompt A.", False)

    for b in (1, 4):
        ms = decode_ms_per_token(engine, [(ids, mm)] * b, args.new_tokens, device)
        rows.append(dict(bench="aura_decode", batch=b, ms_per_token=ms))

    if args.reference:
        rows += reference_rows(args, model, video, ids, device, dtype)
    for r in rows:
        print(json.dumps(r), flush=True)


def session_turn(turns: int, args, tok, encode, ttft, fresh_video, profile: bool) -> dict:
    """Turn N+1 of a live session (each earlier turn: new frames + a short exchange) with its history cached
    (the previous turn's prompt ran, as it does in a session) vs the same prompt with nothing cached."""
    said = user_text(tok, args.session_text_tokens)
    videos = [fresh_video() for _ in range(turns + 1)]
    history = [t for _ in range(turns) for t in (("user", said, ["video"]), ("assistant", "<|silent|>"))]

    def prompt(system: str, upto: int):
        return asr2aura(None, vision_items=["video"], text_parts=[said], history=history[:2 * upto], system_prompt=system)

    system = f"Session {turns}."
    ttft(f"session{turns}-prev", encode(prompt(system, turns - 1), videos[:turns]))
    warm_turn = lambda: ttft(f"session{turns}-warm", encode(prompt(system, turns), videos))  # noqa: E731
    warm, n, enc_w = profiled(warm_turn, args.device) if profile else warm_turn()
    cold_videos = [fresh_video() for _ in videos]  # new content: the vision encoder runs for every turn
    cold, _, enc_c = ttft(f"session{turns}-cold", encode(prompt("Cold " + system, turns), cold_videos))
    return dict(bench="aura_session_turn_ttft", history_turns=turns, prompt_tokens=n,
                warm_ms=warm * 1000, cold_ms=cold * 1000, speedup=cold / warm, warm_encode_ms=enc_w * 1000,
                cold_encode_ms=enc_c * 1000, engine_warm_ms=(warm - enc_w) * 1000,
                engine_cold_ms=(cold - enc_c) * 1000)


class TimedVisionEncoder:
    """Stands in for the model's vision encoder (CUDA graphs or eager) and adds up the seconds of its calls."""

    def __init__(self, inner, device):
        self.inner, self.device, self.seconds = inner, device, 0.0

    def __call__(self, pixel_values, grids):
        sync(self.device)
        t = time.perf_counter()
        out = self.inner(pixel_values, grids)
        sync(self.device)
        self.seconds += time.perf_counter() - t
        return out


def session_encode_split(turns: int, args, tok, stage, new_frames) -> dict:
    """Medians over `--encode-reps` warm encodes of session turn N+1 (history in the vision cache, the turn's own
    frames new each time): preprocessing, the vision encoder call, and the host rest of the stage's `prepare`."""
    said = user_text(tok, args.session_text_tokens)
    history = [t for _ in range(turns) for t in (("user", said, ["video"]), ("assistant", "<|silent|>"))]
    prompt = asr2aura(None, vision_items=["video"], text_parts=[said], history=history, system_prompt=f"Split {turns}.")
    videos = [preprocess_video(new_frames(), video_fps=2.0) for _ in range(turns)]
    first = videos + [preprocess_video(new_frames(), video_fps=2.0)]
    stage.prepare(AuraRequest(stage.prompt_ids(prompt, first), first, SamplingParams()))  # history now cached
    model = stage.model
    inner = model.vision_graphs
    model.vision_graphs = timed = TimedVisionEncoder(inner or model.visual, args.device)
    pre, enc, vis = [], [], []
    try:
        for _ in range(args.encode_reps):
            frames = new_frames()
            t = time.perf_counter()
            video = preprocess_video(frames, video_fps=2.0)
            pre.append(time.perf_counter() - t)
            timed.seconds = 0.0
            sync(args.device)
            t = time.perf_counter()
            stage.prepare(AuraRequest(stage.prompt_ids(prompt, videos + [video]), videos + [video], SamplingParams()))
            sync(args.device)
            enc.append(time.perf_counter() - t)
            vis.append(timed.seconds)
    finally:
        model.vision_graphs = inner
    ms = lambda xs: float(np.median(xs) * 1000)  # noqa: E731
    return dict(bench="aura_session_encode_split", history_turns=turns, reps=args.encode_reps, preprocess_ms=ms(pre),
                encode_ms=ms(enc), vision_encoder_ms=ms(vis), encode_host_ms=ms([e - v for e, v in zip(enc, vis)]))


def profiled(fn, device):
    """fn() under cProfile (host time, Python included) and torch.profiler (CUDA kernels); prints both tables."""
    import cProfile
    import pstats

    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    host = cProfile.Profile()
    with profile(activities=acts) as prof:
        host.enable()
        out = fn()
        host.disable()
    pstats.Stats(host).sort_stats("cumulative").print_stats(30)
    if len(acts) > 1:
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15), flush=True)
    return out


def reference_rows(args, model, video, ids, device, dtype) -> list[dict]:
    from transformers import AutoConfig, Qwen3VLForConditionalGeneration

    cfg = AutoConfig.from_pretrained(args.model)
    with torch.device(device):
        ref = Qwen3VLForConditionalGeneration._from_config(cfg, dtype=dtype).eval()
    rows = []
    for b in (1, 4):
        inputs = dict(input_ids=torch.tensor([ids] * b, device=device),
                      attention_mask=torch.ones(b, len(ids), dtype=torch.long, device=device),
                      pixel_values_videos=torch.cat([video.pixel_values] * b).to(device, dtype),
                      video_grid_thw=torch.tensor([video.grid_thw] * b, device=device))
        timings = {}
        for n in (1, args.new_tokens):
            with torch.inference_mode():
                ref.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False)  # warm-up
                sync(device)
                t = time.perf_counter()
                ref.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False)
                sync(device)
            timings[n] = time.perf_counter() - t
        rows.append(dict(bench="hf_qwen3vl_generate", batch=b, prompt_tokens=len(ids), ttft_ms=timings[1] * 1000,
                         ms_per_token=(timings[args.new_tokens] - timings[1]) / (args.new_tokens - 1) * 1000))
    return rows


if __name__ == "__main__":
    main()
