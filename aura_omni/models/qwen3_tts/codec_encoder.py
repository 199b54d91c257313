"""Codec encoder: reference audio (24 kHz) -> codes [T, 16] for Base ICL voice cloning.

It is Kyutai's Mimi encoder (SEANet convs -> causal transformer -> strided conv to 12.5 Hz -> split
RVQ with 1 semantic + 31 acoustic codebooks), of which Qwen3-TTS keeps the first 16 codebooks and
ceil(samples / 1920) frames (qwen3_tts.md §1.6). Written here in plain torch, not taken from
transformers, because transformers 5.x renamed Mimi's modules; the module tree below reproduces the
checkpoint's `encoder.*` key names (transformers 4.57 layout) and qwen-tts 0.1.1's numerics: the
transformer is plainly causal (transformers 4.57 builds Mimi's mask with `create_causal_mask`, so
`sliding_window` 250 is not applied), convs pad with zeros, the strided downsample conv replicates edges.
Other input rates are resampled with soxr HQ, which is what qwen-tts's librosa.resample (soxr_hq) runs.
"""

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers.rotary import RotaryEmbedding
from aura_omni.media.audio import resample
from aura_omni.models.loader import iter_tensors, load_into
from aura_omni.models.qwen3_tts.code2wav import CodecInputError, LayerScale
from aura_omni.models.qwen3_tts.codec_attention import CodecAttention
from aura_omni.models.qwen3_tts.codec_config import CodecConfig, CodecEncoderConfig


class MimiConv1d(nn.Module):
    """Causal conv: left pad k_eff - stride, right pad up to a whole last frame. Keys: conv.{weight,bias}."""

    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 bias: bool = True, pad_mode: str = "constant"):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.kernel = (kernel_size - 1) * dilation + 1
        self.padding_total = self.kernel - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = -(-(length - self.kernel + self.padding_total) // self.stride) + 1  # ceil, in integers
        extra = (frames - 1) * self.stride + self.kernel - self.padding_total - length
        return self.conv(F.pad(x, (self.padding_total, extra), mode=self.pad_mode))


class MimiResnetBlock(nn.Module):
    """ELU -> conv k3 (dim -> dim/compress) -> ELU -> conv k1 (-> dim), identity shortcut. Keys: block.{1,3}."""

    def __init__(self, cfg: CodecEncoderConfig, dim: int, dilation: int):
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([nn.ELU(), MimiConv1d(dim, hidden, cfg.residual_kernel_size, dilation=dilation,
                                                         pad_mode=cfg.pad_mode),
                                    nn.ELU(), MimiConv1d(hidden, dim, 1, pad_mode=cfg.pad_mode)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return x + h


class SEANetEncoder(nn.Module):
    """Waveform [B, 1, L] -> [B, hidden, ceil(L / 960)] (strides 4, 5, 6, 8)."""

    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        layers: list[nn.Module] = [MimiConv1d(cfg.audio_channels, cfg.num_filters, cfg.kernel_size,
                                              pad_mode=cfg.pad_mode)]
        scale = 1
        for ratio in reversed(cfg.upsampling_ratios):
            dim = scale * cfg.num_filters
            layers += [MimiResnetBlock(cfg, dim, cfg.dilation_growth_rate ** j) for j in range(cfg.num_residual_layers)]
            layers += [nn.ELU(), MimiConv1d(dim, dim * 2, ratio * 2, stride=ratio, pad_mode=cfg.pad_mode)]
            scale *= 2
        layers += [nn.ELU(), MimiConv1d(scale * cfg.num_filters, cfg.hidden_size, cfg.last_kernel_size,
                                        pad_mode=cfg.pad_mode)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MimiAttention(CodecAttention):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                         cfg.attention_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, v = self.project(x, cos, sin)
        return self.attend(q, k, v, is_causal=x.shape[1] > 1)


class MimiMLP(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MimiTransformerLayer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = MimiAttention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = MimiMLP(cfg)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class MimiTransformer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList([MimiTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(torch.arange(x.shape[1], device=x.device))
        cos, sin = cos[None, None].to(x.dtype), sin[None, None].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class MimiCodebook(nn.Module):
    """Nearest entry (Euclidean) of embed_sum / max(cluster_usage, 1e-5).

    Keys: initialized, cluster_usage, embed_sum (buffers, as in transformers' Mimi)."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.register_buffer("initialized", torch.tensor([True], dtype=torch.float32))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def embed(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, D, T] -> (indices [B, T], chosen entries [B, D, T])."""
        embed = self.embed()
        flat = x.permute(0, 2, 1).reshape(-1, x.shape[1])
        ids = torch.cdist(flat[None].float(), embed[None].float(), p=2)[0].argmin(dim=-1)
        ids = ids.view(x.shape[0], x.shape[2])
        return ids, F.embedding(ids, embed).permute(0, 2, 1)


class _MimiVectorQuantization(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = MimiCodebook(size, dim)


class MimiResidualVectorQuantizer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig, num_quantizers: int):
        super().__init__()
        dim = cfg.vector_quantization_hidden_dimension
        self.layers = nn.ModuleList([_MimiVectorQuantization(cfg.codebook_size, cfg.codebook_dim)
                                     for _ in range(num_quantizers)])
        if dim != cfg.hidden_size:
            self.input_proj = nn.Conv1d(cfg.hidden_size, dim, 1, bias=False)
            self.output_proj = nn.Conv1d(dim, cfg.hidden_size, 1, bias=False)  # decode side, unused here
        else:
            self.input_proj = None

    def encode(self, latents: torch.Tensor) -> torch.Tensor:
        """[B, hidden, T] -> codes [B, K, T]: each codebook quantizes what the previous ones left."""
        residual = self.input_proj(latents) if self.input_proj is not None else latents
        codes = []
        for layer in self.layers:
            ids, chosen = layer.codebook.encode(residual)
            residual = residual - chosen
            codes.append(ids)
        return torch.stack(codes, dim=1)


class MimiSplitResidualVectorQuantizer(nn.Module):
    """Semantic RVQ (codebook 0) and acoustic RVQ (1..) both quantize the same latents."""

    def __init__(self, cfg: CodecEncoderConfig, num_codebooks: int):
        super().__init__()
        n_sem = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = MimiResidualVectorQuantizer(cfg, n_sem)
        self.acoustic_residual_vector_quantizer = MimiResidualVectorQuantizer(cfg, num_codebooks - n_sem)

    def encode(self, latents: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.semantic_residual_vector_quantizer.encode(latents),
                          self.acoustic_residual_vector_quantizer.encode(latents)], dim=1)


class CodecEncoder(nn.Module):
    """Module tree = `encoder.*` of the codec checkpoint, with `num_codebooks` of the 32 RVQ codebooks.

    RVQ codebook k only depends on codebooks < k, so keeping 16 gives the same codes as the reference,
    which computes all 32 and slices.
    """

    def __init__(self, cfg: CodecEncoderConfig, num_codebooks: int = 16, samples_per_frame: int = 1920):
        super().__init__()
        if not cfg.num_semantic_quantizers < num_codebooks <= cfg.num_quantizers:
            raise ValueError(f"num_codebooks {num_codebooks} outside ({cfg.num_semantic_quantizers}, "
                             f"{cfg.num_quantizers}]")
        self.config = cfg
        self.num_codebooks = num_codebooks
        self.samples_per_frame = samples_per_frame
        self.encoder = SEANetEncoder(cfg)
        self.encoder_transformer = MimiTransformer(cfg)
        stride = cfg.downsample_stride
        self.downsample = MimiConv1d(cfg.hidden_size, cfg.hidden_size, 2 * stride, stride=stride, bias=False,
                                     pad_mode="replicate")
        self.quantizer = MimiSplitResidualVectorQuantizer(cfg, num_codebooks)

    @classmethod
    def from_codec_dir(cls, codec_dir: Path, device: torch.device | str = "cpu") -> "CodecEncoder":
        codec_dir = Path(codec_dir)
        cfg = CodecConfig.from_dir(codec_dir)
        model = cls(cfg.encoder, cfg.encoder_valid_num_quantizers, cfg.encode_downsample_rate)
        skipped = tuple(f"quantizer.acoustic_residual_vector_quantizer.layers.{k}."
                        for k in range(model.num_codebooks - cfg.encoder.num_semantic_quantizers,
                                       cfg.encoder.num_quantizers))
        load_into(model, iter_tensors(codec_dir, "encoder."), where=f"{codec_dir} encoder", ignore=skipped)
        return model.to(device).eval()

    def latents(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [B, 1, L] at 24 kHz -> pre-quantisation latents [B, hidden, ceil(L / 1920)]."""
        hidden = self.encoder(wav)
        hidden = self.encoder_transformer(hidden.transpose(1, 2)).transpose(1, 2)
        return self.downsample(hidden)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [B, 1, L] at 24 kHz -> codes [B, num_codebooks, ceil(L / 1920)]."""
        return self.quantizer.encode(self.latents(wav))

    @torch.inference_mode()
    def encode(self, wav: np.ndarray | torch.Tensor, sr: int) -> torch.Tensor:
        """Mono reference audio at any rate -> codes [ceil(samples_24k / 1920), 16] (long, on CPU)."""
        if isinstance(wav, torch.Tensor):
            wav = wav.detach().cpu().numpy()
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim != 1:
            raise CodecInputError(f"reference audio must be mono 1-D samples, got shape {wav.shape}")
        wav = resample(wav, int(sr), self.config.sampling_rate)
        if wav.shape[0] == 0:
            raise CodecInputError("reference audio is empty")
        if not np.isfinite(wav).all():
            raise CodecInputError("reference audio contains NaN or infinite samples")
        param = self.downsample.conv.weight
        x = torch.from_numpy(wav).to(param.device, param.dtype)[None, None]
        codes = self.forward(x)[0, :, :math.ceil(wav.shape[0] / self.samples_per_frame)]
        return codes.transpose(0, 1).cpu()
