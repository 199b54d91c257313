"""AsrService on tiny real-layout checkpoints: loading, prompts, silence, bad input, long audio."""

import json

import numpy as np
import pytest
import torch

from aura_omni.stages.asr.service import AsrService
from aura_omni.stages.asr.transcript import Transcript, UnsupportedLanguageError
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.media.audio import AudioDecodeError
from aura_omni.models.loader import CheckpointError
from aura_omni.models.qwen3_asr import Qwen3ASR, Qwen3ASRConfig, preset_config_path
from aura_omni.testing.tiny_asr import write_tiny_asr

SR = 16000


def tone(seconds, sr=SR, freq=220.0):
    t = np.arange(int(seconds * sr)) / sr
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.1 * np.sin(2 * np.pi * 3.1 * freq * t)).astype(np.float32)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_asr(tmp_path_factory.mktemp("asr"), size="1.7b")


@pytest.fixture(scope="module")
def svc(ckpt):
    return AsrService.from_pretrained(ckpt)


def test_tiny_checkpoint_has_the_original_layout(ckpt):
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    assert "thinker.lm_head.weight" in index and "thinker.audio_tower.conv_out.weight" in index
    assert "thinker.model.layers.0.self_attn.q_norm.weight" in index
    assert len(set(index.values())) == 2
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["thinker_config"]["audio_token_id"] == 151676
    tok = json.loads((ckpt / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert tok["151669"]["content"] == "<|audio_start|>" and tok["151676"]["content"] == "<|audio_pad|>"
    assert tok["151704"] == {**tok["151704"], "content": "<asr_text>", "special": False}


def test_tied_layout_has_no_head_and_shares_the_embedding(tmp_path):
    d = write_tiny_asr(tmp_path, size="0.6b")
    from safetensors import safe_open

    with safe_open(str(d / "model.safetensors"), "pt") as f:
        assert not any("lm_head" in k for k in f.keys())
    model = Qwen3ASR.from_pretrained(d, dtype=torch.float32)
    assert model.lm_head.weight is model.embed_tokens.weight


def test_prompt_ids_match_the_released_template(svc):
    # ids measured with the real Qwen3-ASR processor for 2 s of audio (shared reference doc, section 1.6)
    ids = svc.prompts.build(26)
    assert ids == [151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669] + [151676] * 26 + \
        [151670, 151645, 198, 151644, 77091, 198]
    forced = svc.prompts.build(26, context="tiny test", language="English")
    assert forced[-3:] == [11528, 6364, 151704]  # "language", " English", <asr_text> (same section)


def test_context_goes_in_the_system_turn(svc):
    ids = svc.prompts.build(3, context="Kubernetes, kubectl")
    text = svc.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nKubernetes, kubectl<|im_end|>\n<|im_start|>user\n<|audio_start|>")


def test_transcribe_batch_returns_one_transcript_per_clip(svc):
    out = svc.transcribe([(tone(2), SR), (tone(0.3), SR)], max_new_tokens=4)
    assert len(out) == 2 and all(isinstance(t, Transcript) for t in out)
    assert all(t.text for t in out)  # random weights still write something


def test_batched_greedy_equals_each_clip_alone(svc):
    clips = [(tone(2), SR), (tone(1.2, freq=330), SR)]
    together = svc.transcribe(clips, max_new_tokens=5)
    alone = [svc.transcribe([c], max_new_tokens=5)[0] for c in clips]
    assert together == alone


def test_encoding_a_burst_of_clips_waits_for_nothing_and_does_nothing_per_clip(svc):
    """32 sessions commit at once: preparing a clip is host work only (the stage's `add`), and the clips' features,
    audio encoding and prompt embeddings are one set of operations for them all at the next step (each torch call a
    stage thread makes may wait for the interpreter lock), with no host synchronisation (a boolean mask, `.item()`);
    the audio tokens equal each clip encoded alone."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:  # views launch nothing
                self.names.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    def ops(clips):
        with Ops() as mode:
            pieces = svc.prepare([(c, SR) for c in clips])
        assert mode.names == []
        with Ops() as mode:
            svc.engine_prompts(pieces)
        return mode.names

    two = ops([tone(2), tone(9, freq=330)])
    five = ops([tone(2), tone(9, freq=330), tone(0.4), tone(5, freq=180), tone(3)])
    assert two == five
    assert not set(five) & {"nonzero", "_local_scalar_dense", "item", "masked_select", "index_put", "index_put_"}
    clips = [tone(2), tone(9, freq=330), tone(0.4)]
    features = svc.features(svc.prepare([(c, SR) for c in clips]))
    together = torch.cat(svc.model.encode_audio(features))
    alone = torch.cat([svc.model.encode_audio([f])[0] for f in features])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)


def test_the_convolutions_see_one_batch_shape_whatever_the_burst(svc):
    """cuDNN times every new convolution shape on first sight (~0.3 s on an H200, with `cudnn.benchmark` on): a
    burst's chunks are convolved in batches of CONV_BATCH, the last padded with silence that is never read back."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from aura_omni.models.qwen3_asr_encoder import CONV_BATCH

    class ConvBatches(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.startswith(("conv2d", "convolution")):
                self.sizes.append(args[0].shape[0])
            return func(*args, **(kwargs or {}))

    for seconds in ([0.4], [3] * 5, [20, 15.5]):  # 1 chunk, 15, and 36: two batches
        features = svc.features(svc.prepare([(tone(s, freq=200 + 40 * i), SR) for i, s in enumerate(seconds)]))
        with ConvBatches() as mode:
            together = torch.cat(svc.model.encode_audio(features))
        assert mode.sizes and set(mode.sizes) == {CONV_BATCH}, mode.sizes
        alone = torch.cat([svc.model.encode_audio([f])[0] for f in features])
        torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)


def test_forced_language_is_reported(svc):
    out = svc.transcribe([(tone(1), SR)], language="en", max_new_tokens=3)
    assert out[0].language == "English"


def test_silence_gives_an_empty_transcript_without_error(svc):
    out = svc.transcribe([(np.zeros(SR, dtype=np.float32), SR), (np.full(4000, 1e-6, dtype=np.float32), SR)])
    assert out == [Transcript("", ""), Transcript("", "")]


@pytest.mark.parametrize("wav", [np.zeros(0, dtype=np.float32), np.full(1000, np.nan, dtype=np.float32)])
def test_empty_or_broken_audio_is_a_decode_error(svc, wav):
    with pytest.raises(AudioDecodeError):
        svc.transcribe([(wav, SR)])


def test_unknown_language_is_rejected(svc):
    with pytest.raises(UnsupportedLanguageError):
        svc.transcribe([(tone(1), SR)], language="Klingon")


def test_stereo_int16_at_44k_is_accepted(svc):
    wav = (tone(1, sr=44100)[:, None] * np.array([[1.0, 0.5]]) * 32767).astype(np.int16)
    pieces = svc.prepare([(wav, 44100)])
    assert len(pieces) == 1 and svc.features(pieces)[0].shape == (128, 100)


def test_long_audio_is_split_and_texts_joined(ckpt):
    svc = AsrService.from_pretrained(ckpt, max_seconds=2.0)
    wav = np.concatenate([tone(1.5), np.zeros(SR // 2, dtype=np.float32), tone(1.5, freq=330)])
    pieces = svc.prepare([(wav, SR)])
    assert len(pieces) == 2 and all(f.shape[1] <= 200 for f in svc.features(pieces))
    outputs = svc.generate(pieces, SamplingParams(temperature=0, max_tokens=3))
    texts = [svc.parse(o, None).text for o in outputs]
    assert svc.finish(pieces, outputs, 1)[0].text == " ".join(texts)


def test_seeded_sampling_is_reproducible(svc):
    a = svc.transcribe([(tone(1), SR)], max_new_tokens=4, temperature=1.0, seed=3)
    b = svc.transcribe([(tone(1), SR)], max_new_tokens=4, temperature=1.0, seed=3)
    assert a == b


def test_presets_have_the_released_sizes():
    big = Qwen3ASRConfig.from_hf(json.loads(preset_config_path("Qwen/Qwen3-ASR-1.7B").read_text()))
    small = Qwen3ASRConfig.from_hf(json.loads(preset_config_path("Qwen/Qwen3-ASR-0.6B").read_text()))
    assert (big.audio.d_model, big.audio.output_dim, big.text.hidden_size, big.tie_word_embeddings) == (1024, 2048, 2048, False)
    assert (small.audio.d_model, small.audio.output_dim, small.text.hidden_size, small.tie_word_embeddings) == (896, 1024, 1024, True)
    assert big.text.mrope_section == [24, 20, 20] and big.audio.window_tokens == 104
    with pytest.raises(CheckpointError, match="no preset"):
        preset_config_path("Qwen/Qwen3-ASR-99B")


def test_dummy_load_format_builds_random_weights(ckpt):
    model = Qwen3ASR.from_pretrained(ckpt, dtype=torch.float32, load_format="dummy")
    assert model.backbone.layers[0].input_layernorm.weight.eq(1).all()
    assert torch.isfinite(model.lm_head.weight).all()


def transcribe_concurrently(svc, clips) -> list:
    """Each clip transcribed on a thread of its own, all at once."""
    import threading

    got = [None] * len(clips)
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, svc.transcribe([clips[i]], max_new_tokens=5)))
               for i in range(len(clips))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_concurrent_transcriptions_share_the_engine_and_match_alone(svc):
    clips = [(tone(2), SR), (tone(0.7, freq=300), SR), (tone(1.3, freq=500), SR)]
    alone = [svc.transcribe([c], max_new_tokens=5) for c in clips]
    assert transcribe_concurrently(svc, clips) == alone
    stats = svc.stats()
    assert stats["running"] == 0 and stats["free_blocks"] == stats["total_blocks"]


def test_pipeline_stage_returns_the_transcript_as_data(svc):
    import asyncio

    from aura_omni.stages.asr.stage import AsrPipelineStage
    from aura_omni.stages.asr.transcript import Transcript

    stage = AsrPipelineStage(svc)
    got = asyncio.run(stage.transcribe(tone(1), SR, request_id="r", language="English", sampling={"max_tokens": 3}))
    assert got == svc.transcribe([(tone(1), SR)], language="English", max_new_tokens=3)[0]
    assert got.language == "English"
    assert asyncio.run(stage.transcribe(np.zeros(SR, dtype=np.float32), SR, request_id="s")) == Transcript("", "")


def test_the_pipelines_transcription_takes_the_requests_asr_options_seed_included(svc):
    """`AuraOmniPipeline.transcribe`, the one way into ASR (a turn's own, a realtime session's): the request's language
    and its ASR sampling, seed included, reach the engine: sampled at temperature 1, the seed makes it the same
    transcript as the service's with that seed."""
    import asyncio

    from aura_omni.pipeline.orchestrator import AuraOmniPipeline
    from aura_omni.pipeline.turn import TurnRequest
    from aura_omni.stages.asr.stage import AsrPipelineStage

    pipeline = AuraOmniPipeline(AsrPipelineStage(svc), None, None)
    sampling = {"temperature": 1.0, "max_tokens": 6, "seed": 3}
    req = TurnRequest("t", audio=(tone(1), SR), asr_language="English", asr_sampling=sampling)
    got = [asyncio.run(pipeline.transcribe(req)) for _ in range(2)]
    want = svc.transcribe([(tone(1), SR)], language="English", max_new_tokens=6, temperature=1.0, seed=3)[0]
    assert got == [want, want]


def test_a_cancelled_transcription_is_aborted_and_frees_its_blocks(svc):
    """The awaiting task is cancelled (the client left) while its pieces decode: the loop aborts them."""
    import asyncio

    svc.transcribe([(tone(1.0), SR)], max_new_tokens=2)
    before = svc.stats()
    steps = svc.loop.counters.steps

    async def leave():
        task = asyncio.create_task(svc.atranscribe([(tone(2.0), SR)], max_new_tokens=4000, temperature=1.0))
        while svc.loop.counters.steps < steps + 3:  # it is decoding
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(leave(), 60))
    after = svc.stats()
    assert after["running"] == after["waiting"] == 0 and after["free_blocks"] == before["free_blocks"]


def test_requests_added_together_are_encoded_in_one_batch_and_match_alone(svc):
    """The stage runs the audio encoder at its step, once for every request added since the last step."""
    import time

    clips = [(tone(2), SR), (tone(0.7, freq=300), SR), (np.zeros(SR, np.float32), SR)]  # the last is silence
    alone = [svc.transcribe([c], max_new_tokens=5) for c in clips]
    batches, tower = [], svc.model.audio_tower
    encode = tower.encode
    tower.encode = lambda feats: batches.append(len(feats)) or encode(feats)
    try:
        busy = svc.loop.call(lambda: time.sleep(0.3))  # the loop is busy while the three requests arrive
        got = transcribe_concurrently(svc, clips)
        busy.result()
    finally:
        del tower.encode
    assert batches == [2]  # the two voiced clips in one encoder call; silence never reaches the model
    assert got == alone


def test_a_stages_stall_limit_is_its_deploy_key(ckpt):
    import torch

    from aura_omni.deploy import parse_deploy_config
    from aura_omni.pipeline.runtime import load_stage
    from aura_omni.stages.supervision import default_stall_s

    deploy = parse_deploy_config({"stages": [{"stage_id": 0, "model": str(ckpt), "devices": "cpu", "stall_s": 5}]})
    service = load_stage(deploy, deploy.stages[0], "cpu", None, None)
    try:
        assert service.loop.stall_s == 5
    finally:
        service.close()
    assert default_stall_s(torch.device("cpu")) == 600 and default_stall_s(torch.device("cuda", 0)) == 60


def test_the_stage_captures_encoder_graphs_only_while_it_holds_no_request(ckpt):
    """A capture holds the stage's loop: the server's lull captures (`when_idle`) wait while a clip is in the stage;
    the warm start's (before the server is ready) do not."""
    from types import SimpleNamespace

    from aura_omni.stages.asr.service import AsrJob, AsrStageEngine

    service = AsrService.from_pretrained(ckpt)
    try:
        taken = []
        service.model.audio_tower.layer_graphs = SimpleNamespace(
            missing=lambda: [(2, 64)], capture_next=lambda max_windows=None: taken.append(max_windows) or True)
        engine = AsrStageEngine(service)  # driven here, not by the loop's thread
        assert engine.stats()["graphs_pending"] == 1
        engine.add("busy", AsrJob([(tone(1.0), SR)], None, None, SamplingParams(max_tokens=2)))
        assert engine.capture_next_graph(when_idle=True) is False and taken == []
        assert engine.capture_next_graph(max_windows=1) is True and taken == [1]
        engine.abort("busy")
        assert engine.capture_next_graph(when_idle=True) is True and taken == [1, None]
    finally:
        service.close()
