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


def test_graphed_stage_steps_equal_each_stream_decoded_alone_on_the_cpu(tmp_path):
    """Streams join at different times, so the graphed steps run at several batch buckets (padded with the
    scratch row) and at every window length. A last odd chunk is padded up to the next window and trimmed, except
    stream 0's, not marked last, which is decoded as pieces of captured lengths (3 frames = 2 + 1)."""
    from aura_omni.models.qwen3_tts.code2wav import Code2Wav
    from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine
    from aura_omni.testing.tiny_codec import write_tiny_codec

    cpu = Code2Wav.from_codec_dir(write_tiny_codec(tmp_path))
    gpu = Code2Wav.from_codec_dir(tmp_path, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        stage = Code2WavStageEngine(gpu)
        stage.configure(max_batch=8, windows=[1, 2, 4], cuda_graphs=True)
        gen = torch.Generator().manual_seed(0)
        codes = [torch.randint(0, 2048, (10, 16), generator=gen) for _ in range(5)]
        splits = [[1, 2, 4, 3]] * 5
        sessions = [Code2WavSession() for _ in codes]
        got, at = [[] for _ in codes], [0] * 5
        for k in range(4 + 4):  # stream i starts at round i: batches of 1..5 streams, mixed lengths
            for i in range(5):
                j = k - i
                if 0 <= j < 4:
                    n = splits[i][j]
                    stage.add(f"{i}.{j}", Code2WavChunk(sessions[i], codes[i][at[i]:at[i] + n], last=j == 3 and i > 0))
                    at[i] += n
            while stage.has_work():
                for out in stage.step():
                    got[int(out.request_id.split(".")[0])].append(torch.from_numpy(out.item))
        assert len(stage.graphs) >= 3  # several buckets and windows were replayed
        for i, c in enumerate(codes):
            assert torch.allclose(torch.cat(got[i]), cpu.decode(c), atol=1e-4, rtol=0), i
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
