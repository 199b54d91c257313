"""Stages that load in parallel capture their graphs from several threads at once (layers/cuda_graph.py): torch begins
each capture with a device-wide synchronize, which CUDA refuses while another thread's stream is capturing, so the
captures must take turns; the warm-up runs before them need not. Skipped without CUDA."""

import threading

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_threads_capturing_at_once_all_get_working_graphs():
    from aura_omni.layers import cuda_graph

    device = torch.device("cuda")
    errors: list[BaseException] = []
    results: list[bool] = []
    start = threading.Barrier(4)

    def stage(seed: int) -> None:
        try:
            g = torch.Generator(device="cuda").manual_seed(seed)
            x = torch.randn(64, 1024, device="cuda", generator=g)
            w = torch.randn(1024, 1024, device="cuda", generator=g)
            stream = cuda_graph.private_stream(device)
            start.wait()
            graphs = [cuda_graph.capture(lambda k=k: (x @ w.T).relu_() * k, device, stream) for k in range(1, 13)]
            torch.cuda.current_stream().synchronize()
            for k, (graph, out) in enumerate(graphs, start=1):
                graph.replay()
                torch.cuda.current_stream().synchronize()
                results.append(bool(torch.allclose(out, (x @ w.T).relu_() * k, rtol=1e-3, atol=1e-3)))
            cuda_graph.reset([graph for graph, _ in graphs])
            del graphs
            cuda_graph.release_stream(stream)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=stage, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(results) == 4 * 12 and all(results)
