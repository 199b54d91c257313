"""Qwen3-VL image/video preprocessing as pure functions: smart_resize, bicubic resize, normalise, patchify.

Steps (as transformers' Qwen2VLImageProcessor / Qwen3VLVideoProcessor do them):
  1. smart_resize: both sides to multiples of 32 (patch 16 x merge 2) inside a pixel budget.
  2. bicubic resize with antialias on uint8 frames.
  3. (x/255 - 0.5) / 0.5.
  4. pad the frame count to a multiple of 2 by repeating the last frame (an image is 2 copies of itself).
  5. flatten to patches [t*h*w, C*2*16*16] in (t, h/2, w/2, 2, 2) order, so each 2x2 merge group is
     contiguous, each patch laid out (C, T, 16, 16).
Videos also get one timestamp per temporal group (the mean time of its two frames) for the prompt, and every
item a content key (what the prefix cache and the vision-embedding cache know it by).

Steps 3-5 run where the patches are needed: a `VisionInput` keeps the resized uint8 frames, and `patches(device)`
normalises and flattens them there (on a GPU: a quarter of the bytes to upload and no host arithmetic; the values
are the same, IEEE fp32 on either side); `pixel_values` is the same on the host.
"""

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from aura_omni.layers.device import upload_async
from aura_omni.media.limits import MediaError

PATCH_SIZE = 16  # Qwen3-VL vision_config.patch_size
TEMPORAL_PATCH_SIZE = 2  # vision_config.temporal_patch_size
MERGE_SIZE = 2  # vision_config.spatial_merge_size
# Pixel budgets of the real Qwen3-VL-8B-Instruct preprocessor configs (size.shortest_edge/longest_edge).
IMAGE_MIN_PIXELS = 65536  # preprocessor_config.json: 256*256
IMAGE_MAX_PIXELS = 16777216  # preprocessor_config.json: 4096*4096
VIDEO_MIN_PIXELS = 4096  # video_preprocessor_config.json, over t*h*w
VIDEO_MAX_PIXELS = 25165824  # video_preprocessor_config.json, over t*h*w
VIDEO_FPS = 2.0  # video_preprocessor_config.json fps: frames sampled per second
VIDEO_MIN_FRAMES = 4
VIDEO_MAX_FRAMES = 768
MAX_ASPECT_RATIO = 200  # smart_resize refuses more extreme shapes
PIL_PRECISION_BITS = 22  # Pillow Resample.c: 32 - 8 bits of pixel - 2 bits headroom
PIL_BICUBIC_A = -0.5  # Pillow's bicubic kernel parameter (torch's antialias kernel uses the same)


@dataclass(frozen=True)
class VisionPreprocessConfig:
    min_pixels: int
    max_pixels: int
    patch_size: int = PATCH_SIZE
    temporal_patch_size: int = TEMPORAL_PATCH_SIZE
    merge_size: int = MERGE_SIZE
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    fps: float = VIDEO_FPS
    min_frames: int = VIDEO_MIN_FRAMES
    max_frames: int = VIDEO_MAX_FRAMES
    # "pil": Pillow's fixed-point bicubic (what transformers' PIL image processor produces);
    # "torch": torch's antialiased bicubic on uint8 (what torchvision-based processors produce).
    resample: str = "torch"

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @classmethod
    def image_default(cls) -> "VisionPreprocessConfig":
        return cls(IMAGE_MIN_PIXELS, IMAGE_MAX_PIXELS, resample="torch")

    @classmethod
    def video_default(cls) -> "VisionPreprocessConfig":
        return cls(VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS, resample="torch")

    @classmethod
    def from_hf(cls, cfg: dict, *, video: bool) -> "VisionPreprocessConfig":
        """From a preprocessor_config.json / video_preprocessor_config.json dict."""
        base = cls.video_default() if video else cls.image_default()
        size = cfg.get("size") or {}
        return cls(
            min_pixels=int(size.get("shortest_edge", cfg.get("min_pixels", base.min_pixels))),
            max_pixels=int(size.get("longest_edge", cfg.get("max_pixels", base.max_pixels))),
            patch_size=int(cfg.get("patch_size", base.patch_size)),
            temporal_patch_size=int(cfg.get("temporal_patch_size", base.temporal_patch_size)),
            merge_size=int(cfg.get("merge_size", base.merge_size)),
            mean=tuple(cfg.get("image_mean", base.mean)),
            std=tuple(cfg.get("image_std", base.std)),
            fps=float(cfg.get("fps") or base.fps),
            min_frames=int(cfg.get("min_frames", base.min_frames)),
            max_frames=int(cfg.get("max_frames", base.max_frames)),
            resample=base.resample,
        )


@dataclass
class VisionInput:
    """One image or video ready for the vision encoder, plus what the prompt needs to expand it. Made by the
    preprocessors from resized uint8 `frames` (patches computed on demand), or directly from patches."""

    kind: str  # "image" | "video"
    _pixels: torch.Tensor | None  # [t*h*w, C*T*P*P] float32 patches; None = from `frames` when asked
    grid_thw: tuple[int, int, int]  # patches (temporal groups, rows, cols)
    timestamps: list[float] = field(default_factory=list)  # video: seconds per temporal group
    merge_size: int = MERGE_SIZE
    content_key: str | None = field(default=None, compare=False, repr=False)  # pixels_key, or engine.prompts.vision_key
    frames: torch.Tensor | None = field(default=None, compare=False, repr=False)  # uint8 [T, C, H, W], resized
    preprocess: "VisionPreprocessConfig | None" = field(default=None, compare=False, repr=False)
    crosses_once = True  # to a stage's process, whole once and by content_key after (placement/channel.py)

    def __getstate__(self) -> dict:
        """Pickled (to a stage in a process of its own) with its host tensors as numpy arrays: torch pickles a turn's
        two camera frames (1.8 MB) in ~5 ms each way, numpy in ~1, on the event loops of both sides."""
        return {k: v.numpy() if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
                for k, v in self.__dict__.items()}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in state.items()})

    @property
    def pixel_values(self) -> torch.Tensor:
        """The patches on the host (computed once)."""
        if self._pixels is None:
            self._pixels = self.patches(torch.device("cpu"))
        return self._pixels

    def patches(self, device: torch.device) -> torch.Tensor:
        """The patches on `device`, normalised and flattened there from the uint8 frames unless already made."""
        if self._pixels is not None:
            return self._pixels.to(device)
        cfg = self.preprocess
        x = normalize(upload_async(self.frames, torch.device(device)), cfg.mean, cfg.std)
        if self.kind == "image":  # an image is one temporal patch of identical frames
            x = x.expand(cfg.temporal_patch_size, -1, -1, -1)
        return patchify(x, cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size)[0]

    @property
    def tokens_per_group(self) -> int:
        """LM tokens per temporal group: one per 2x2 patches."""
        return self.grid_thw[1] * self.grid_thw[2] // (self.merge_size**2)

    @property
    def num_tokens(self) -> int:
        return self.grid_thw[0] * self.tokens_per_group


def check_aspect(height: int, width: int) -> None:
    if min(height, width) <= 0:
        raise MediaError(f"image has no pixels ({width}x{height})")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise MediaError(f"aspect ratio {max(height, width) / min(height, width):.1f} is over {MAX_ASPECT_RATIO}")


def smart_resize_image(height: int, width: int, factor: int = 32, min_pixels: int = IMAGE_MIN_PIXELS,
                       max_pixels: int = IMAGE_MAX_PIXELS) -> tuple[int, int]:
    """Target (h, w): multiples of `factor`, h*w within [min_pixels, max_pixels], aspect kept."""
    check_aspect(height, width)
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_video(num_frames: int, height: int, width: int, factor: int = 32, temporal_factor: int = 2,
                       min_pixels: int = VIDEO_MIN_PIXELS, max_pixels: int = VIDEO_MAX_PIXELS) -> tuple[int, int]:
    """Like smart_resize_image with the budget over frames*h*w (frame count rounded to `temporal_factor`)."""
    if num_frames < temporal_factor:
        raise MediaError(f"a video needs at least {temporal_factor} frames, got {num_frames}")
    if height < factor or width < factor:  # tiny frames: scale up so the short side reaches one block
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    check_aspect(height, width)
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt(num_frames * height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _pil_bicubic(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    a = PIL_BICUBIC_A
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _pil_axis_coefficients(in_size: int, out_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Taps [out, k] and fixed-point weights [out, k] of Pillow's antialiased bicubic along one axis."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale  # bicubic support 2, widened when downscaling (antialias)
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size) + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64) - xmin
    j = np.arange(ksize)[None, :]
    valid = j < xmax[:, None]
    w = np.where(valid, _pil_bicubic((j + xmin[:, None] - center[:, None] + 0.5) * (1.0 / filterscale)), 0.0)
    total = w.sum(1, keepdims=True)
    w = np.divide(w, total, out=w.copy(), where=total != 0)
    fixed = np.trunc(w * (1 << PIL_PRECISION_BITS) + np.where(w < 0, -0.5, 0.5)).astype(np.int64)
    taps = np.where(valid, j + xmin[:, None], 0)
    return torch.from_numpy(taps), torch.from_numpy(fixed)


def _pil_resample_last_axis(x: torch.Tensor, out_size: int) -> torch.Tensor:
    taps, weights = _pil_axis_coefficients(x.shape[-1], out_size)
    acc = (x[..., taps].long() * weights).sum(-1) + (1 << (PIL_PRECISION_BITS - 1))
    return (acc >> PIL_PRECISION_BITS).clamp_(0, 255).to(torch.uint8)  # every pass rounds to uint8, like Pillow


def resize_bicubic(frames: torch.Tensor, height: int, width: int, method: str = "torch") -> torch.Tensor:
    """uint8 [T, C, H, W] -> uint8 [T, C, height, width], bicubic with antialias.

    "pil" reproduces Pillow's Image.resize(BICUBIC) bit for bit (horizontal then vertical pass, fixed point);
    "torch" is torch's native uint8 antialiased bicubic, which torchvision's resize uses on CPU.
    """
    if frames.dtype != torch.uint8:
        raise TypeError(f"resize_bicubic expects uint8 frames, got {frames.dtype}")
    if tuple(frames.shape[-2:]) == (height, width):
        return frames
    if method == "pil":
        x = frames
        if x.shape[-1] != width:
            x = _pil_resample_last_axis(x, width)
        if x.shape[-2] != height:
            x = _pil_resample_last_axis(x.transpose(-1, -2), height).transpose(-1, -2)
        return x.contiguous()
    if method == "torch":
        if frames.device.type == "cpu":
            return F.interpolate(frames, size=(height, width), mode="bicubic", align_corners=False, antialias=True)
        out = F.interpolate(frames.float(), size=(height, width), mode="bicubic", align_corners=False, antialias=True)
        return out.clamp_(0, 255).round_().to(torch.uint8)
    raise ValueError(f"unknown resample method {method!r} (expected 'pil' or 'torch')")


def normalize(frames: torch.Tensor, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)) -> torch.Tensor:
    """uint8 [T, C, H, W] -> float32 (x/255 - mean) / std."""
    # up without the host waiting for the work queued on the stage's stream (a pageable copy would)
    m, s = upload_async(torch.tensor([mean, std], dtype=torch.float32), frames.device).view(2, -1, 1, 1)
    # in place on one fresh buffer: new 7 MB temporaries per step cost more than the arithmetic (same values)
    return frames.to(torch.float32, copy=True).div_(255.0).sub_(m).div_(s)


def patchify(frames: torch.Tensor, patch_size: int = PATCH_SIZE, merge_size: int = MERGE_SIZE,
             temporal_patch_size: int = TEMPORAL_PATCH_SIZE) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """float [T, C, H, W] -> patches [t*h*w, C*tp*P*P] in merge-block order, and grid (t, h, w)."""
    if pad := -frames.shape[0] % temporal_patch_size:  # odd frame count: repeat the last frame
        frames = torch.cat([frames, frames[-1:].expand(pad, -1, -1, -1)])
    t_all, c, height, width = frames.shape
    gt, gh, gw = t_all // temporal_patch_size, height // patch_size, width // patch_size
    x = frames.reshape(gt, temporal_patch_size, c, gh // merge_size, merge_size, patch_size,
                       gw // merge_size, merge_size, patch_size)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (t, bh, bw, mh, mw, C, tp, ph, pw)
    return x.reshape(gt * gh * gw, c * temporal_patch_size * patch_size * patch_size), (gt, gh, gw)


def sample_frame_indices(total_frames: int, video_fps: float, fps: float = VIDEO_FPS,
                         min_frames: int = VIDEO_MIN_FRAMES, max_frames: int = VIDEO_MAX_FRAMES) -> list[int]:
    """Indices of the frames kept: `fps` per second of video, clamped to [min_frames, max_frames] and to the total."""
    if total_frames <= 0:
        raise MediaError("video has no frames")
    n = int(total_frames / video_fps * fps)
    n = min(max(n, min_frames), max_frames, total_frames)
    return np.linspace(0, total_frames - 1, n).round().astype(int).tolist()


def group_timestamps(frame_indices: list[int], video_fps: float, temporal_patch_size: int = TEMPORAL_PATCH_SIZE) -> list[float]:
    """Seconds per temporal group: mean time of its first and last frame (odd counts repeat the last index)."""
    idx = list(frame_indices)
    if pad := -len(idx) % temporal_patch_size:
        idx += [idx[-1]] * pad
    times = [i / video_fps for i in idx]
    return [(times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)]


def content_hash(*tensors: torch.Tensor) -> str:
    """Digest of the exact values (dtype and shape included) of the tensors that define one media item."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.view(torch.uint8).numpy())  # the buffer itself: no copy of megabytes of pixels
    return h.hexdigest()


def pixels_key(frames: torch.Tensor, cfg: VisionPreprocessConfig) -> str:
    """Content key of the pixels made from these resized uint8 frames: normalising and patchifying them is a fixed
    function of the frames and these constants, so hashing those identifies the pixels at a quarter of the bytes
    of the float32 patches (hashing 2 frames of 640x480 as patches took ~4 ms a turn)."""
    layout = torch.tensor([*cfg.mean, *cfg.std, cfg.patch_size, cfg.temporal_patch_size, cfg.merge_size],
                          dtype=torch.float64)
    return content_hash(frames, layout)


def _to_frames(pixels, what: str) -> torch.Tensor:
    """uint8 [..., H, W, 3] (numpy or torch) -> uint8 [T, 3, H, W]."""
    t = pixels if isinstance(pixels, torch.Tensor) else torch.from_numpy(np.array(pixels))  # a copy: Pillow arrays are read-only
    if t.dtype != torch.uint8 or t.shape[-1] != 3:
        raise MediaError(f"{what} must be uint8 RGB with shape [..., H, W, 3], got {t.dtype} {tuple(t.shape)}")
    return t.reshape(-1, *t.shape[-3:]).permute(0, 3, 1, 2).contiguous()


def preprocess_image(rgb, cfg: VisionPreprocessConfig | None = None) -> VisionInput:
    """uint8 [H, W, 3] -> VisionInput (the image counts as 2 identical frames: one temporal group)."""
    cfg = cfg or VisionPreprocessConfig.image_default()
    frames = _to_frames(rgb, "image")[:1]
    h, w = smart_resize_image(frames.shape[-2], frames.shape[-1], cfg.factor, cfg.min_pixels, cfg.max_pixels)
    frames = resize_bicubic(frames, h, w, cfg.resample)
    grid = (1, h // cfg.patch_size, w // cfg.patch_size)
    return VisionInput("image", None, grid, merge_size=cfg.merge_size, content_key=pixels_key(frames, cfg),
                       frames=frames, preprocess=cfg)


def preprocess_video(frames, video_fps: float, frame_indices: list[int] | None = None,
                     cfg: VisionPreprocessConfig | None = None) -> VisionInput:
    """uint8 [T, H, W, 3] already-sampled frames -> VisionInput with per-group timestamps.

    `frame_indices` are the frames' positions in the source at `video_fps` (default 0..T-1, i.e. the
    frames themselves arrive at `video_fps`, as in realtime). A single frame is shown twice.
    """
    cfg = cfg or VisionPreprocessConfig.video_default()
    x = _to_frames(frames, "video frames")
    if x.shape[0] == 0:
        raise MediaError("video has no frames")
    if x.shape[0] > cfg.max_frames:
        raise MediaError(f"video has {x.shape[0]} frames, over the limit of {cfg.max_frames}")
    if not video_fps or video_fps <= 0:
        raise MediaError(f"video fps must be positive, got {video_fps}")
    indices = list(frame_indices) if frame_indices is not None else list(range(x.shape[0]))
    if len(indices) != x.shape[0]:
        raise ValueError(f"{len(indices)} frame indices for {x.shape[0]} frames")
    if x.shape[0] < cfg.temporal_patch_size:  # one frame: the reference needs a full temporal patch
        x = x.expand(cfg.temporal_patch_size, -1, -1, -1)
    h, w = smart_resize_video(x.shape[0], x.shape[-2], x.shape[-1], cfg.factor, cfg.temporal_patch_size,
                              cfg.min_pixels, cfg.max_pixels)
    x = resize_bicubic(x, h, w, cfg.resample)
    grid = (-(-x.shape[0] // cfg.temporal_patch_size), h // cfg.patch_size, w // cfg.patch_size)
    stamps = group_timestamps(indices, video_fps, cfg.temporal_patch_size)
    return VisionInput("video", None, grid, timestamps=stamps, merge_size=cfg.merge_size,
                       content_key=pixels_key(x, cfg), frames=x, preprocess=cfg)
