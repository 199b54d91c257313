"""Splitting audio longer than the model's limit at quiet points (as qwen-asr does before transcribing).

Each cut goes at the quietest 100 ms window (lowest mean energy) in the last `search_seconds` before
the limit, so no piece exceeds the limit and words are rarely cut. Pieces under 0.5 s are left to the
front end, which zero-pads them.
"""

import numpy as np

MAX_ASR_INPUT_SECONDS = 1200.0  # qwen-asr MAX_ASR_INPUT_SECONDS
SEARCH_SECONDS = 10.0  # qwen-asr looks +-5 s around the limit; we look back 10 s so pieces never exceed it
ENERGY_WINDOW_SECONDS = 0.1


def split_long_audio(wav: np.ndarray, sr: int, max_seconds: float = MAX_ASR_INPUT_SECONDS,
                     search_seconds: float = SEARCH_SECONDS) -> list[np.ndarray]:
    """Mono samples -> consecutive pieces (views) each at most `max_seconds` long, covering all samples."""
    limit = int(max_seconds * sr)
    if limit <= 0:
        raise ValueError("max_seconds must be positive")
    if wav.shape[0] <= limit:
        return [wav]
    win = min(max(1, int(ENERGY_WINDOW_SECONDS * sr)), limit)
    search = int(search_seconds * sr)
    pieces, start = [], 0
    while wav.shape[0] - start > limit:
        hi = start + limit - win  # last window start that keeps the piece within the limit
        lo = max(start, hi - search)
        region = wav[lo:hi + win].astype(np.float64) ** 2
        energy = np.concatenate([[0.0], np.cumsum(region)])
        window_energy = energy[win:] - energy[:-win]  # one per window start lo..hi
        cut = max(start + 1, lo + int(np.argmin(window_energy)) + win // 2)  # middle of the quietest window
        pieces.append(wav[start:cut])
        start = cut
    pieces.append(wav[start:])
    return pieces
