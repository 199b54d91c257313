"""Audio in the containers libsndfile cannot read (MP4/m4a, ADTS AAC, WebM), decoded through PyAV, for tests and
benchmarks that check such files (media/encode.py `av_file` writes them). Needs PyAV (the `video` extra)."""

import io

import numpy as np


def av_decoded(data: bytes, container: str | None = None) -> tuple[np.ndarray, int]:
    """The first audio track's samples (channels interleaved as ffmpeg gives them) and rate."""
    import av

    with av.open(io.BytesIO(data), format=container) as f:
        frames = [fr.to_ndarray().reshape(-1) for fr in f.decode(audio=0)]
        rate = f.streams.audio[0].rate
    return (np.concatenate(frames) if frames else np.zeros(0, np.float32)), rate
