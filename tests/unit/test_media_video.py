"""Video input: PyAV decode with 2 fps sampling, realtime frame lists, errors and limits."""

import io

import av
import numpy as np
import pytest

from aura_omni.media.limits import MediaError, MediaLimits
from aura_omni.media.video import clip_from_frames, decode_video


def encode_clip(n: int, fps: int, fmt: str = "mp4", codec: str = "mpeg4", size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(n):
            img = np.full((size[1], size[0], 3), 20 * i % 256, dtype=np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        out.mux(stream.encode(None))
    return buf.getvalue()


@pytest.mark.parametrize("fmt,codec", [("mp4", "mpeg4"), ("webm", "libvpx")])
def test_decodes_and_samples_two_frames_per_second(fmt, codec):
    clip = decode_video(encode_clip(20, 5, fmt, codec))  # 4 s at 5 fps -> 8 frames
    assert clip.fps == pytest.approx(5.0)
    assert clip.frame_indices == np.linspace(0, 19, 8).round().astype(int).tolist()
    assert clip.frames.shape == (8, 48, 64, 3) and clip.frames.dtype == np.uint8
    assert clip.frames[-1].mean() > clip.frames[0].mean()  # later frames are brighter: order kept


def test_short_video_keeps_at_least_four_frames():
    clip = decode_video(encode_clip(6, 10))  # 0.6 s: 1 frame at 2 fps, raised to the minimum of 4
    assert len(clip.frame_indices) == 4


def test_frame_cap_applies():
    clip = decode_video(encode_clip(30, 5), MediaLimits(max_frames=5))
    assert len(clip.frame_indices) == 5


def test_garbage_and_empty_video_are_media_errors():
    with pytest.raises(MediaError):
        decode_video(b"\x00" * 100)
    with pytest.raises(MediaError):
        decode_video(b"")


def test_realtime_frames_odd_count_becomes_whole_temporal_groups():
    frames = [np.full((64, 64, 3), v, dtype=np.uint8) for v in (0, 100, 200)]
    vi = clip_from_frames(frames, fps=2.0).to_vision_input()
    assert vi.grid_thw == (2, 4, 4)  # 3 frames -> 4 (last repeated) -> 2 temporal groups
    assert vi.timestamps == [0.25, 1.0]  # second group is frame 2 twice: (1.0 + 1.0) / 2


def test_realtime_frames_errors():
    with pytest.raises(MediaError, match="no video frames"):
        clip_from_frames([], fps=2.0)
    with pytest.raises(MediaError, match="one size"):
        clip_from_frames([np.zeros((64, 64, 3), np.uint8), np.zeros((32, 64, 3), np.uint8)])
    with pytest.raises(MediaError, match="over the limit"):
        clip_from_frames([np.zeros((8, 8, 3), np.uint8)] * 3, limits=MediaLimits(max_frames=2))


def test_a_stream_that_changes_frame_size_is_refused():
    data = encode_clip(4, 4, "mpegts", "mpeg2video", (16, 16)) + encode_clip(4, 4, "mpegts", "mpeg2video", (32, 24))
    with pytest.raises(MediaError, match=r"changes frame size midway \(16x16, then 32x24\)"):
        decode_video(data, fps=4.0)
