"""`sampling.choose_batched` for every row of one codebook group in one Triton launch (the Talker frame decoder).

The torch path is ~14 small kernels (sort, gather, softmax, cumsum, ...), run 16 times per frame, plus ~15
for the [B, 16, V] tensor of race draws: at batch 1 the frame is launch-bound. Here one program holds one
row's whole vocabulary in registers and needs no sort:
- greedy rows (flag, or temperature <= 0): argmax of the raw logits (the first index of the maximum);
- top-k: the k-th largest value by a binary search over the order-preserving int32 image of the floats
  (counting values >= the candidate), so every id tied with the k-th is kept (HF);
- top-p: the same search for the lowest kept value (the mass ranked strictly above it is < top_p); in the
  tie group at that value ids rank lower id first, as in the torch path's stable sort;
- the draw: argmax of p / E, E = Exp(1) from `sampling.exponentials`' integer hash of (key, token index,
  group, id), computed inline instead of read from a tensor.
Scaled logits are bit-identical to torch's (IEEE division), so the top-k set is exact; softmax sums, exp
and log may differ by ulps, which can only swap near-equal race scores. `self_check` compares with the torch
path on the real device; generate.FrameDecoder uses the kernel only where `enabled` says it passed.
"""

import logging

import torch

from aura_omni.layers import pdl
from aura_omni.layers.device import on_first_tensor_device
from aura_omni.models.qwen3_tts import sampling as S

log = logging.getLogger(__name__)

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines and CI: the torch path runs instead
    triton = tl = None

AVAILABLE = triton is not None
MAX_VOCAB = 4096  # one row in registers (Talker codec head 3072, code predictor 2048)
NEAR_TIE = 1e-5  # relative gap of race scores that float rounding may swap (ulps are ~1e-7)

if AVAILABLE:
    from aura_omni.layers.pdl import begin

    _HASH_MUL = tl.constexpr(S._HASH_MUL)
    _ID_SALT = tl.constexpr(S._ID_SALT)
    _GROUP_STRIDE = tl.constexpr(S._GROUP_STRIDE)

    @triton.jit
    def _hash32(x):
        """sampling._hash32 on uint32 lanes (the torch path's int64 products have the same low 32 bits)."""
        x = ((x >> 16) ^ x) * _HASH_MUL
        x = ((x >> 16) ^ x) * _HASH_MUL
        return (x >> 16) ^ x

    @triton.jit
    def _ordered(x):
        """Order-preserving int32 image of float32 values; -0.0 folds onto +0.0 (torch compares them equal)."""
        bits = x.to(tl.int32, bitcast=True)
        return tl.where(x == 0, 0, tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits))

    @triton.jit
    def _choose_kernel(logits_ptr, stride_lr, stride_lc, greedy_ptr, stride_g, temp_ptr, stride_t, top_k_ptr,
                       stride_k, top_p_ptr, stride_p, keys_ptr, stride_key, steps_ptr, stride_step, out_ptr, vocab,
                       group, BLOCK: tl.constexpr, PDL: tl.constexpr):
        begin(PDL)
        row = tl.program_id(0).to(tl.int64)
        ids = tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row * stride_lr + ids * stride_lc, mask=ids < vocab,
                    other=float("-inf")).to(tl.float32)  # padding lanes act as banned ids
        temperature = tl.load(temp_ptr + row * stride_t).to(tl.float32)
        if (tl.load(greedy_ptr + row * stride_g).to(tl.float32) > 0) | (temperature <= 0):
            pick = tl.argmax(x, axis=0)  # the first index of the maximum, as torch.argmax
        else:
            x = tl.math.div_rn(x, temperature)  # torch's rounding (Triton's `/` is approximate)
            key = _ordered(x)
            k = tl.load(top_k_ptr + row * stride_k).to(tl.int32)
            k = tl.minimum(tl.where(k > 0, k, vocab), vocab)  # k <= 0: off
            if k < vocab:  # kth = the largest key with >= k keys at or above it
                lo = tl.min(key, axis=0).to(tl.int64)  # every key is at or above it
                hi = tl.max(key, axis=0).to(tl.int64) + 1  # none is
                for _ in range(32):
                    mid = (lo + hi) >> 1
                    enough = tl.sum((key >= mid.to(tl.int32)).to(tl.int32), axis=0) >= k
                    lo = tl.where(enough, mid, lo)
                    hi = tl.where(enough, hi, mid)
                x = tl.where(key >= lo.to(tl.int32), x, float("-inf"))  # ties with the k-th stay (HF)
            e = tl.exp(x - tl.max(x, axis=0))
            p = tl.math.div_rn(e, tl.sum(e, axis=0))
            top_p = tl.load(top_p_ptr + row * stride_p).to(tl.float32)
            if top_p < 1.0:  # cut = the smallest key whose strictly-higher mass is < top_p (ids below it go)
                lo = tl.min(key, axis=0).to(tl.int64) - 1
                hi = tl.max(key, axis=0).to(tl.int64)  # the first ranked id is always kept
                above = tl.zeros([], tl.float32)  # mass strictly above hi
                for _ in range(32):
                    mid = (lo + hi) >> 1
                    mass = tl.sum(tl.where(key > mid.to(tl.int32), p, 0.0), axis=0)
                    under = mass < top_p
                    hi = tl.where(under, mid, hi)
                    lo = tl.where(under, lo, mid)
                    above = tl.where(under, mass, above)
                # ids tied at the cut rank lower id first: the first stays, the next ones while the mass above
                # them is still < top_p
                tie = key == hi.to(tl.int32)
                rank = tl.cumsum(tie.to(tl.int32), axis=0) - tie.to(tl.int32)
                p_tie = tl.max(tl.where(tie, p, 0.0), axis=0)
                stay = (rank == 0) | (above + rank.to(tl.float32) * p_tie < top_p)
                p = tl.where((key > hi.to(tl.int32)) | (tie & stay), p, 0.0)
            step = tl.load(steps_ptr + row * stride_step)
            seed = tl.load(keys_ptr + row * stride_key).to(tl.uint32)  # keys are 32-bit (sampling.seed_key)
            salt = _hash32((step * _GROUP_STRIDE + group).to(tl.uint32))
            bits = _hash32(_hash32(seed ^ salt) ^ _hash32(ids.to(tl.uint32) + _ID_SALT))
            uniform = ((bits >> 8).to(tl.float32) + 0.5) * (1.0 / (1 << 24))
            pick = tl.argmax(tl.math.div_rn(p, -tl.log(uniform)), axis=0)
        # a row of NaN logits (a numerical fault upstream) makes every comparison false, and the reduction may then
        # pick a padding lane past the vocabulary: an id the next kernel would index out of bounds with (a
        # device-side assert that ends the process). Its request fails on the host (non-finite hidden state); the id
        # only has to stay a valid index
        tl.store(out_ptr + row, tl.minimum(pick, vocab - 1).to(tl.int64))


@on_first_tensor_device
def choose(logits: torch.Tensor, greedy: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
           top_p: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor, group: int) -> torch.Tensor:
    """`choose_batched(logits, greedy, temperature, top_k, top_p, exponentials(keys, steps, G, V)[:, group])`
    -> ids [B] (long). logits [B, V] of any float dtype (V <= MAX_VOCAB); the per-row [B] vectors may be views of
    any dtype and stride (greedy: > 0 = greedy; top_k: <= 0 = off). No host sync: CUDA-graph capturable."""
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.long, device=logits.device)
    _choose_kernel[(rows,)](logits, logits.stride(0), logits.stride(1), greedy, greedy.stride(0), temperature,
                            temperature.stride(0), top_k, top_k.stride(0), top_p, top_p.stride(0), keys,
                            keys.stride(0), steps, steps.stride(0), out, vocab, group,
                            BLOCK=triton.next_power_of_2(vocab), num_warps=8, **pdl.flags(logits.device))
    return out


def _check_rows(vocab: int, rows: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random logits [rows + 64, vocab] and parameter columns (greedy, temperature, top_k, top_p) as the frame
    decoder stores them: greedy flags, temperature 0 and others, top-k (off, 1, small, >= vocab), top-p, many
    exact ties (quantized rows), -inf bans, and two crafted blocks of 32 rows that the race must explore."""
    pick = lambda values: torch.tensor(values, dtype=torch.float32)[torch.randint(len(values), (rows,), generator=gen)]
    logits = torch.randn(rows, vocab, generator=gen) * 3
    logits[1::3] = (logits[1::3] * 2).round() / 2  # heavy ties, at the k-th value and at the top-p cut
    bans = (torch.rand(rows, vocab, generator=gen) < 0.3) | (torch.arange(vocab) >= vocab - 1024)
    logits[2::3] = logits[2::3].masked_fill(bans[2::3], float("-inf"))  # talker_rules_batched-like bans
    logits[2] = float("-inf")  # everything banned: only ever greedy (torch.argmax -> 0)
    params = torch.stack([(torch.rand(rows, generator=gen) < 0.1).float(), pick([0.0, 0.3, 0.9, 1.0, 1.7]),
                          pick([0, 1, 2, 7, 50, vocab, vocab + 5]), pick([1.0, 0.95, 0.6, 0.2, 0.01])], dim=1)
    params[2, 0] = 1.0
    # +0.0 and -0.0 tied at the k-th value (top_k=2 keeps ids 3, 10, 20, 30); four ids tied at the top with
    # top_p=0.5 (mass above: 0, 1/4, 1/2, 3/4 -> keeps ids 3 and 10 exactly)
    crafted = torch.full((64, vocab), float("-inf"))
    crafted[:32, [3, 10, 20, 30]] = torch.tensor([1.0, 0.0, -0.0, -0.0])
    crafted[32:, [3, 10, 20, 30]] = 0.0
    crafted_params = torch.tensor([[0.0, 1.0, 2, 1.0]] * 32 + [[0.0, 1.0, 0, 0.5]] * 32)
    return torch.cat([logits, crafted]), torch.cat([params, crafted_params])


def self_check(device: torch.device, rows: int = 256, vocab_sizes: tuple[int, ...] = (3072, 2048)) -> dict[str, int]:
    """The kernel vs `sampling.choose_batched` on `_check_rows` of each vocab in groups 0 (float32 logits, as
    code0's) and 1, 15 (bf16, as the code predictor's). `differ`: rows whose ids differ; `bad`: those a near-tie
    of race scores does not explain (greedy rows must match exactly; a sampled id must be in range and score
    within NEAR_TIE of the torch winner). Usable iff bad == 0."""
    gen = torch.Generator().manual_seed(0)
    stats = dict(rows=0, differ=0, bad=0)
    for vocab in vocab_sizes:
        for group, dtype in ((0, torch.float32), (1, torch.bfloat16), (15, torch.bfloat16)):
            logits, params = _check_rows(vocab, rows, gen)
            n = logits.shape[0]
            keys = torch.randint(0, 1 << 32, (n,), generator=gen)
            steps = torch.randint(0, 1 << 20, (n,), generator=gen)
            logits, params, keys, steps = (t.to(device) for t in (logits.to(dtype), params, keys, steps))
            greedy, temperature, top_k, top_p = params.unbind(1)  # strided views, as in the frame decoder
            got = choose(logits, greedy, temperature, top_k, top_p, keys, steps, group)
            race = S.exponentials(keys, steps, group + 1, vocab)[:, group]
            ref = logits.float()
            want = S.choose_batched(ref, greedy > 0, temperature, top_k.long(), top_p, race)
            scores, order = S.race_scores(ref, temperature, top_k.long(), top_p, race)
            in_range = (got >= 0) & (got < vocab)
            got_score = scores.gather(1, order.argsort(-1).gather(1, got.clamp(0, vocab - 1)[:, None]))[:, 0]
            near_tie = in_range & (got_score >= scores.max(-1).values * (1 - NEAR_TIE))
            sampled = (greedy == 0) & (temperature > 0)
            differ = got != want
            stats["rows"] += n
            stats["differ"] += int(differ.sum())
            stats["bad"] += int((differ & ~(sampled & near_tie)).sum())
    for vocab in vocab_sizes:  # NaN rows, greedy and sampled: any id, but one inside the vocabulary
        n = 64
        nan = torch.full((n, vocab), float("nan"), device=device)
        params = torch.tensor([[float(i % 2), 0.9, 50.0, 0.8] for i in range(n)], device=device)
        got = choose(nan, *params.unbind(1), torch.arange(n, device=device), torch.zeros(n, device=device), 0)
        stats["rows"] += n
        stats["bad"] += int(((got < 0) | (got >= vocab)).sum())
    return stats


_checked: dict[str, bool] = {}  # device -> passed; checked once per process


def enabled(device: torch.device, vocab: int) -> bool:
    """Whether `choose` may replace the torch path on `device` for rows of `vocab` ids (CUDA with Triton, and
    the start-up `self_check` on that device passed)."""
    device = torch.device(device)
    if not AVAILABLE or device.type != "cuda" or vocab > MAX_VOCAB:
        return False
    if str(device) not in _checked:
        try:
            stats = self_check(device)
            _checked[str(device)] = stats["bad"] == 0
            log.info("triton sampling vs torch on %s: %s", device, stats)
        except Exception as e:  # noqa: BLE001 - any failure means: do not use it
            log.warning("triton sampling unusable here (%s: %s); using torch", type(e).__name__, e)
            _checked[str(device)] = False
        if not _checked[str(device)]:
            log.warning("triton sampling disagreed with the torch path on %s: off", device)
    return _checked[str(device)]
