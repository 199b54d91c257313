"""A stage's step queues its device work without the host waiting for it. A pageable upload (`torch.tensor(x,
device=cuda)`, `.to(cuda)` of a host tensor), a boolean mask on the device or `.item()` synchronises the stage's
stream: the host then waits for the step queued just before (async scheduling undone), and the wait hides in the
step's launch, where `aura_omni:stage_device_wait_seconds` does not see it (session 38: under load AURA's sampled
decode steps spent ~20 ms in their launch and 0.1 ms in the wait for results). With torch's sync debug mode on
"error" any such wait raises; only `wait_event`, where a step's results are read, may wait.

Skipped without CUDA; scripts/gpu_check.sh runs it on the H200.
"""

import contextlib

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture
def no_waits(monkeypatch):
    """A context in which any host wait for the GPU raises, but reading a step's results (`wait_event`)."""
    from aura_omni.engine import model_runner
    from aura_omni.layers import device

    real = device.wait_event

    def reading_results(event):
        torch.cuda.set_sync_debug_mode(0)
        try:
            real(event)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    monkeypatch.setattr(model_runner, "wait_event", reading_results)
    monkeypatch.setattr(device, "wait_event", reading_results)

    @contextlib.contextmanager
    def strict():
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(0)

    return strict


def test_aura_prompts_and_sampled_decodes_queue_without_waiting(tiny, no_waits):
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.prompts import vl_request
    from aura_omni.engine.sampling_params import SamplingParams
    from aura_omni.media.vision_preprocess import preprocess_image
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM

    model = Qwen3VLForCausalLM.from_pretrained(tiny["aura"], device="cuda")
    engine = LLMEngine(model, EngineConfig(max_model_len=512, kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05,
                                           enable_prefix_caching=True))
    vision = [preprocess_image(np.random.RandomState(0).randint(0, 256, (64, 96, 3), dtype=np.uint8))]
    ids = [151644, 872, 198, 151652] + [151655] * vision[0].num_tokens + [151653, 9707, 151645, 198, 151644, 77091, 198]
    params = [SamplingParams(temperature=0.5, top_k=20, top_p=0.9, min_p=0.05, logit_bias={13: 1.0}, min_tokens=2,
                             max_tokens=12, ignore_eos=True),  # AURA's shipped sampling, and every other knob
              SamplingParams(temperature=0.7, seed=3, presence_penalty=0.2, max_tokens=12, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)]

    def turn(tag: str) -> dict[str, list[int]]:
        with torch.inference_mode():
            encoded = model.encode_vision(vision)  # a realtime session encodes a window as it arrives
            req = vl_request(model.build_prompt(ids, vision, encoded), vision)  # the stage's add
        for i, p in enumerate(params):
            engine.add_request(f"{tag}{i}", req[0], p, req[1])
        got = {f"{tag}{i}": [] for i in range(len(params))}
        while engine.has_unfinished():
            for out in engine.step():
                got[out.request_id] += out.new_token_ids
        return got

    turn("warm")  # first use: graph captures, kernel choices, the allocators' first blocks (these may wait)
    with no_waits():
        got = turn("strict")  # a prompt (prefix-cached this time) beside sampled and seeded decodes
    assert all(len(tokens) == 12 for tokens in got.values())


def test_asr_clips_are_encoded_and_decoded_without_waiting(tiny, no_waits):
    from aura_omni.stages.asr.service import AsrService

    service = AsrService.from_pretrained(tiny["asr"], device="cuda", dtype=torch.float32)
    tower = service.model.audio_tower
    while tower.layer_graphs is not None and tower.layer_graphs.capture_next():  # as the server does once ready
        pass
    t = np.arange(32000) / 16000
    clips = [((0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32), 16000) for f in (220, 330, 440)]
    want = service.transcribe(clips, max_new_tokens=8)  # first use
    with no_waits():
        assert service.transcribe(clips, max_new_tokens=8) == want  # features, encoder graphs, prompts, decodes


def test_talker_prompts_and_sampled_frames_queue_without_waiting(tiny, no_waits):
    from aura_omni.stages.tts import Qwen3TTS, TTSRequest

    tts = Qwen3TTS.load(tiny["tts"], device="cuda")
    reqs = [TTSRequest(text=text, task_type="CustomVoice", speaker="Vivian", language="English", do_sample=True,
                       subtalker_dosample=True, seed=seed, max_new_tokens=16)
            for seed, text in ((1, "Hello world, this is a test."), (2, "A second voice, a little longer than that."))]
    want = tts.generate_codes(reqs)  # first use: the frame decoder's graphs for this batch
    with no_waits():
        got = tts.generate_codes(reqs)  # prompts embedded together, then frames sampled with the shipped knobs
    assert all(torch.equal(g, w) for g, w in zip(got, want))  # seeded: the same frames
