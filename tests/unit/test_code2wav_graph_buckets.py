"""Which Code2Wav graph a batch replays while the larger buckets are still captured in the background (the CUDA
replay itself is tests/gpu/test_code2wav_cuda.py): the order of captures and the turns a batch takes meanwhile."""

import torch

from aura_omni.models.qwen3_tts.code2wav_graphs import Code2WavGraphs, batch_buckets


def _graphs(captured: set[tuple[int, int]], later: bool) -> tuple[Code2WavGraphs, list]:
    """Graphs over windows 1, 2, 4 and buckets up to 8 whose replays and captures are recorded, not run."""
    g = object.__new__(Code2WavGraphs)
    g.windows, g.buckets, g.later = [1, 2, 4], batch_buckets(8), later
    g._graphs = dict.fromkeys(captured)
    calls = []

    def replay(slots, codes):
        bucket = next(k for k in g.buckets if k >= len(slots))
        calls.append(("replay" if (bucket, codes.shape[1]) in g._graphs else "capture", bucket, list(slots)))
        return torch.zeros(len(slots), codes.shape[1] * 1920)

    g._replay = replay
    return g, calls


def test_missing_graphs_come_smallest_bucket_first():
    g, _ = _graphs({(1, 1)}, later=True)
    assert g.missing() == [(1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (8, 4)]
    assert g.missing(max_bucket=1) == [(1, 2), (1, 4)]


def test_a_batch_replays_the_largest_captured_bucket_in_turns_while_the_rest_come_later():
    g, calls = _graphs({(1, 2), (2, 2)}, later=True)
    out = g.decode([10, 11, 12, 13, 14], torch.zeros(5, 2, 16, dtype=torch.long))
    assert out.shape == (5, 2 * 1920)
    assert calls == [("replay", 2, [10, 11]), ("replay", 2, [12, 13]), ("replay", 1, [14])]


def test_without_a_background_capture_a_missing_graph_is_captured_for_the_batch():
    g, calls = _graphs({(1, 2), (2, 2)}, later=False)
    g.decode([10, 11, 12], torch.zeros(3, 2, 16, dtype=torch.long))
    assert calls == [("capture", 4, [10, 11, 12])]


def test_a_batch_whose_bucket_is_captured_replays_it_once():
    g, calls = _graphs({(1, 4), (2, 4), (4, 4)}, later=True)
    g.decode([1, 2, 3], torch.zeros(3, 4, 16, dtype=torch.long))
    assert calls == [("replay", 4, [1, 2, 3])]


def test_before_the_background_captures_a_window_decodes_as_pieces_a_lone_stream_holds():
    g, calls = _graphs({(1, 1), (1, 2)}, later=True)
    assert g.missing(max_bucket=1, max_window=2) == []
    out = g.decode([7], torch.zeros(1, 4, 16, dtype=torch.long))
    assert out.shape == (1, 4 * 1920)
    assert calls == [("replay", 1, [7]), ("replay", 1, [7])]  # 4 frames = 2 + 2, no capture on the request's path
    calls.clear()
    g.decode([7, 8], torch.zeros(2, 3, 16, dtype=torch.long))  # 3 = 2 + 1, the two streams in turns
    assert calls == [("replay", 1, [7]), ("replay", 1, [8]), ("replay", 1, [7]), ("replay", 1, [8])]


def test_once_every_graph_is_captured_a_window_is_one_replay():
    captured = {(b, n) for b in batch_buckets(8) for n in (1, 2, 4)}
    g, calls = _graphs(captured, later=False)
    g.decode([7], torch.zeros(1, 4, 16, dtype=torch.long))
    assert calls == [("replay", 1, [7])]
