"""Code2Wav: the Qwen3-TTS 12 Hz codec decoder, codes [T, 16] -> 24 kHz waveform (1920 samples/frame).

RVQ dequantisation -> causal conv -> 8-layer sliding-window (72) transformer with LayerScale ->
2x (causal transposed conv x2 + ConvNeXt) -> causal conv -> 4 SnakeBeta/transposed-conv/residual
blocks (x8, x5, x4, x3) -> SnakeBeta -> causal conv -> clamp(-1, 1)   (qwen3_tts.md §1.6).

Key names are those of `decoder.*` in speech_tokenizer/model.safetensors. Every layer runs on a
`Code2WavStream`: a fresh state reproduces the full (zero-padded) decode, a carried one continues a
stream frame-exactly (see code2wav_stream.py).
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers import kernel_switches, triton_snake
from aura_omni.layers.mlp import SwiGLU
from aura_omni.layers.rmsnorm import RMSNorm
from aura_omni.layers.rotary import RotaryEmbedding
from aura_omni.models.loader import init_dummy, iter_tensors, load_into
from aura_omni.models.qwen3_tts.code2wav_stream import Code2WavStream
from aura_omni.models.qwen3_tts.codec_attention import CodecAttention
from aura_omni.models.qwen3_tts.codec_config import NUM_CODE_GROUPS, CodecConfig, Code2WavConfig

# qwen-tts 0.1.1 Qwen3TTSTokenizerV2Decoder.chunked_decode defaults: 300 new frames per window, each
# re-decoded with 25 frames of left context whose samples are dropped.
REFERENCE_CHUNK_FRAMES = 300
REFERENCE_LEFT_CONTEXT_FRAMES = 25


class CodecInputError(ValueError):
    """Codes or audio the codec cannot take (wrong shape, out-of-range code, empty audio): a 4xx."""


# ---------------------------------------------------------------------------------- convolutions
class CausalConv1d(nn.Module):
    """Conv1d left-padded by (k-1)*dilation (stride 1). Keys: conv.{weight,bias}."""

    def __init__(self, cin: int, cout: int, kernel_size: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size, dilation=dilation, groups=groups)
        self.history = (kernel_size - 1) * dilation
        self.state_key = ""

    def init_state(self, state: Code2WavStream, batch: int, like: torch.Tensor) -> None:
        if self.history:
            state.tensors[self.state_key] = like.new_zeros(batch, self.conv.in_channels, self.history)

    def forward(self, x: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        if self.history:
            x = torch.cat([state.tensors[self.state_key], x], dim=-1)
            state.tensors[self.state_key] = x[..., -self.history:].clone()
        return self.conv(x)


class CausalTransConv1d(nn.Module):
    """ConvTranspose1d trimmed by k - stride on the right; the trimmed tail is the next chunk's overlap."""

    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel_size, stride=stride)
        self.stride = stride
        self.overlap = kernel_size - stride
        self.state_key = ""

    def init_state(self, state: Code2WavStream, batch: int, like: torch.Tensor) -> None:
        if self.overlap:
            state.tensors[self.state_key] = like.new_zeros(batch, self.conv.out_channels, self.overlap)

    def forward(self, x: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        y = F.conv_transpose1d(x, self.conv.weight, None, stride=self.stride)  # bias once, after the overlap-add
        n = x.shape[-1] * self.stride
        if self.overlap:
            y[..., :self.overlap] += state.tensors[self.state_key]
            state.tensors[self.state_key] = y[..., n:].clone()
            y = y[..., :n]
        return y + self.conv.bias[None, :, None]


class SnakeBeta(nn.Module):
    """x + 1/(exp(beta) + 1e-9) * sin(exp(alpha) * x)^2, per channel. Keys: alpha, beta."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if triton_snake.usable(x) and kernel_switches.current().fast_attention:
            return triton_snake.snake_beta(x, self.alpha, self.beta)
        return triton_snake.reference(x, self.alpha, self.beta)


class ConvNeXtBlock(nn.Module):
    """Depthwise causal conv k7 -> LayerNorm -> Linear 4x -> GELU -> Linear -> gamma, residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        h = self.dwconv(x, state).permute(0, 2, 1)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).permute(0, 2, 1)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        return self.conv2(self.act2(self.conv1(self.act1(x), state)), state) + x


class DecoderBlock(nn.Module):
    """SnakeBeta -> causal transposed conv (k=2r, stride r) -> residual units at dilations 1, 3, 9."""

    def __init__(self, cin: int, cout: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(cin), CausalTransConv1d(cin, cout, 2 * rate, rate)]
                                   + [ResidualUnit(cout, d) for d in (1, 3, 9)])

    def forward(self, x: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        x = self.block[0](x)
        for layer in self.block[1:]:
            x = layer(x, state)
        return x


# ---------------------------------------------------------------------------------- quantizer
class Codebook(nn.Module):
    """Entry i = embedding_sum[i] / max(cluster_usage[i], 1e-5). Keys: embedding_sum, cluster_usage."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        return F.embedding(codes, self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None])


class _VectorQuantizer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = Codebook(size, dim)


class ResidualVectorQuantizer(nn.Module):
    """Sum of codebook entries -> 1x1 conv. `input_proj` (encode side) is in the file but unused here."""

    def __init__(self, num_quantizers: int, size: int, dim: int, io_dim: int):
        super().__init__()
        self.vq = nn.Module()
        self.vq.layers = nn.ModuleList([_VectorQuantizer(size, dim) for _ in range(num_quantizers)])
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, K, T] -> [B, io_dim, T]."""
        acc = 0
        for k in range(codes.shape[1]):
            acc = acc + self.vq.layers[k]._codebook.lookup(codes[:, k])
        return self.output_proj(acc.transpose(1, 2))


class SplitResidualVectorQuantizer(nn.Module):
    """Codebook 0 (semantic) and codebooks 1..15 (acoustic) have separate output projections."""

    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.n_semantic = cfg.num_semantic_quantizers
        self.rvq_first = ResidualVectorQuantizer(self.n_semantic, cfg.codebook_size, dim, cfg.codebook_dim)
        self.rvq_rest = ResidualVectorQuantizer(cfg.num_quantizers - self.n_semantic, cfg.codebook_size, dim,
                                                cfg.codebook_dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.rvq_first.decode(codes[:, :self.n_semantic]) + self.rvq_rest.decode(codes[:, self.n_semantic:])


# ---------------------------------------------------------------------------------- transformer
class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class WindowedAttention(CodecAttention):
    """MHA without q/k norm, RoPE, causal sliding window; keeps the last window-1 keys/values per request."""

    def __init__(self, cfg: Code2WavConfig):
        super().__init__(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                         cfg.attention_bias)
        self.cache_len = cfg.sliding_window - 1
        self.state_key = ""

    def init_state(self, state: Code2WavStream, batch: int, like: torch.Tensor) -> None:
        for kv in ("k", "v"):
            state.tensors[f"{self.state_key}.{kv}"] = like.new_zeros(batch, self.kv_heads, self.cache_len,
                                                                      self.head_dim)

    def forward(self, x, cos, sin, mask, state: Code2WavStream) -> torch.Tensor:
        q, k, v = self.project(x, cos, sin)
        k = torch.cat([state.tensors[f"{self.state_key}.k"], k], dim=2)
        v = torch.cat([state.tensors[f"{self.state_key}.v"], v], dim=2)
        state.tensors[f"{self.state_key}.k"] = k[:, :, -self.cache_len:].clone()
        state.tensors[f"{self.state_key}.v"] = v[:, :, -self.cache_len:].clone()
        return self.attend(q, k, v, attn_mask=mask)


class TransformerLayer(nn.Module):
    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = WindowedAttention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x, cos, sin, mask, state: Code2WavStream) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, state))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class PreTransformer(nn.Module):
    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        self.window = cfg.sliding_window
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def window_mask(self, frames: torch.Tensor, n: int) -> torch.Tensor:
        """[B, 1, n, window-1+n] bool: query i (position frames+i) sees cached slot j and new key m."""
        cache = self.window - 1
        i = torch.arange(n, device=frames.device)[:, None]
        j = torch.arange(cache, device=frames.device)[None, :]
        m = torch.arange(n, device=frames.device)[None, :]
        filled = frames.clamp(max=cache)[:, None, None]  # cached slots hold the last `filled` frames
        cached = (j >= i)[None] & (j >= cache - filled)  # distance cache + i - j < window
        new = ((m <= i) & (i - m < self.window))[None].expand(frames.shape[0], -1, -1)
        return torch.cat([cached, new], dim=-1)[:, None]

    def forward(self, x: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        b, n, _ = x.shape
        positions = state.frames[:, None] + torch.arange(n, device=x.device)[None]
        cos, sin = self.rotary(positions.reshape(-1))
        cos = cos.view(b, 1, n, -1).to(x.dtype)
        sin = sin.view(b, 1, n, -1).to(x.dtype)
        mask = self.window_mask(state.frames, n)
        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, cos, sin, mask, state)
        return self.output_proj(self.norm(h))


# ---------------------------------------------------------------------------------- decoder
class Code2Wav(nn.Module):
    """Module tree = `decoder.*` of the codec checkpoint. fp32 like the reference and vLLM."""

    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        self.config = cfg
        self.samples_per_frame = cfg.samples_per_frame
        self.pre_transformer = PreTransformer(cfg)
        self.quantizer = SplitResidualVectorQuantizer(cfg)
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, 3)
        self.upsample = nn.ModuleList([
            nn.ModuleList([CausalTransConv1d(cfg.latent_dim, cfg.latent_dim, r, r), ConvNeXtBlock(cfg.latent_dim)])
            for r in cfg.upsampling_ratios])
        decoder: list[nn.Module] = [CausalConv1d(cfg.latent_dim, cfg.decoder_dim, 7)]
        for i, rate in enumerate(cfg.upsample_rates):
            decoder.append(DecoderBlock(cfg.decoder_dim // 2 ** i, cfg.decoder_dim // 2 ** (i + 1), rate))
        out_dim = cfg.decoder_dim // 2 ** len(cfg.upsample_rates)
        decoder += [SnakeBeta(out_dim), CausalConv1d(out_dim, 1, 7)]
        self.decoder = nn.ModuleList(decoder)
        self._stateful = [(name, m) for name, m in self.named_modules() if hasattr(m, "init_state")]
        for name, m in self._stateful:
            m.state_key = name

    @classmethod
    def from_codec_dir(cls, codec_dir: Path, device: torch.device | str = "cpu") -> "Code2Wav":
        """Load `decoder.*` of a codec directory (Qwen3-TTS-Tokenizer-12Hz or a model's speech_tokenizer/)."""
        codec_dir = Path(codec_dir)
        model = cls(CodecConfig.from_dir(codec_dir).decoder)
        load_into(model, iter_tensors(codec_dir, "decoder."), where=f"{codec_dir} decoder")
        return model.to(device).eval()

    @torch.no_grad()
    def init_dummy(self, seed: int = 0) -> "Code2Wav":
        """`--load-format dummy`: random weights, but codebook usages at 1 and SnakeBeta at its init (0), so
        the codebook division and exp() stay in range (a random usage near 0 would scale entries by 1e5)."""
        init_dummy(self, seed=seed)
        for name, p in self.named_parameters():
            if name.endswith("cluster_usage"):
                p.fill_(1.0)
            elif name.endswith(("alpha", "beta")):
                p.zero_()
        return self

    def cast(self, dtype: torch.dtype) -> "Code2Wav":
        """Weights in `dtype` (float32 is the reference's; bfloat16 is the fast serving choice); the RoPE
        frequencies stay float32, as positions run into the thousands of frames."""
        inv_freq = self.pre_transformer.rotary.inv_freq
        self.to(dtype)
        self.pre_transformer.rotary.inv_freq = inv_freq
        return self

    # -- streaming ------------------------------------------------------------------------------
    def new_stream(self, batch: int = 1) -> Code2WavStream:
        like = self.pre_conv.conv.weight
        state = Code2WavStream(frames=torch.zeros(batch, dtype=torch.long, device=like.device))
        for _, m in self._stateful:
            m.init_state(state, batch, like)
        return state

    @torch.inference_mode()
    def decode_stream(self, state: Code2WavStream, codes: torch.Tensor) -> torch.Tensor:
        """Next frames of one request: codes [n, 16] -> samples [n * 1920]; `state` advances."""
        codes = self.check_codes(codes)
        if codes.shape[0] == 0:
            return self.pre_conv.conv.weight.new_zeros(0)
        return self.forward(codes[None], state)[0]

    # -- whole utterances -----------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, codes: torch.Tensor, chunk_frames: int = REFERENCE_CHUNK_FRAMES,
               left_context_frames: int = REFERENCE_LEFT_CONTEXT_FRAMES) -> torch.Tensor:
        """codes [T, 16] -> waveform [T * 1920], windowed like qwen-tts (identical to one pass for T <= 300)."""
        codes = self.check_codes(codes)
        return self._chunked(codes[None], chunk_frames, left_context_frames)[0]

    def _chunked(self, codes: torch.Tensor, chunk: int, left: int) -> torch.Tensor:
        out, start, total = [], 0, codes.shape[1]
        while start < total:
            end = min(start + chunk, total)
            ctx = left if start - left > 0 else start  # qwen-tts's rule, kept as is
            wav = self.forward(codes[:, start - ctx:end], self.new_stream(codes.shape[0]))
            out.append(wav[:, ctx * self.samples_per_frame:])
            start = end
        if not out:
            return codes.new_zeros(codes.shape[0], 0, dtype=self.pre_conv.conv.weight.dtype)
        return torch.cat(out, dim=1)

    def forward(self, codes: torch.Tensor, state: Code2WavStream) -> torch.Tensor:
        """codes [B, n, 16] long in [0, codebook_size) -> [B, n * 1920]; advances `state`."""
        hidden = self.quantizer.decode(codes.transpose(1, 2))
        hidden = self.pre_conv(hidden, state).transpose(1, 2)
        hidden = self.pre_transformer(hidden, state).permute(0, 2, 1)
        for trans_conv, convnext in self.upsample:
            hidden = convnext(trans_conv(hidden, state), state)
        wav = hidden
        for layer in self.decoder:
            wav = layer(wav, state) if not isinstance(layer, SnakeBeta) else layer(wav)
        state.frames = state.frames + codes.shape[1]
        return wav.clamp(min=-1, max=1)[:, 0]

    def check_codes(self, codes: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
        """One stream's `codes` [n, 16] checked, as long on `device` (the decoder's if None)."""
        if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.shape[-1] != NUM_CODE_GROUPS:
            got = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
            raise CodecInputError(f"codec codes must be [n, {NUM_CODE_GROUPS}], got {got}")
        if codes.is_floating_point():
            raise CodecInputError("codec codes must be integers")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.config.codebook_size):
            raise CodecInputError(f"codec codes must be in [0, {self.config.codebook_size}), "
                                  f"got [{int(codes.min())}, {int(codes.max())}]")
        return codes.to(device or self.pre_conv.conv.weight.device, torch.long)
