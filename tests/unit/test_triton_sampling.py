"""The Triton sampling kernel (models/qwen3_tts/triton_sampling.py) picks what `sampling.choose_batched` picks.

Needs Triton: on a GPU it runs compiled; on a CPU only under Triton's interpreter (triton_env.py).
"""

import pytest
import torch
from triton_env import DEVICE, needs_triton

from aura_omni.models.qwen3_tts import sampling as S, triton_sampling

pytestmark = [needs_triton, pytest.mark.filterwarnings("ignore:overflow encountered")]  # the interpreter's hash wraps


def both(logits, temperature=1.0, top_k=0, top_p=1.0, greedy=False, group=3):
    """(kernel ids, choose_batched ids) for every row of `logits`, each row with its own key."""
    n, vocab = logits.shape
    col = lambda v, dtype=torch.float32: torch.full((n,), v, dtype=dtype, device=DEVICE)
    logits = logits.to(DEVICE)
    keys, steps = torch.arange(n, device=DEVICE) * 7919 + 1, torch.full((n,), 5, device=DEVICE)
    args = col(greedy, torch.bool), col(temperature), col(top_k, torch.long), col(top_p)
    got = triton_sampling.choose(logits, *args, keys, steps, group)
    race = S.exponentials(keys, steps, group + 1, vocab)[:, group]
    return got.cpu(), S.choose_batched(logits, *args, race).cpu()


def test_kernel_picks_what_choose_batched_picks_on_random_rows():
    stats = triton_sampling.self_check(DEVICE, rows=48)
    assert stats["bad"] == 0 and stats["differ"] <= stats["rows"] // 200, stats


def test_draws_are_the_exponentials_of_the_torch_path():
    got, want = both(torch.zeros(64, 2048))  # equal probabilities: the smallest draw wins
    race = S.exponentials(torch.arange(64) * 7919 + 1, torch.full((64,), 5), 4, 2048)[:, 3]
    assert torch.equal(got, race.argmin(-1)) and torch.equal(got, want)


def test_greedy_and_zero_temperature_take_the_first_maximum():
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    logits[:, [7, 9]] = 50.0
    logits[3] = float("-inf")  # all banned: torch.argmax gives 0
    for kwargs in (dict(greedy=True), dict(temperature=0.0)):
        got, want = both(logits, top_k=1, **kwargs)
        assert got.tolist() == want.tolist() == [7, 7, 7, 0]


def test_top_k_keeps_every_id_tied_with_the_kth():
    logits = torch.full((200, 32), -3.0)
    logits[:, :4] = torch.tensor([2.0, 1.0, 1.0, 1.0])
    got, want = both(logits, top_k=2)
    assert torch.equal(got, want) and set(got.tolist()) == {0, 1, 2, 3}


def test_top_p_ranks_tied_ids_lower_id_first():
    got, want = both(torch.zeros(200, 16), top_p=0.3)  # mass above id j is j/16: ids 0..4 stay
    assert torch.equal(got, want) and set(got.tolist()) == {0, 1, 2, 3, 4}


def test_banned_ids_are_never_drawn():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(200, 64, generator=gen)
    banned = torch.rand(200, 64, generator=gen) < 0.5
    got, want = both(logits.masked_fill(banned, float("-inf")), temperature=1.5)
    assert torch.equal(got, want) and not banned[torch.arange(200), got].any()


def test_frame_decoder_gives_the_same_codes_with_the_kernel(tmp_path):
    from aura_omni.models.qwen3_tts.generate import FrameDecoder
    from aura_omni.stages.tts import Qwen3TTS
    from aura_omni.testing.tiny_tts import write_tiny_tts

    talker = Qwen3TTS.load(write_tiny_tts(tmp_path / "cv", "custom_voice", with_codec=False), device=DEVICE).talker
    hidden = torch.randn(4, talker.config.hidden_size, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    slots, steps = torch.arange(4, device=DEVICE), torch.tensor([0, 3, 7, 40], device=DEVICE)
    rows = [S.param_row(S.SamplingParams(**kw)) for kw in (
        {}, dict(do_sample=False), dict(top_k=0, top_p=0.8, subtalker_top_k=3, subtalker_top_p=0.5),
        dict(temperature=1.4, subtalker_temperature=0.0))]
    codes = []
    for kernel in (True, False):
        decoder = FrameDecoder(talker, 4, use_graphs=False, fuse=False, sampling_kernel=kernel)
        decoder.params[:4] = torch.tensor(rows, device=DEVICE)
        decoder.keys[:4] = torch.tensor([5, 6, 7, 8], device=DEVICE)
        codes.append([decoder.frame(hidden, slots, steps + i) for i in range(3)])
    assert all(torch.equal(a, b) for a, b in zip(*codes))


def test_rows_of_nan_logits_still_pick_an_id_inside_the_vocabulary():
    """A NaN row (a numerical fault upstream) has no right answer, but its id is embedded on the device before the
    host fails the request: past the vocabulary it would be a device-side assert that ends the process. 3072 ids
    run in a block of 4096 lanes, whose padding must never be picked."""
    n = 32
    logits = torch.full((n, 3072), float("nan"))
    logits[n // 2:, :7] = float("-inf")  # part banned, the rest NaN
    for kwargs in (dict(greedy=True), dict(temperature=0.9, top_k=50, top_p=0.8), dict(temperature=1.0)):
        got, _ = both(logits, **kwargs)
        assert ((got >= 0) & (got < 3072)).all(), got

