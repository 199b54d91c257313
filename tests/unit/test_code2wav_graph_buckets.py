"""Which Code2Wav graph a batch replays while the larger buckets are still captured in the background (the CUDA
replay itself is tests/gpu/test_code2wav_cuda.py): the order of captures and the turns a batch takes meanwhile."""

import torch

from aura_omni.models.qwen3_tts.code2wav_batch import Code2WavBatch
from aura_omni.models.qwen3_tts.code2wav_graphs import Code2WavGraphs, batch_buckets


def _graphs(captured: set[tuple[int, int]], later: bool, batch: Code2WavBatch = Code2WavBatch(8)
            ) -> tuple[Code2WavGraphs, list]:
    """Graphs over windows 1, 2, 4 and buckets up to what a step of each takes (8 streams unless `batch` bounds the
    frames too) whose replays and captures are recorded, not run."""
    g = object.__new__(Code2WavGraphs)
    g.windows, g.later = [1, 2, 4], later
    g.buckets = {n: batch_buckets(batch.streams(n)) for n in g.windows}
    g._graphs = dict.fromkeys(captured)
    calls = []

    def replay(slots, codes):
        bucket = next(k for k in g.buckets[codes.shape[1]] if k >= len(slots))
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


def test_with_a_frame_budget_short_windows_get_larger_buckets():
    """8 frames a step: 8 streams of 1 frame, 4 of 2, 2 of 4; a batch is covered only where every piece's bucket holds
    it, and the captures still come smallest bucket first."""
    g, calls = _graphs(set(), later=False, batch=Code2WavBatch(16, 8))
    assert g.buckets == {1: [1, 2, 4, 8], 2: [1, 2, 4], 4: [1, 2]}
    assert g.missing() == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1)]
    assert g.covers(8, 1) and not g.covers(8, 2) and g.covers(4, 2) and not g.covers(4, 4) and g.covers(2, 6)
    g.decode(list(range(7)), torch.zeros(7, 1, 16, dtype=torch.long))
    assert calls == [("capture", 8, list(range(7)))]


def test_a_length_only_pieces_use_holds_one_stream_and_a_batch_goes_through_it_in_turns():
    """With 2-frame first windows, 1 frame is only a piece (of an ICL reference, or of a window whose graphs are still
    to come): one stream's graph, which a batch of pieces replays in turns."""
    g, calls = _graphs({(1, 1), (1, 2)}, later=True)
    g.buckets = {1: [1], 2: batch_buckets(8), 4: batch_buckets(8)}
    out = g.decode([7, 8], torch.zeros(2, 3, 16, dtype=torch.long))  # 4 not ready: 3 = 2 + 1
    assert out.shape == (2, 3 * 1920)
    assert calls == [("replay", 1, [7]), ("replay", 1, [8]), ("replay", 1, [7]), ("replay", 1, [8])]
    assert g.covers(1, 1) and not g.covers(2, 1) and g.covers(8, 2)
