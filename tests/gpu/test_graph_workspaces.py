"""CUDA graphs and cuBLAS workspaces (layers/cuda_graph.py): a graph's GEMMs write the cuBLAS workspace of its
capture stream at every replay, and torch frees that workspace when any graph captured on the stream goes. Graphs of
different families, each on its private stream, must survive another family's graph being reset and its memory
reused. Skipped without CUDA."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_a_reset_graph_of_another_family_leaves_a_live_graph_and_new_memory_alone():
    from aura_omni.layers import cuda_graph

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(512, 4096, device="cuda", generator=g, dtype=torch.bfloat16)  # shapes that use a workspace
    w = torch.randn(4096, 4096, device="cuda", generator=g, dtype=torch.bfloat16)
    want = a @ w.T
    live_stream, other_stream = cuda_graph.private_stream("cuda"), cuda_graph.private_stream("cuda")
    assert live_stream.cuda_stream != other_stream.cuda_stream
    live, out = cuda_graph.capture(lambda: a @ w.T, torch.device("cuda"), live_stream)
    other, _ = cuda_graph.capture(lambda: a @ w.T * 2, torch.device("cuda"), other_stream)
    cuda_graph.reset([other])
    del other
    cuda_graph.release_stream(other_stream)
    sentinels = []
    for _ in range(4):  # memory handed out now, on either stream, is nobody's workspace
        for stream in (live_stream, torch.cuda.current_stream()):
            with torch.cuda.stream(stream):
                sentinels.append(torch.full((8 << 20,), 7.0, device="cuda"))
    torch.cuda.synchronize()
    for _ in range(10):
        live.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out.float(), want.float(), rtol=1e-2, atol=0.5)
    assert all(bool((s == 7.0).all()) for s in sentinels)
    cuda_graph.reset([live])
    cuda_graph.release_stream(live_stream)
