"""Code2Wav on CUDA: the fused SnakeBeta kernel and the stage's graphed steps equal the eager torch path, in fp32 on
the tiny real-layout codec (and the full-size decoder's shapes for the kernel). Skipped without CUDA."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("shape", [(1, 1536, 100), (3, 96, 24000), (2, 7, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_snake_beta_equals_the_reference(shape, dtype):
    from aura_omni.layers import triton_snake

    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(shape, device="cuda", generator=g) * 3).to(dtype)
    alpha = torch.randn(shape[1], device="cuda", generator=g).to(dtype) * 0.3
    beta = torch.randn(shape[1], device="cuda", generator=g).to(dtype) * 0.3
    want = triton_snake.reference(x.float(), alpha.float(), beta.float())
    got = triton_snake.snake_beta(x, alpha, beta)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert got.dtype == dtype and torch.allclose(got.float(), want, atol=tol, rtol=tol)


def _five_streams(stage):
    """Streams join at different times, so the steps run at several batch sizes (1..5) and at every window
    length. A last odd chunk is padded up to the next window and trimmed, except stream 0's, not marked last, which
    is decoded as pieces of captured lengths (3 frames = 2 + 1). Returns each stream's codes and decoded audio."""
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession

    gen = torch.Generator().manual_seed(0)
    codes = [torch.randint(0, 2048, (10, 16), generator=gen) for _ in range(5)]
    splits = [[1, 2, 4, 3]] * 5
    sessions = [Code2WavSession() for _ in codes]
    got, at = [[] for _ in codes], [0] * 5
    for k in range(4 + 4):  # stream i starts at round i
        for i in range(5):
            j = k - i
            if 0 <= j < 4:
                n = splits[i][j]
                stage.add(f"{i}.{j}", Code2WavChunk(sessions[i], codes[i][at[i]:at[i] + n], last=j == 3 and i > 0))
                at[i] += n
        while stage.has_work():
            for out in stage.step():
                got[int(out.request_id.split(".")[0])].append(torch.from_numpy(out.item))
    return codes, [torch.cat(g) for g in got], sessions


def _tiny_code2wav_pair(tmp_path):
    from aura_omni.models.qwen3_tts.code2wav import Code2Wav
    from aura_omni.testing.tiny_codec import write_tiny_codec

    cpu = Code2Wav.from_codec_dir(write_tiny_codec(tmp_path))
    return cpu, Code2Wav.from_codec_dir(tmp_path, device="cuda")


@pytest.mark.parametrize("max_frames", [None, 4])
def test_graphed_stage_steps_equal_each_stream_decoded_alone_on_the_cpu(tmp_path, max_frames):
    """Graphs captured as steps need them, at several batch buckets (padded with the scratch row); with a budget of 4
    frames a step, each window length's own buckets (4 streams of 1 frame, 2 of 2, 1 of 4)."""
    from aura_omni.stages.code2wav import Code2WavStageEngine

    cpu, gpu = _tiny_code2wav_pair(tmp_path)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        stage = Code2WavStageEngine(gpu)
        stage.configure(max_batch=8, windows=[1, 2, 4], cuda_graphs=True, max_frames=max_frames)
        codes, got, _ = _five_streams(stage)
        assert len(stage.graphs) >= 3  # several buckets and windows were replayed
        if max_frames:
            assert {k for k, n in stage.graphs._graphs if n == 4} == {1}
        for i, c in enumerate(codes):
            assert torch.allclose(got[i], cpu.decode(c), atol=1e-4, rtol=0), i
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True


def test_batches_replay_a_lone_streams_graphs_in_turns_until_the_rest_are_captured_while_idle(tmp_path):
    """The warm start captures only bucket 1 (ESSENTIAL_BUCKET): batches of up to 5 streams then replay those
    graphs in turns, equal to the CPU, with no capture on a request's path; the rest are captured only while no
    stream is open."""
    import gc

    from aura_omni.stages.code2wav import ESSENTIAL_BUCKET, Code2WavStageEngine

    cpu, gpu = _tiny_code2wav_pair(tmp_path)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        stage = Code2WavStageEngine(gpu)
        stage.configure(max_batch=8, windows=[1, 2, 4], cuda_graphs=True)
        while stage.capture_next_graph(ESSENTIAL_BUCKET):
            pass
        essential = set(stage.graphs._graphs)
        assert essential and {b for b, _ in essential} == {1} and stage.graphs_missing() > 0
        codes, got, sessions = _five_streams(stage)
        assert set(stage.graphs._graphs) == essential  # no capture while serving
        for i, c in enumerate(codes):
            assert torch.allclose(got[i], cpu.decode(c), atol=1e-4, rtol=0), i
        assert not stage.capture_next_graph(when_idle=True)  # stream 0 is still open
        del sessions
        gc.collect()
        while stage.capture_next_graph(when_idle=True):
            pass
        assert stage.graphs_missing() == 0 and stage.stats()["graphs_pending"] == 0
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
