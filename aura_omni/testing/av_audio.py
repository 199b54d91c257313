"""Audio in the containers libsndfile cannot read or write (MP4/m4a, ADTS AAC, WebM), through PyAV, for tests and
benchmarks that send or check such files. Needs PyAV (the `video` extra)."""

import io

import numpy as np


def av_encoded(wav: np.ndarray, sr: int, container: str, codec: str) -> bytes:
    """Mono float samples as a `container` file (`mp4`, `adts`, `webm`, ...) of `codec` (`aac`, `libopus`)."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=sr)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.asarray(wav, np.float32)[None, :], format="flt", layout="mono")
        frame.sample_rate = sr
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buf.getvalue()


def av_decoded(data: bytes, container: str | None = None) -> tuple[np.ndarray, int]:
    """The first audio track's samples (channels interleaved as ffmpeg gives them) and rate."""
    import av

    with av.open(io.BytesIO(data), format=container) as f:
        frames = [fr.to_ndarray().reshape(-1) for fr in f.decode(audio=0)]
        rate = f.streams.audio[0].rate
    return (np.concatenate(frames) if frames else np.zeros(0, np.float32)), rate
