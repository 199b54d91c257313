"""CUDA code paths (paged attention backends, decode CUDA graphs, device-side sampling, GPU vision and audio
front ends) give the same greedy results as the CPU reference path, in fp32 on tiny real-layout checkpoints.

Skipped without CUDA; scripts/gpu_check.sh runs it on the H200.
"""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("enforce_eager", [True, False])
def test_engine_greedy_tokens_match_cpu(enforce_eager):
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.sampling_params import SamplingParams
    from tests.unit.engine_tiny_lm import prompts, tiny_lm

    batch = prompts([5, 17, 40, 3, 64])
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    outs = {}
    for device in ("cpu", "cuda"):
        model = tiny_lm().to(device)
        cfg = EngineConfig(max_model_len=256, max_num_seqs=8, enforce_eager=enforce_eager,
                           kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05)
        outs[device] = LLMEngine(model, cfg).generate(batch, params)
    assert outs["cuda"] == outs["cpu"]


def test_prefill_graphs_replay_prefix_cached_turns_like_eager_steps():
    """Prompts, prefix-cached continuations and chunks beside decodes through the captured prefill graphs (Triton
    paged prefill) give the eager steps' tokens."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.sampling_params import SamplingParams
    from tests.unit.engine_tiny_lm import prompts, tiny_lm

    system, turns = prompts([70])[0], prompts([5, 30, 90, 2], seed=4)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    outs, graph_steps = {}, []
    for tokens in (0, 128):
        model = tiny_lm().to("cuda")
        engine = LLMEngine(model, EngineConfig(max_model_len=512, max_num_seqs=8, max_num_batched_tokens=64,
                                               enable_prefix_caching=True, prefill_graph_tokens=tokens,
                                               kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05))
        if tokens:
            graphs = engine.runner.prefill_graphs
            assert graphs is not None and graphs.graphs, "prefill graphs were not captured"
            run = graphs.run
            graphs.run = lambda t, *a: graph_steps.append(t) or run(t, *a)
        first = engine.generate([system + t for t in turns[:2]], params)
        outs[tokens] = first + engine.generate([system + t for t in turns[2:]], params)  # system prompt cached
        assert engine.stats()["prefix_cache_hit_rate"] > 0
    assert outs[128] == outs[0]
    assert graph_steps


@pytest.mark.parametrize("temperature", [0.0, 0.5])
def test_logit_bias_steers_every_token_through_the_gpu_step_paths(temperature):
    """A request's logit_bias holds on every CUDA path: eager steps, decode graphs (whose greedy pick is made in the
    graph) and prefill graphs over a cached prefix (a turn after its prefix prefill), greedy and sampled. A bench
    forces <|silent|> or words on random weights this way; on the H200 a realtime turn's bias seemed not to hold."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.sampling_params import SamplingParams
    from tests.unit.engine_tiny_lm import prompts, tiny_lm

    favoured = [11, 42]
    params = SamplingParams(temperature=temperature, max_tokens=10, ignore_eos=True, seed=3,
                            logit_bias={favoured[0]: 100.0, favoured[1]: 100.0})
    plain = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    system, turns = prompts([70])[0], prompts([5, 40, 3, 20], seed=4)
    for eager, tokens in ((True, 0), (False, 0), (False, 128)):
        engine = LLMEngine(tiny_lm().to("cuda"), EngineConfig(
            max_model_len=256, max_num_seqs=8, enforce_eager=eager, prefill_graph_tokens=tokens,
            enable_prefix_caching=True, kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05))
        engine.generate([system], SamplingParams(temperature=0, max_tokens=1))  # a turn's prefix prefill, cached
        *outs, other = engine.generate([system + t for t in turns], [params, params, params, plain])  # one batch
        assert engine.stats()["prefix_cache_hit_rate"] > 0
        for out in outs:
            assert set(out) <= set(favoured), (eager, tokens, out)
        assert set(other) - set(favoured)  # the bias, not the model, chose those tokens


def test_patches_made_on_the_gpu_equal_the_host_ones():
    from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video

    rng = np.random.RandomState(1)
    for item in (preprocess_image(rng.randint(0, 256, (480, 640, 3), dtype=np.uint8)),
                 preprocess_video(rng.randint(0, 256, (3, 480, 640, 3), dtype=np.uint8), video_fps=2.0)):
        # same uint8 frames and formula; CUDA's division may round the last bit differently
        torch.testing.assert_close(item.patches(torch.device("cuda")).cpu(), item.pixel_values, atol=1e-6, rtol=0)


def test_aura_greedy_tokens_match_cpu(tiny):
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.prompts import vl_request
    from aura_omni.engine.sampling_params import SamplingParams
    from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM

    rng = np.random.RandomState(0)
    vision = [preprocess_image(rng.randint(0, 256, (64, 96, 3), dtype=np.uint8)),
              preprocess_video(rng.randint(0, 256, (4, 64, 64, 3), dtype=np.uint8), video_fps=2.0)]
    ids = ([151644, 872, 198, 151652] + [151655] * vision[0].num_tokens + [151653]
           + [27, 15, 13, 17, 6486, 29, 151652] + [151656] * vision[1].tokens_per_group + [151653]
           + [27, 16, 13, 17, 6486, 29, 151652] + [151656] * vision[1].tokens_per_group + [151653]
           + [9707, 151645, 198, 151644, 77091, 198])
    outs = {}
    for device in ("cpu", "cuda"):
        model = Qwen3VLForCausalLM.from_pretrained(tiny["aura"], device=device)
        engine = LLMEngine(model, EngineConfig(max_model_len=512, kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05))
        with torch.inference_mode():
            req = vl_request(model.build_prompt(ids, vision), vision)
        engine.add_request("r", *req[:1], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), req[1])
        tokens = []
        while engine.has_unfinished():
            for o in engine.step():
                tokens += o.new_token_ids
        outs[device] = tokens
    assert outs["cuda"] == outs["cpu"]


def test_a_camera_turn_after_its_prefix_prefill_matches_cpu(tiny):
    """A realtime turn's shape on AURA: the prompt through a video window prefilled first (a one-token request whose
    blocks stay cached), then the turn (words after the window) served from that prefix. Its greedy tokens match the
    CPU's, and a logit_bias still decides every token."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.prompts import vl_request
    from aura_omni.engine.sampling_params import SamplingParams
    from aura_omni.media.vision_preprocess import preprocess_video
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM

    rng = np.random.RandomState(2)
    vision = [preprocess_video(rng.randint(0, 256, (2, 96, 128, 3), dtype=np.uint8), video_fps=2.0)]
    prefix = ([151644, 8948, 198, 2610, 525, 264, 10950, 151645, 198, 151644, 872, 198]
              + [27, 15, 13, 15, 6486, 29, 151652] + [151656] * vision[0].tokens_per_group + [151653])
    turn = prefix + [9707, 11, 1128, 653, 498, 1490, 30, 151645, 198, 151644, 77091, 198]
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    biased = SamplingParams(temperature=0.5, max_tokens=12, ignore_eos=True, seed=1, logit_bias={279: 100.0})
    outs = {}
    for device in ("cpu", "cuda"):
        model = Qwen3VLForCausalLM.from_pretrained(tiny["aura"], device=device)
        engine = LLMEngine(model, EngineConfig(max_model_len=512, enable_prefix_caching=True,
                                               prefill_graphs=device == "cuda",  # the turn replays one on the GPU
                                               kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05))

        def run(ids, params, rid):
            with torch.inference_mode():
                req = vl_request(model.build_prompt(ids, vision), vision)
            engine.add_request(rid, req[0], params, req[1])
            tokens = []
            while engine.has_unfinished():
                for o in engine.step():
                    tokens += o.new_token_ids
            return tokens

        run(prefix, SamplingParams(temperature=0, max_tokens=1), "prefix")
        outs[device] = run(turn, greedy, "turn")
        assert engine.stats()["prefix_cache_hit_rate"] > 0  # the turn was served from the prefix
        assert set(run(turn, biased, "biased")) == {279}
    assert outs["cuda"] == outs["cpu"]


def test_vision_graphs_replay_equals_the_eager_encoder(tiny):
    from aura_omni.media.vision_preprocess import preprocess_image, preprocess_video
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
    from aura_omni.models.vision_graphs import VisionGraphs

    model = Qwen3VLForCausalLM.from_pretrained(tiny["aura"], device="cuda")
    graphs = VisionGraphs(model.visual)
    rng = np.random.RandomState(1)

    def items():
        return [preprocess_image(rng.randint(0, 256, (64, 96, 3), dtype=np.uint8)),
                preprocess_video(rng.randint(0, 256, (4, 64, 64, 3), dtype=np.uint8), video_fps=2.0)]

    with torch.inference_mode():
        for _ in range(3):  # eager (first sight), capture, replay with new pixels
            vision = items()
            pixels = torch.cat([v.pixel_values for v in vision]).cuda()
            grids = [v.grid_thw for v in vision]
            (got, got_ds), (want, want_ds) = graphs(pixels, grids), model.visual(pixels, grids)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            for g, w in zip(got_ds, want_ds):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert len(graphs._graphs) == 1


def test_vision_graphs_stay_exact_as_layouts_are_evicted_and_their_streams_reused(tiny):
    """More layouts than graphs kept: each new one evicts the least recently used and captures on its stream (the
    evicted graph is reset first, layers/cuda_graph.py); the kept graphs keep replaying the eager encoder exactly."""
    from aura_omni.media.vision_preprocess import preprocess_image
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
    from aura_omni.models.vision_graphs import VisionGraphs

    model = Qwen3VLForCausalLM.from_pretrained(tiny["aura"], device="cuda")
    graphs = VisionGraphs(model.visual, max_graphs=2)
    rng = np.random.RandomState(2)
    with torch.inference_mode():
        # grids 16, 20, 24, 28 patches square (smaller images are resized up to the same 16x16): a layout is captured
        # the second time it is seen, and from the third capture on each evicts the least recently used
        for size in [256, 320, 256, 384, 320, 256, 448, 384] * 2:
            v = preprocess_image(rng.randint(0, 256, (size, size, 3), dtype=np.uint8))
            pixels = v.pixel_values.cuda()
            (got, _), (want, _) = graphs(pixels, [v.grid_thw]), model.visual(pixels, [v.grid_thw])
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert len(graphs._graphs) == 2 and len(graphs._owned) == 2  # two streams served every capture


def _speech_like(seconds: float = 2.0) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * np.random.RandomState(0).randn(t.size)).astype(np.float32)


def test_asr_transcript_tokens_match_cpu(tiny):
    from aura_omni.stages.asr.service import AsrService

    outs = {d: AsrService.from_pretrained(tiny["asr"], device=d, dtype=torch.float32).transcribe(
        [(_speech_like(), 16000)], max_new_tokens=16) for d in ("cpu", "cuda")}
    assert outs["cuda"] == outs["cpu"]


def test_asr_encoder_layer_graphs_replay_the_eager_layers(tiny):
    """Every bucket captured (the largest first, sharing one pool), then bursts of clips of mixed lengths replay
    them with new features each time and equal the eager encoder; a step past the largest bucket stays eager."""
    from aura_omni.models.qwen3_asr import Qwen3ASR

    model = Qwen3ASR.from_pretrained(tiny["asr"], device="cuda", dtype=torch.float32)
    eager = Qwen3ASR.from_pretrained(tiny["asr"], device="cuda", dtype=torch.float32).audio_tower
    tower = model.audio_tower
    tower.use_layer_graphs(max_windows=4, capture=True)
    assert tower.layer_graphs.missing(1) == [(1, 104), (1, 64), (1, 32)]
    while tower.layer_graphs.capture_next():
        pass
    assert not tower.layer_graphs.missing() and len(tower.layer_graphs.graphs) == 9
    torch.manual_seed(0)
    with torch.inference_mode():
        for lengths in [(300,), (300, 80, 137), (930,), (300,) * 5, (137, 300)]:
            feats = [torch.randn(128, n, device="cuda") for n in lengths]
            for got, want in zip(tower(feats), eager(feats)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_asr_does_not_wait_for_other_stages_work_on_the_gpu(tiny):
    """The ASR stage runs on its own stream: a transcription finishes while earlier work of the other stages (here a
    long spin on the default stream) is still running, with the same tokens."""
    from aura_omni.stages.asr.service import AsrService

    service = AsrService.from_pretrained(tiny["asr"], device="cuda", dtype=torch.float32)
    want = service.transcribe([(_speech_like(), 16000)], max_new_tokens=16)  # builds the engine, captures graphs
    torch.cuda._sleep(4_000_000_000)  # ~2 s of GPU clock cycles on the default stream
    busy = torch.cuda.Event()
    busy.record()
    got = service.transcribe([(_speech_like(), 16000)], max_new_tokens=16)
    assert not busy.query()  # the spin has not finished: the transcription never waited for it
    assert got == want
    torch.cuda.synchronize()


def test_tts_greedy_codes_and_audio_match_cpu(tiny):
    from aura_omni.stages.tts import Qwen3TTS, TTSRequest

    req = TTSRequest(text="Hello world, this is a test.", task_type="CustomVoice", speaker="Vivian", language="English",
                     do_sample=False, subtalker_dosample=False, max_new_tokens=24)
    results = {}
    for device in ("cpu", "cuda"):
        tts = Qwen3TTS.load(tiny["tts"], device=device)
        codes = tts.generate_codes([req])[0].cpu()
        audio = np.concatenate(list(tts.stream(req, 1, 5)))
        results[device] = (codes, audio)
    assert torch.equal(results["cuda"][0], results["cpu"][0])
    assert np.abs(results["cuda"][1] - results["cpu"][1]).max() < 1e-4


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_stages_on_the_second_gpu_match_cpu(tiny):
    """Deploy `devices: "1"`: graph capture, Triton launches and the Talker's frame graphs follow the stage's GPU."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.sampling_params import SamplingParams
    from aura_omni.stages.tts import Qwen3TTS, TTSRequest
    from tests.unit.engine_tiny_lm import prompts, tiny_lm

    batch = prompts([5, 17, 40])
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    cfg = lambda: EngineConfig(max_model_len=256, max_num_seqs=8, kv_cache_bytes=64 << 20, gpu_memory_utilization=0.05)
    assert LLMEngine(tiny_lm().to("cuda:1"), cfg()).generate(batch, params) == LLMEngine(tiny_lm(), cfg()).generate(batch, params)
    req = TTSRequest(text="Second GPU.", task_type="CustomVoice", speaker="Vivian", language="English",
                     do_sample=False, subtalker_dosample=False, max_new_tokens=12)
    codes = {d: Qwen3TTS.load(tiny["tts"], device=d).generate_codes([req])[0].cpu() for d in ("cpu", "cuda:1")}
    assert torch.equal(codes["cuda:1"], codes["cpu"])


def test_stages_on_one_gpu_keep_their_own_kernel_switches():
    """A stage asking for plain torch and a CPU stage, started after a fast one, leave it its fused kernels; each
    engine steps with its own switches and all give the CPU's tokens."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.engine.sampling_params import SamplingParams
    from aura_omni.layers import attention_backend
    from tests.unit.engine_tiny_lm import prompts, tiny_lm

    batch = prompts([5, 17, 40])
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    cfg = lambda **k: EngineConfig(max_model_len=256, max_num_seqs=8, kv_cache_bytes=64 << 20,  # noqa: E731
                                   gpu_memory_utilization=0.05, **k)
    fused: dict[str, set[bool]] = {"fast": set(), "plain": set()}
    engines = {}
    for name, config in (("fast", cfg()), ("plain", cfg(fast_attention=False, gemv=False, pdl=False))):
        model = tiny_lm().to("cuda")
        model.backbone.register_forward_pre_hook(
            lambda module, args, n=name: fused[n].add(attention_backend.fused_layers_enabled(args[0])))
        engines[name] = LLMEngine(model, config, name=name)
    cpu = LLMEngine(tiny_lm(), cfg(), name="cpu")  # a CPU stage starting last
    want = cpu.generate(batch, params)
    assert engines["plain"].generate(batch, params) == want
    assert engines["fast"].generate(batch, params) == want
    assert fused == {"fast": {True}, "plain": {False}}
