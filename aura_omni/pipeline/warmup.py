"""Warm start: small requests through every stage before the server says it is ready.

The first request otherwise pays for what only happens once: Triton compiles, cuDNN and cuBLAS plan choices, the vision
encoder's graph for a frame layout, the speaker and codec encoders, Code2Wav's first chunk shapes. Each stage gets a
request shaped like a live turn's (clips, camera frames, a first codec chunk and a steady one).
"""

import asyncio
import collections
import logging
import time
from functools import partial
from typing import Callable

import numpy as np

from aura_omni.engine.grammar import Grammar
from aura_omni.pipeline.processors import asr2aura
from aura_omni.stages.code2wav import ESSENTIAL_BUCKET, ESSENTIAL_WINDOW

log = logging.getLogger(__name__)
SR_ASR, SR_TTS = 16000, 24000


def _tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


# frames per warm AURA request: one frame (a live session's clip has this layout too) and two (a chat turn's pair
# of camera frames), each twice, as the vision encoder's graph for a layout is captured the second time it is seen
AURA_LAYOUTS = (1, 1, 2, 2)
ASR_CLIPS_S = (1.0, 3.0)  # a short reply and a typical turn


async def warm_up(asr=None, aura=None, tts=None, *, frames=(), initial_chunk_frames: int = 1,
                  chunk_frames: int = 25, burst: bool | None = None, all_graphs: bool = True) -> dict[str, float]:
    """Seconds each stage's warm requests took (stages given as the runtime holds them; None = not deployed).
    `frames`: distinct VisionInputs for AURA (camera frames of the live size), sum(AURA_LAYOUTS) of them.
    `all_graphs`: every Code2Wav graph and AURA's grammar machinery now (Ray actors), else a lone stream's graphs
    (`Runtime.warm_after_ready` does the rest).
    `burst` (default: on a GPU) ends with a burst of the Talker's max_num_seqs requests: a first burst of clients
    would otherwise pay for the shapes only many prompts in one step make (Triton variants, graph sizes: hundreds of
    milliseconds before its first audio on a fresh machine, docs/benchmarks.md)."""
    took = {}
    if asr is not None:
        t = time.perf_counter()
        loop = getattr(asr, "loop", None)  # the audio encoder's layer graphs: every bucket, or a lone clip's (the
        essential = {} if all_graphs else {"max_windows": ESSENTIAL_ASR_WINDOWS}  # rest after ready)
        while loop is not None and await asyncio.wrap_future(
                loop.call(partial(loop.engine.capture_next_graph, **essential))):
            pass
        for k, seconds in enumerate(ASR_CLIPS_S):
            await asr.atranscribe([(_tone(seconds, SR_ASR), SR_ASR)], max_new_tokens=4, request_id=f"warmup-asr{k}")
        took["asr"] = time.perf_counter() - t
    if aura is not None:
        t = time.perf_counter()
        left = list(frames)
        for k, n in enumerate(AURA_LAYOUTS if left else (0,)):
            vision, left = left[:n], left[n:]
            prompt = asr2aura(None, text_parts=["Hello."], vision_items=["image"] * len(vision))
            async for _ in aura.generate(prompt, vision, request_id=f"warmup-aura{k}", sampling={"max_tokens": 2}):
                pass
        took["aura"] = time.perf_counter() - t
        if all_graphs:
            took.update(await warm_grammar(aura))
    for k, talker in enumerate(tts.facades if tts is not None else []):  # each Talker of a TalkerSet
        if talker.code2wav is None:
            continue
        t = time.perf_counter()
        loop = talker.code2wav_loop  # every window length at every batch bucket, or only a lone stream's short ones
        captured = 0               # (the server captures the rest once it is ready: `capture_after_ready`)
        essential = {} if all_graphs else {"max_bucket": ESSENTIAL_BUCKET, "max_window": ESSENTIAL_WINDOW}
        while await asyncio.wrap_future(loop.call(partial(loop.engine.capture_next_graph, **essential))):
            captured += 1
        if captured:
            took[f"code2wav_graphs:{talker.model_type}"] = time.perf_counter() - t
        t = time.perf_counter()
        async for _ in talker.astream(_tts_request(talker, initial_chunk_frames + chunk_frames), initial_chunk_frames,
                                      chunk_frames, request_id=f"warmup-tts{k}"):
            pass
        took[f"tts:{talker.model_type}"] = time.perf_counter() - t
        if burst if burst is not None else talker.talker_loop.device.type == "cuda":
            t = time.perf_counter()
            await _burst(talker, initial_chunk_frames, chunk_frames, f"warmup-burst{k}")
            took[f"tts_burst:{talker.model_type}"] = time.perf_counter() - t
    log.info("warm start: %s", ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in took.items()))
    return took


async def warm_grammar(aura) -> dict[str, float]:
    """One grammar-constrained AURA request on a GPU, so the grammar library's view of the vocabulary (seconds of
    host work to build) and the masked sampler are not on the first tool call's path to its first token. The server
    runs it once it is ready (`Runtime.warm_after_ready`); `warm_up(all_graphs=True)` before."""
    if aura is None or getattr(aura, "grammars", None) is None or aura.model.device.type != "cuda":
        return {}
    t = time.perf_counter()
    grammar = {"max_tokens": 2, "grammar": Grammar.json_schema({"type": "object"})}
    async for _ in aura.generate(asr2aura(None, text_parts=["Hello."]), [], request_id="warmup-aura-grammar",
                                 sampling=grammar):
        pass
    return {"aura_grammar": time.perf_counter() - t}


# a capture after ready waits for the whole server to have been this long without work: one holds Code2Wav's loop
# ~1.3 s on an H200 (cuDNN times its convolutions, with the process-wide `cudnn.benchmark` on), so a stream arriving
# meanwhile waits that long for its audio. But not longer than MAX_POSTPONE_S: until the graphs of several streams
# are captured, a batch goes through the lone-stream ones in turns (0.36 s a step for 16 streams), so a server that
# starts under steady load must still get them (docs/benchmarks.md, session 19).
ESSENTIAL_ASR_WINDOWS = 1  # a lone clip of up to 8 s: its encoder graphs are captured before the server is ready
QUIET_BEFORE_CAPTURE_S = 1.0
MAX_POSTPONE_S = 3.0


async def capture_after_ready(loops: list, busy: Callable[[], bool] = lambda: False, idle_poll_s: float = 0.1,
                              quiet_s: float = QUIET_BEFORE_CAPTURE_S, max_postpone_s: float = MAX_POSTPONE_S) -> int:
    """The CUDA graphs the warm start left (the ASR encoder's of several clips, Code2Wav's of batches of more than
    `ESSENTIAL_BUCKET` streams), one loop call at a time, each once the server has had no work for `quiet_s`
    (`busy()`: a stage holds a request), or, under steady load, `max_postpone_s` after the last; always only while the
    loop's own stage is idle (`when_idle`). Meanwhile such steps run eagerly or through the captured graphs in turns
    (/health's `warming` says how many are left). `loops`: stage loops whose engine has `graphs_missing` and
    `capture_next_graph`. Returns how many were captured."""
    captured = collections.Counter()
    for loop in loops:
        quiet_since, waiting_since = None, time.perf_counter()
        while loop.engine.graphs_missing():
            now = time.perf_counter()
            if busy():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            due = (quiet_since is not None and now - quiet_since >= quiet_s) or now - waiting_since >= max_postpone_s
            if due and await asyncio.wrap_future(loop.call(partial(loop.engine.capture_next_graph, when_idle=True))):
                captured[loop.name] += 1
                waiting_since = time.perf_counter()
                continue
            await asyncio.sleep(idle_poll_s)
    if captured:
        log.info("background warm start: graphs captured: %s", ", ".join(f"{k} {n}" for k, n in captured.items()))
    return sum(captured.values())


async def _burst(talker, initial_chunk_frames: int, chunk_frames: int, name: str) -> None:
    """The Talker's max_num_seqs streams, each to its second window: half of them at once (one prefill of them
    all, steps at that batch, their first windows decoded together), the other half as soon as the first half has
    its first audio (their prompts in steps beside running streams, whose block tables are wider). A Base Talker's
    alternate between in-context and x-vector-only cloning, whose prompts differ in length."""
    reqs = [_tts_request(talker, initial_chunk_frames + 3)]
    if talker.model_type == "base":  # prompts of both lengths in one step, as clients send them
        reqs.append(_replace(reqs[0], voice=_replace(reqs[0].voice, ref_codes=None, ref_text=None, x_vector_only=True)))
    n = talker.engine.engine.config.max_num_seqs
    first_audio = asyncio.Event()

    async def one(i: int) -> None:
        async for _ in talker.astream(reqs[i % len(reqs)], initial_chunk_frames, chunk_frames,
                                      request_id=f"{name}-{i}"):
            first_audio.set()
    first = asyncio.gather(*(one(i) for i in range(max(1, n // 2))))
    heard = asyncio.ensure_future(first_audio.wait())
    await asyncio.wait([heard, first], return_when=asyncio.FIRST_COMPLETED)  # (a failure: no audio to wait for)
    heard.cancel()
    await asyncio.gather(first, *(one(i) for i in range(max(1, n // 2), n)))


def _tts_request(tts, frames: int):
    from aura_omni.stages.tts import TTSRequest

    req = TTSRequest(text="Hello, this is a warm start.", max_new_tokens=frames, seed=0)
    if tts.model_type == "base":  # in-context cloning: the speaker and codec encoders run too
        voice = tts.create_voice_prompt(_tone(2.0, SR_TTS), SR_TTS, "A warm start.", x_vector_only=False)
        return _replace(req, task_type="Base", voice=voice)
    if tts.model_type == "custom_voice":
        return _replace(req, task_type="CustomVoice", speaker=tts.speakers[0])
    return _replace(req, task_type="VoiceDesign", instruct="A calm, clear voice.")


def _replace(req, **kw):
    from dataclasses import replace

    return replace(req, **kw)
