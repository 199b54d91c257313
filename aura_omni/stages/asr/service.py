"""The ASR stage as one object: load Qwen3-ASR, turn (samples, rate) into Transcripts.

A transcription is one request to the stage's loop (stages/loop.py): on the loop thread it is prepared (resample,
split, on the host), then at the next step every request added since gets its features and audio encoding in one
batch on the stage's stream, and its pieces join the engine, whose steps batch every
caller's pieces (continuous batching, CUDA graphs); the parsed Transcripts come back as one output.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from aura_omni.stages.asr.prompt import ASR_TEXT_ID, AsrPromptBuilder
from aura_omni.stages.asr.prompt_hold import PromptHold
from aura_omni.stages.asr.split import MAX_ASR_INPUT_SECONDS, split_long_audio
from aura_omni.stages.asr.transcript import Transcript, join_texts, merge_languages, normalize_language, parse_asr_output
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.media.asr_features import SAMPLE_RATE, log_mel_spectrograms, num_frames, pad_to_min_length
from aura_omni.media.audio import AudioDecodeError, resample
from aura_omni.models.loader import resolve_checkpoint
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.models.qwen3_asr import Qwen3ASR, load_generation_eos
from aura_omni.models.qwen3_asr_encoder import TOKENS_PER_CHUNK, num_audio_tokens
from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
from aura_omni.stages.deploy_settings import engine_config
from aura_omni.stages.llm import numerical_fault
from aura_omni.stages.stage_engine import StageOutput
from aura_omni.stages.loop import StageLoop

SILENCE_PEAK = 1e-4  # |sample| below this everywhere (about -80 dBFS, 3 LSB of 16-bit): no speech, skip the model
MAX_NEW_TOKENS = 256  # vllm-omni's stage 0 max_tokens
PROMPT_TOKENS = 64  # the ASR prompt around its audio tokens (system, language, markers), with room to spare


@dataclass
class AsrPiece:
    """One model input: a piece (at most the length limit) of one clip, ready to prefill."""

    clip: int  # index of the clip it belongs to
    input_ids: list[int]
    samples: np.ndarray | None  # 16 kHz, at least 0.5 s; None for a silent piece (no model call)
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
        # the stage's share of the device: 0.1 of the GPU in the seed deploy (configs/aura_omni.yaml)
        self.engine_config = engine_config or EngineConfig(max_model_len=8192, max_num_seqs=16, gpu_memory_utilization=0.1)
        self.eos_token_ids = tuple(eos_token_ids)
        # a piece must fit the engine with its prompt and reply: split long audio shorter than qwen-asr's 20 minutes
        # when max_model_len is small (13 audio tokens per second)
        room = (self.engine_config.max_model_len - max_new_tokens - PROMPT_TOKENS) / TOKENS_PER_CHUNK
        self.max_seconds = min(max_seconds, room)
        self.languages = tuple(model.config.support_languages) or None
        self.engine = LLMEngine(self.model, self.engine_config, list(self.eos_token_ids), name="asr")
        if model.device.type == "cuda" and not self.engine_config.enforce_eager:  # a burst's clips: a window each
            model.audio_tower.use_layer_graphs(max(self.engine_config.max_num_seqs, 8), capture=True)  # captured later
        # the head of the voice chain: on a shared GPU its loop's stream has high priority, so its steps do not queue
        # behind the AURA and Talker steps already issued (audio in, token ids out: nothing crosses on device)
        self.loop = StageLoop(AsrStageEngine(self), model.device, name="asr", priority=-1,
                              streams=self.engine_config.use_stage_stream, kernels=self.engine_config.kernels)

    @classmethod
    def from_pretrained(cls, model: str | Path, *, dtype: torch.dtype | None = None, device: str = "cpu",
                        load_format: str = "auto", tokenizer: str | Path | None = None, **kw) -> "AsrService":
        """Checkpoint dir or repo id. With load_format "dummy" the tokenizer comes from `tokenizer`, or a
        generated one (the real Qwen vocabulary with the ASR tokens) when not given."""
        dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
        net = Qwen3ASR.from_pretrained(model, dtype=dtype, device=device, load_format=load_format)
        if load_format == "dummy":
            tok_dir = tokenizer or dummy_tokenizer_dir("asr")
            return cls(net, load_tokenizer(tok_dir), **kw)
        ckpt = resolve_checkpoint(model)
        return cls(net, load_tokenizer(tokenizer or ckpt), eos_token_ids=load_generation_eos(ckpt), **kw)

    # ---- request -> model inputs ---------------------------------------------------------------
    def prepare(self, audios: list[tuple[np.ndarray, int]], language: str | None = None,
                context: str | None = None) -> list[AsrPiece]:
        """Validate, resample and split long clips, on the host; one AsrPiece per model input."""
        forced = normalize_language(language, self.languages) if self.languages else normalize_language(language)
        pieces = []
        for i, (wav, sr) in enumerate(audios):
            samples = to_asr_samples(wav, sr)
            for part in split_long_audio(samples, SAMPLE_RATE, self.max_seconds):
                if part.size == 0 or float(np.abs(part).max()) < SILENCE_PEAK:
                    pieces.append(AsrPiece(i, [], None, forced))
                    continue
                part = pad_to_min_length(part)
                ids = self.prompts.build(num_audio_tokens(num_frames(part.shape[0])), context or "", forced)
                pieces.append(AsrPiece(i, ids, part, forced))
        return pieces

    def features(self, pieces: list[AsrPiece]) -> list[torch.Tensor]:
        """The live pieces' log-mel features [128, L_i] on the model's device, computed in one batch."""
        return log_mel_spectrograms([p.samples for p in pieces], device=self.model.device)

    def finish(self, pieces: list[AsrPiece], outputs: list[list[int]], num_clips: int) -> list[Transcript]:
        """Generated ids per piece -> one Transcript per clip (texts joined, languages merged)."""
        texts: list[list[str]] = [[] for _ in range(num_clips)]
        langs: list[list[str]] = [[] for _ in range(num_clips)]
        for piece, ids in zip(pieces, outputs):
            t = self.parse(ids, piece.language) if piece.samples is not None else Transcript(piece.language or "", "")
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
        embeds = self.model.prompts_embeds([p.input_ids for p in pieces], self.features(pieces))
        # positions 0..L-1 (None): no tensor per clip for the engine to slice; no content hash: never prefix-cached
        return [(p.input_ids, MultimodalPrompt(e)) for p, e in zip(pieces, embeds)]

    # ---- requests ------------------------------------------------------------------------------
    async def atranscribe(self, audios: list[tuple[np.ndarray, int]], language: str | None = None,
                          context: str | None = None, max_new_tokens: int | None = None, temperature: float = 0.0,
                          seed: int | None = None, request_id: str | None = None) -> list[Transcript]:
        """(samples, rate) clips -> one Transcript each. Raises AudioDecodeError (bad audio) and
        UnsupportedLanguageError / ValueError (bad options): both are client errors. Cancelling the awaiting task
        aborts the work before the stage's next step."""
        job = self._job(audios, language, context, max_new_tokens, temperature, seed)
        return await self.loop.result(request_id or self.loop.new_request_id(), job)

    def transcribe(self, audios: list[tuple[np.ndarray, int]], language: str | None = None,
                   context: str | None = None, max_new_tokens: int | None = None,
                   temperature: float = 0.0, seed: int | None = None) -> list[Transcript]:
        """Offline, blocking `atranscribe`."""
        job = self._job(audios, language, context, max_new_tokens, temperature, seed)
        return next(self.loop.run(self.loop.new_request_id(), job))

    def _job(self, audios, language, context, max_new_tokens, temperature, seed) -> "AsrJob":
        params = SamplingParams(temperature=temperature, max_tokens=max_new_tokens or self.max_new_tokens, seed=seed)
        return AsrJob(list(audios), language, context, params)

    def stats(self) -> dict[str, float]:
        """Offline and tests: the loop's counters (running, waiting, free_blocks, ...) once it has applied what is
        queued (aborts included). Servers read `loop.counters`, which never waits."""
        self.loop.settle()
        return self.loop.stats()

    def generate(self, pieces: list[AsrPiece], params: SamplingParams) -> list[list[int]]:
        """Offline: generated ids (EOS excluded) of prepared pieces, through the stage's loop."""
        return next(self.loop.run(self.loop.new_request_id(), AsrJob([], None, None, params, pieces)))

    def close(self) -> None:
        self.loop.close()


@dataclass
class AsrJob:
    """One transcription request to the stage's loop; `pieces` given = generated ids only (no parsing)."""

    audios: list[tuple[np.ndarray, int]]
    language: str | None
    context: str | None
    params: SamplingParams
    pieces: list[AsrPiece] | None = None


@dataclass
class _Running:
    job: AsrJob
    pieces: list[AsrPiece]
    live: list[int]  # indexes of the pieces in the engine
    outputs: list[list[int]] = field(default_factory=list)
    remaining: set = field(default_factory=set)


class AsrStageEngine:
    """The ASR loop's engine: a request's pieces become engine requests `<id>/<k>`; its output is every piece's ids
    (or, for a transcription, the parsed Transcripts) once the last piece ends. `add` prepares a request's pieces on
    the host (validation, resampling); features and the audio encoder run at the next step, once for every request
    added since, so clips that arrive together cost one set of device operations instead of one each (a burst of 32
    commits made 32 adds of ~2 ms each before the first step, each waiting for the interpreter lock at every call).
    Clips added while others decode may be held a little to share one such step (prompt_hold.py: deploy `admission`)."""

    def __init__(self, service: AsrService):
        self.service = service
        self._running: dict[str, _Running] = {}
        self._unencoded: dict[str, float] = {}  # added, pieces not yet encoded nor in the engine -> when added
        self._ready: list[StageOutput] = []  # requests with nothing for the model (silence)
        config = service.engine_config
        self.hold = PromptHold(config.prompt_hold_factor, config.prompt_max_hold_s)

    def add(self, request_id: str, job: AsrJob) -> None:
        pieces = job.pieces if job.pieces is not None else self.service.prepare(job.audios, job.language, job.context)
        live = [k for k, p in enumerate(pieces) if p.samples is not None]
        self._running[request_id] = _Running(job, pieces, live, [[] for _ in pieces], set(live))
        if live:
            self._unencoded[request_id] = self.hold.arrived()
        else:
            self._ready.append(self._finish(request_id))

    def abort(self, request_id: str) -> None:
        run = self._running.pop(request_id, None)
        if self._unencoded.pop(request_id, None) is None and run is not None:  # in the engine: abort its pieces
            for k in run.remaining:
                self.service.engine.abort(f"{request_id}/{k}")

    def has_work(self) -> bool:
        return bool(self._ready) or bool(self._unencoded) or self.service.engine.has_unfinished()

    def step(self) -> list[StageOutput]:
        done, self._ready = self._ready, []
        engine, start = self.service.engine, time.perf_counter()
        took_prompts = bool(self._unencoded) and self.hold.admit(list(self._unencoded.values()),
                                                                 len(engine.scheduler.running))
        if took_prompts:
            done += self._admit()
        if not engine.has_unfinished():
            return done
        outputs = engine.step()
        self.hold.stepped(time.perf_counter() - start, took_prompts)
        for out in outputs:
            rid, _, k = out.request_id.rpartition("/")
            run = self._running.get(rid)
            if run is None:
                continue
            if (fault := numerical_fault(self.service.engine, out)) is not None:
                self.abort(rid)  # its other pieces too
                done.append(StageOutput(rid, fault, True))
                continue
            run.outputs[int(k)] += out.new_token_ids
            if out.finished:
                run.remaining.discard(int(k))
                if not run.remaining:
                    done.append(self._finish(rid))
        return done

    def _admit(self) -> list[StageOutput]:
        """Encode the waiting requests' pieces in one batch and add them to the engine; a failure fails them alone."""
        rids, self._unencoded = list(self._unencoded), {}
        svc, runs = self.service, [self._running[r] for r in rids]
        try:
            prompts = iter(svc.engine_prompts([run.pieces[k] for run in runs for k in run.live]))
        except Exception as e:  # noqa: BLE001 - the requests of this batch fail; the engine's others go on
            for r in rids:
                self._running.pop(r, None)
            return [StageOutput(r, e, True) for r in rids]
        failed = []
        for rid, run in zip(rids, runs):
            mine = [next(prompts) for _ in run.live]
            try:
                for k, (ids, mm) in zip(run.live, mine):
                    svc.engine.add_request(f"{rid}/{k}", ids, run.job.params, mm)
            except Exception as e:  # noqa: BLE001 - e.g. a piece over the engine's length: this request alone
                self.abort(rid)
                failed.append(StageOutput(rid, e, True))
        return failed

    def _finish(self, request_id: str) -> StageOutput:
        run = self._running.pop(request_id)
        eos = self.service.eos_token_ids
        ids = [[t for t in o if t not in eos] for o in run.outputs]
        if run.job.pieces is not None:
            return StageOutput(request_id, [ids[k] for k in run.live], True)
        return StageOutput(request_id, self.service.finish(run.pieces, ids, len(run.job.audios)), True)

    def capture_next_graph(self, max_windows: int | None = None, when_idle: bool = False) -> bool:
        """Capture one of the audio encoder's missing layer graphs (steps of up to `max_windows` windows); False when
        none is left, or with `when_idle` while the stage holds a request. The warm start captures a lone clip's, the
        server the rest once it is ready (pipeline/warmup.py)."""
        graphs = self.service.model.audio_tower.layer_graphs
        if graphs is None or when_idle and self.has_work():
            return False
        return graphs.capture_next(max_windows)

    def graphs_missing(self) -> int:
        graphs = self.service.model.audio_tower.layer_graphs
        return len(graphs.missing()) if graphs is not None else 0

    def stats(self) -> dict[str, float]:
        return {**self.service.engine.stats(), "graphs_pending": self.graphs_missing()}


def load_asr_stage(stage, device: str, dtype: torch.dtype, load_format: str) -> AsrService:
    """Runtime loader of a deploy file's `asr` stage (pipeline/runtime.py STAGE_LOADERS)."""
    max_tokens = stage.default_sampling_params.max_tokens or MAX_NEW_TOKENS
    return AsrService.from_pretrained(stage.model, dtype=dtype, device=device, load_format=load_format,
                                      max_new_tokens=max_tokens, engine_config=engine_config(stage))


