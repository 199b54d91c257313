"""A stage samples while another stage's CUDA graph is being captured (the server captures graphs in its lulls after
ready): torch locks its default CUDA generator for the capture, so the sampler's draws must not use it (an H200 soak
saw AURA's step fail with "Offset increment outside graph capture encountered unexpectedly"). Skipped without CUDA."""

import threading

import pytest
import torch

from aura_omni.engine.sampler import Sampler
from aura_omni.engine.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class _Row:
    def __init__(self, params: SamplingParams):
        self.params, self.prompt_token_ids, self.output_token_ids = params, [], []
        self.eos_token_ids, self.generator, self.grammar = [], None, None


def test_sampling_on_one_thread_while_another_captures_a_graph():
    from aura_omni.layers import cuda_graph

    device = torch.device("cuda")
    x = torch.randn(256, 256, device=device)
    logits = torch.randn(4, 1000, device=device)  # before the capture: it locks the default generator
    capturing, sampled = threading.Event(), threading.Event()
    calls = []

    def body():  # called twice: a warm-up on the capture's stream (cuBLAS's handle), then under capture
        calls.append(1)
        if len(calls) == 2:
            capturing.set()
            sampled.wait(30)  # the capture stays open until the other thread has drawn
        return x @ x

    stream = cuda_graph.private_stream("cuda")
    result = {}
    capture = threading.Thread(target=lambda: result.setdefault(
        "graph", cuda_graph.capture(body, device, stream)))
    capture.start()
    assert capturing.wait(30)
    try:
        rows = [_Row(SamplingParams(temperature=1.0)), _Row(SamplingParams(temperature=0.8, top_p=0.9)),
                _Row(SamplingParams(temperature=1.0, seed=3)), _Row(SamplingParams(temperature=0))]
        tokens = Sampler()(logits, rows)
        torch.cuda.current_stream().synchronize()
    finally:
        sampled.set()
        capture.join(60)
    assert tokens.shape == (4,) and int(tokens[3]) == int(logits[3].argmax())
    graph, out = result["graph"]
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, x @ x, rtol=1e-3, atol=1e-3)
    cuda_graph.reset([graph])
    cuda_graph.release_stream(stream)
