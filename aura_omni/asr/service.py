"""The ASR stage as one object: load Qwen3-ASR, turn (samples, rate) into Transcripts.

`transcribe` prepares pieces (resample, split, features), runs them through the stage's engine, which
concurrent callers share (continuous batching, CUDA graphs), and parses the output into
(language, text).
"""

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from aura_omni.asr.prompt import ASR_TEXT_ID, AsrPromptBuilder, load_asr_tokenizer
from aura_omni.asr.split import MAX_ASR_INPUT_SECONDS, split_long_audio
from aura_omni.asr.transcript import Transcript, join_texts, merge_languages, normalize_language, parse_asr_output
from aura_omni.engine.config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.engine.shared_engine import SharedEngine
from aura_omni.layers import kernel_switches
from aura_omni.layers.device import on_stream, stage_stream
from aura_omni.media.asr_features import SAMPLE_RATE, log_mel_spectrogram, pad_to_min_length
from aura_omni.media.audio import AudioDecodeError, resample
from aura_omni.models.loader import resolve_checkpoint
from aura_omni.models.qwen3_asr import Qwen3ASR, load_generation_eos, preset_config_path
from aura_omni.models.qwen3_asr_encoder import num_audio_tokens
from aura_omni.pipeline.stage_engine import engine_config

SILENCE_PEAK = 1e-4  # |sample| below this everywhere (about -80 dBFS, 3 LSB of 16-bit): no speech, skip the model
MAX_NEW_TOKENS = 256  # vllm-omni's stage 0 max_tokens


class TranscriptionCancelled(Exception):
    """The caller set the transcription's cancel event (it left): its engine requests were aborted."""


@dataclass
class AsrPiece:
    """One model input: a piece (at most the length limit) of one clip, ready to prefill."""

    clip: int  # index of the clip it belongs to
    input_ids: list[int]
    features: torch.Tensor | None  # [128, L] log-mel; None for a silent piece (no model call)
    language: str | None  # forced language or None


def to_asr_samples(wav: np.ndarray, sr: int) -> np.ndarray:
    """Any (samples, rate) -> 16 kHz mono float32; channels [S, C] are averaged; peaks above 1 scaled down."""
    wav = np.asarray(wav)
    if wav.ndim == 2:
        wav = wav.mean(axis=1)
    if wav.ndim != 1 or wav.shape[0] == 0:
        raise AudioDecodeError(f"audio must be non-empty mono [S] or [S, C] samples, got shape {wav.shape}")
    if np.issubdtype(wav.dtype, np.integer):
        wav = wav.astype(np.float32) / float(np.iinfo(wav.dtype).max + 1)
    wav = wav.astype(np.float32, copy=False)
    if not np.isfinite(wav).all():
        raise AudioDecodeError("audio contains NaN or infinite samples")
    if sr <= 0:
        raise AudioDecodeError(f"invalid sample rate {sr}")
    wav = resample(wav, int(sr), SAMPLE_RATE)
    peak = float(np.abs(wav).max()) if wav.size else 0.0
    return wav / peak if peak > 1.0 else wav


class AsrService:
    def __init__(self, model: Qwen3ASR, tokenizer, *, eos_token_ids: tuple[int, ...] = (151645, 151643),
                 max_seconds: float = MAX_ASR_INPUT_SECONDS, engine_config: EngineConfig | None = None,
                 max_new_tokens: int = MAX_NEW_TOKENS):
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.tokenizer = tokenizer
        self.prompts = AsrPromptBuilder(tokenizer, model.config.audio_token_id)
        self.eos_token_ids = tuple(eos_token_ids)
        self.max_seconds = max_seconds
        # the stage's share of the device: 0.1 of the GPU in the seed deploy (configs/aura_omni.yaml)
        self.engine_config = engine_config or EngineConfig(max_model_len=8192, max_num_seqs=16, gpu_memory_utilization=0.1)
        self._engine: SharedEngine | None = None
        self._engine_lock = threading.Lock()
        # the head of the voice chain: on a shared GPU its steps run on a high-priority stream of their own instead of
        # queueing behind the AURA and Talker steps already issued (audio in, token ids out: nothing crosses on device)
        self.stream = stage_stream(model.device, priority=-1, enabled=self.engine_config.use_stage_stream)
        self.languages = tuple(model.config.support_languages) or None

    @classmethod
    def from_pretrained(cls, model: str | Path, *, dtype: torch.dtype | None = None, device: str = "cpu",
                        load_format: str = "auto", tokenizer: str | Path | None = None, **kw) -> "AsrService":
        """Checkpoint dir or repo id. With load_format "dummy" the tokenizer comes from `tokenizer`, or a
        generated one (the real Qwen vocabulary with the ASR tokens) when not given."""
        dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
        net = Qwen3ASR.from_pretrained(model, dtype=dtype, device=device, load_format=load_format)
        if load_format == "dummy":
            tok_dir = tokenizer or _dummy_tokenizer_dir(preset_config_path(model).parent)
            return cls(net, load_asr_tokenizer(tok_dir), **kw)
        ckpt = resolve_checkpoint(model)
        return cls(net, load_asr_tokenizer(tokenizer or ckpt), eos_token_ids=load_generation_eos(ckpt), **kw)

    # ---- request -> model inputs ---------------------------------------------------------------
    def prepare(self, audios: list[tuple[np.ndarray, int]], language: str | None = None,
                context: str | None = None) -> list[AsrPiece]:
        """Validate, resample, split long clips and compute features; one AsrPiece per model input."""
        forced = normalize_language(language, self.languages) if self.languages else normalize_language(language)
        pieces = []
        for i, (wav, sr) in enumerate(audios):
            samples = to_asr_samples(wav, sr)
            for part in split_long_audio(samples, SAMPLE_RATE, self.max_seconds):
                if part.size == 0 or float(np.abs(part).max()) < SILENCE_PEAK:
                    pieces.append(AsrPiece(i, [], None, forced))
                    continue
                features = log_mel_spectrogram(pad_to_min_length(part), device=self.model.device)
                ids = self.prompts.build(num_audio_tokens(features.shape[1]), context or "", forced)
                pieces.append(AsrPiece(i, ids, features, forced))
        return pieces

    def finish(self, pieces: list[AsrPiece], outputs: list[list[int]], num_clips: int) -> list[Transcript]:
        """Generated ids per piece -> one Transcript per clip (texts joined, languages merged)."""
        texts: list[list[str]] = [[] for _ in range(num_clips)]
        langs: list[list[str]] = [[] for _ in range(num_clips)]
        for piece, ids in zip(pieces, outputs):
            t = self.parse(ids, piece.language) if piece.features is not None else Transcript(piece.language or "", "")
            texts[piece.clip].append(t.text)
            langs[piece.clip].append(t.language)
        return [Transcript(merge_languages(l), join_texts(t)) for l, t in zip(langs, texts)]

    def parse(self, ids: list[int], forced_language: str | None) -> Transcript:
        ids = [t for t in ids if t not in self.eos_token_ids]
        decode = lambda x: self.tokenizer.decode(x, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if forced_language is None and ASR_TEXT_ID in ids:  # split on the id: robust to how the tokenizer flags it
            k = ids.index(ASR_TEXT_ID)
            return parse_asr_output(decode(ids[:k]) + "<asr_text>" + decode(ids[k + 1:]))
        return parse_asr_output(decode(ids), forced_language)

    def engine_prompts(self, pieces: list[AsrPiece]) -> list[tuple[list[int], MultimodalPrompt]]:
        """(prompt ids, MultimodalPrompt) per live piece, for `LLMEngine.add_request(id, ids, params, mm=...)`."""
        audio = self.model.encode_audio([p.features for p in pieces])
        out = []
        for p, a in zip(pieces, audio):
            embeds, positions = self.model.prompt_embeds(torch.tensor(p.input_ids), a)
            out.append((p.input_ids, MultimodalPrompt(embeds, positions)))  # no content hash: never prefix-cached
        return out

    # ---- the simple loop -----------------------------------------------------------------------
    @torch.inference_mode()
    def transcribe(self, audios: list[tuple[np.ndarray, int]], language: str | None = None,
                   context: str | None = None, max_new_tokens: int | None = None,
                   temperature: float = 0.0, seed: int | None = None,
                   cancel: threading.Event | None = None) -> list[Transcript]:
        """(samples, rate) clips -> one Transcript each. Raises AudioDecodeError (bad audio) and
        UnsupportedLanguageError / ValueError (bad options): both are client errors. Setting `cancel` (from
        another thread) stops the work at the next engine step with TranscriptionCancelled."""
        params = SamplingParams(temperature=temperature, max_tokens=max_new_tokens or self.max_new_tokens, seed=seed)
        with on_stream(self.stream), kernel_switches.using(self.engine_config.kernels):  # the audio encoder's too
            pieces = self.prepare(audios, language, context)
            live = [p for p in pieces if p.features is not None]
            generated = iter(self.generate(live, params, cancel) if live else [])
            outputs = [next(generated) if p.features is not None else [] for p in pieces]
        return self.finish(pieces, outputs, len(audios))

    def stats(self) -> dict[str, float] | None:
        """The engine's stats once a transcription has built it (None before: asking does not build it)."""
        return self._engine.stats() if self._engine is not None else None

    @property
    def engine(self) -> SharedEngine:
        """The stage's engine (continuous batching of concurrent transcriptions), built on first use."""
        with self._engine_lock:
            if self._engine is None:
                self._engine = SharedEngine(LLMEngine(self.model, self.engine_config, list(self.eos_token_ids), name="asr"))
            return self._engine

    @torch.inference_mode()
    def generate(self, pieces: list[AsrPiece], params: SamplingParams,
                 cancel: threading.Event | None = None) -> list[list[int]]:
        """Generated ids (EOS excluded) of every piece; concurrent callers share the engine's decode steps."""
        outputs: list[list[int]] = [[] for _ in pieces]
        requests = [(ids, params, mm) for ids, mm in self.engine_prompts(pieces)]
        run = self.engine.run(requests)
        try:
            for i, out in run:
                outputs[i] += out.new_token_ids
                if cancel is not None and cancel.is_set():
                    raise TranscriptionCancelled()
        finally:
            run.close()  # aborts whatever is unfinished
        return [[t for t in o if t not in self.eos_token_ids] for o in outputs]


def load_asr_stage(stage, device: str, dtype: torch.dtype, load_format: str) -> AsrService:
    """Runtime loader of a deploy file's `asr` stage (server/runtime.py STAGE_LOADERS)."""
    max_tokens = stage.default_sampling_params.max_tokens or MAX_NEW_TOKENS
    return AsrService.from_pretrained(stage.model, dtype=dtype, device=device, load_format=load_format,
                                      max_new_tokens=max_tokens, engine_config=engine_config(stage))


def _dummy_tokenizer_dir(preset_dir: Path) -> Path:
    """A tokenizer for dummy weights: the real Qwen vocabulary with the ASR added tokens, written once."""
    import tempfile

    from aura_omni.testing.tiny_asr import write_asr_tokenizer

    out = Path(tempfile.gettempdir()) / "aura_omni_asr_tokenizer"
    if not (out / "tokenizer_config.json").exists():
        write_asr_tokenizer(out)
    return out
