"""Torch calls a stage's step makes on its thread, outside what the GPU replays from graphs (the backbone's forward and
the Talker's frame decoder): each one gives the interpreter lock up and waits to take it back behind the other stages'
threads (docs/benchmarks.md, session 39). Counted on the CPU with the tiny checkpoints, for a prompt step taking N new
requests at once and the decode steps after it.

    python scripts/step_torch_calls.py /work/tiny [--requests 8 32]
"""

import argparse
import collections
import contextlib

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from aura_omni.models import qwen3
from aura_omni.models.qwen3_tts import generate


class Calls(TorchDispatchMode):
    """Counts the calls dispatched while inside, but those under `replayed` methods."""

    def __init__(self):
        super().__init__()
        self.total, self._inside = 0, 0

    @contextlib.contextmanager
    def replayed(self):
        self._inside += 1
        try:
            yield
        finally:
            self._inside -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.total += not self._inside
        return func(*args, **(kwargs or {}))


def counted(fn, steps: list, replays: list):
    """`fn` counting each call's torch calls into `steps`, but those under a replay (`replayed`)."""
    def step(*a, **k):
        mode = Calls()
        replays.append(mode)
        try:
            with mode:
                return fn(*a, **k)
        finally:
            replays.remove(mode)
            steps.append(mode.total)
    return step


def replayed(fn, replays: list):
    """`fn` whose torch calls no step counts (on the GPU a graph replays them)."""
    def replay(*a, **k):
        with contextlib.ExitStack() as stack:
            for mode in replays:
                stack.enter_context(mode.replayed())
            return fn(*a, **k)
    return replay


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tiny", help="the folder `aura-omni make-tiny` wrote")
    ap.add_argument("--requests", type=int, nargs="+", default=[8, 32])
    a = ap.parse_args()
    replays: list[Calls] = []
    qwen3.Qwen3Model.forward = replayed(qwen3.Qwen3Model.forward, replays)
    generate.FrameDecoder.frame = replayed(generate.FrameDecoder.frame, replays)
    steps = collections.defaultdict(list)

    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.prompts import vl_request
    from aura_omni.engine.sampling_params import SamplingParams
    from aura_omni.media.vision_preprocess import preprocess_image
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
    from aura_omni.stages.asr.service import AsrService
    from aura_omni.stages.talker import TalkerStageEngine
    from aura_omni.stages.tts import Qwen3TTS, TTSRequest

    aura = Qwen3VLForCausalLM.from_pretrained(f"{a.tiny}/aura")
    engine = LLMEngine(aura, EngineConfig(max_model_len=512, kv_cache_bytes=64 << 20, enable_prefix_caching=True,
                                          max_num_seqs=max(a.requests)))
    vision = [preprocess_image(np.random.RandomState(0).randint(0, 256, (64, 96, 3), dtype=np.uint8))]
    ids = [151644, 872, 198, 151652] + [151655] * vision[0].num_tokens + [151653, 9707, 151645, 198, 151644, 77091, 198]
    asr = AsrService.from_pretrained(f"{a.tiny}/qwen3_asr")
    tts = Qwen3TTS.load(f"{a.tiny}/qwen3_tts_custom_voice")
    engine.step = counted(engine.step, steps["aura"], replays)  # this engine only: the other stages' step one too
    asr_engine = type(asr.loop.engine)
    asr_engine.step = counted(asr_engine.step, steps["asr"], replays)
    TalkerStageEngine.step = counted(TalkerStageEngine.step, steps["talker"], replays)
    t = np.arange(48000) / 16000
    for n in a.requests:
        for name in steps:
            steps[name].clear()
        with torch.inference_mode():  # AURA: n turns' prompts at once, sampled as served (temperature 0.5)
            req = vl_request(aura.build_prompt(ids, vision, aura.encode_vision(vision)), vision)
        for i in range(n):
            engine.add_request(f"r{n}-{i}", req[0], SamplingParams(temperature=0.5, max_tokens=3, ignore_eos=True),
                               req[1])
        while engine.has_unfinished():
            engine.step()
        asr.transcribe([((0.3 * np.sin(2 * np.pi * (200 + 10 * i) * t)).astype(np.float32), 16000)
                        for i in range(n)], max_new_tokens=3)
        tts.generate_codes([TTSRequest(text=f"Hello world number {i}, this is a test.", task_type="CustomVoice",
                                       speaker="Vivian", language="English", max_new_tokens=4) for i in range(n)])
        for name, calls in steps.items():
            print(f"{n} requests, {name}: prompt step {calls[0]} torch calls, then {calls[1:]}")


if __name__ == "__main__":
    main()
