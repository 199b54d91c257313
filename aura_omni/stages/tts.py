"""The Qwen3-TTS stages (Talker, Code2Wav) behind one facade: load a checkpoint, validate requests, make clone
voices, and stream 24 kHz audio.

    tts = Qwen3TTS.load("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    async for chunk in tts.astream(req, 1, 25): ...   # first chunk after 1 codec frame, then every 25
    wav = tts.synthesize(TTSRequest(text="Hello.", task_type="CustomVoice", speaker="Vivian"))   # offline, blocking

Two stage loops (stages/loop.py) do the work: the Talker's, whose steps batch every stream's next frame
(stages/talker.py), and Code2Wav's, whose steps decode concurrent streams' chunks together (stages/code2wav.py).
Only host data crosses between them (codec frames, samples), from one loop thread to the other
(stages/audio_relay.py). Leaving a stream early aborts its Talker request and drops its decoder state.
"""

from dataclasses import dataclass, fields
from pathlib import Path
from typing import AsyncIterator, Iterator

import numpy as np
import torch

from aura_omni.models.loader import (PRESETS_DIR, CheckpointError, dummy_config_dir, init_dummy, iter_tensors, load_into,
                                    resolve_checkpoint)
from aura_omni.models.qwen3_tts.checkpoint_config import GenerationDefaults, Qwen3TTSConfig
from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.deploy import Stage
from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import PromptTooLongError
from aura_omni.models.qwen3_tts.generate import TalkerInput, TalkerPlan, talker_inputs
from aura_omni.models.qwen3_tts.prompt import instruct_template, plan_prompt, ref_template, target_template
from aura_omni.models.qwen3_tts.sampling import SamplingParams
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.models.qwen3_tts.text_stream import StableTokens, TextFeed
from aura_omni.stages.audio_relay import AudioRelay
from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, Code2WavStageEngine, FrameChunks
from aura_omni.stages.deploy_settings import engine_config
from aura_omni.stages.loop import StageLoop
from aura_omni.stages.talker import TalkerEngine, frames_of
from aura_omni.stages.tts_parts import code2wav_device, load_code2wav, load_codec_encoder, load_speaker_encoder

SAMPLE_RATE = 24000  # Code2Wav output rate
SAMPLES_PER_FRAME = 1920  # 24000 / 12.5 frames per second
TASK_TYPES = {"Base": "base", "CustomVoice": "custom_voice", "VoiceDesign": "voice_design"}
TASK_OF_MODEL_TYPE = {model_type: task for task, model_type in TASK_TYPES.items()}  # checkpoint tts_model_type
GiB = 1 << 30


def default_engine_config(device: str | torch.device) -> EngineConfig:
    """Talker engine defaults: 32 concurrent requests, 8192 tokens each (prompt + max_new_tokens); on CUDA a
    4 GiB KV budget (~36k tokens for the 1.7B) and decode graphs over up to 2048 tokens of context, at the engine's
    batch sizes up to the deploy's max_num_seqs."""
    cuda = torch.device(device).type == "cuda"
    return EngineConfig(max_model_len=8192, max_num_seqs=32, max_num_batched_tokens=8192,
                        kv_cache_bytes=4 * GiB if cuda else None,
                        cuda_graph_max_seq_len=2048)


class TTSRequestError(ValueError):
    """The request cannot be served by this checkpoint (maps to HTTP 400)."""


@dataclass
class VoiceClonePrompt:
    """A cloned voice (Base models): x-vector, plus reference codes and text for ICL."""

    ref_codes: torch.Tensor | None  # [F, 16] long; None in x-vector-only mode
    x_vector: torch.Tensor  # [H]
    ref_text: str | None
    x_vector_only: bool


@dataclass
class TTSRequest:
    text: str | None = None
    text_ids: list[int] | None = None  # pre-tokenised full target template (token-id passthrough)
    text_feed: TextFeed | None = None  # or the body's ids arrive while it speaks (`feed_text`); streaming text mode
    task_type: str = "CustomVoice"  # "Base" | "CustomVoice" | "VoiceDesign"
    language: str = "Auto"
    speaker: str | None = None
    instruct: str | None = None
    voice: VoiceClonePrompt | None = None
    non_streaming_mode: bool | None = None  # None: qwen-tts default (Base False, others True)
    max_new_tokens: int | None = None
    do_sample: bool | None = None  # None = generation_config.json
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_dosample: bool | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    seed: int | None = None
    # its audio is played as it comes, so a later Code2Wav window may wait (codec_batch_wait_ms) while the audio sent
    # lasts; False for a whole file, whose every wait would be the client's
    played: bool = True


class Qwen3TTS:
    def __init__(self, config: Qwen3TTSConfig, talker: Talker, tokenizer, *, code2wav=None, codec_encoder=None,
                 speaker_encoder=None, defaults: GenerationDefaults | None = None,
                 engine_config: EngineConfig | None = None):
        self.config = config
        self.talker = talker.eval()
        self.tokenizer = tokenizer
        self.code2wav = code2wav
        self.codec_encoder = codec_encoder
        self.speaker_encoder = speaker_encoder
        self.defaults = defaults or GenerationDefaults()
        with torch.no_grad():
            pad = talker.embed_text(torch.tensor([config.tts_pad_token_id], device=talker.codec_head.weight.device))
        device = talker.codec_head.weight.device
        self.engine = TalkerEngine(talker, pad, engine_config or default_engine_config(device), name="talker")
        config = self.engine.engine.config
        # the Talker's stream has high priority: each of its steps is the next 80 ms of every stream, and at high
        # concurrency Code2Wav's batched convolutions would otherwise fill the SMs for tens of milliseconds
        self.talker_loop = StageLoop(self.engine.stage_engine(self._talker_plan, self.config.tts_eos_token_id),
                                     device, name="talker", priority=-1,
                                     streams=config.use_stage_stream, kernels=config.kernels)
        self.code2wav_loop = (StageLoop(Code2WavStageEngine(code2wav), code2wav_device(code2wav), name="code2wav",
                                        streams=config.use_stage_stream) if code2wav is not None else None)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, model: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
             load_format: str = "auto", engine_config: EngineConfig | None = None) -> "Qwen3TTS":
        """A local checkpoint directory or a Hugging Face repo id. `load_format="dummy"`: the full-size
        architecture with random weights (config from the directory, or from presets/ for a repo id)."""
        if load_format not in ("auto", "safetensors", "dummy"):
            raise CheckpointError(f"load_format must be auto, safetensors or dummy, got {load_format!r}")
        dummy = load_format == "dummy"
        ckpt = dummy_config_dir(model) if dummy else resolve_checkpoint(model)
        config = Qwen3TTSConfig.from_file(ckpt / "config.json")
        with torch.device(device):  # nn.Linear's default init runs there: on the host it takes seconds
            talker = Talker(config.talker)
        if dummy:
            talker = talker.to(dtype=dtype)
            init_dummy(talker)  # drawn on the device
        else:
            load_into(talker, iter_tensors(ckpt, "talker."), where=f"{ckpt} talker")
        talker = talker.to(device=device, dtype=dtype).eval()
        tokenizer = load_tokenizer(ckpt if (ckpt / "vocab.json").exists() else dummy_tokenizer_dir("tts"))
        codec_dir = ckpt / "speech_tokenizer"
        if dummy and not (codec_dir / "config.json").exists():  # presets ship the codec config separately
            codec_dir = PRESETS_DIR / "Qwen__Qwen3-TTS-Tokenizer-12Hz"
        code2wav = codec_encoder = speaker_encoder = None
        if (codec_dir / "config.json").exists() or dummy:
            code2wav = load_code2wav(codec_dir, device, dummy)
            if config.tts_model_type == "base":
                codec_encoder = load_codec_encoder(codec_dir, device, dummy)
        if config.tts_model_type == "base":
            speaker_encoder = load_speaker_encoder(ckpt, config, device, dummy)
        return cls(config, talker, tokenizer, code2wav=code2wav, codec_encoder=codec_encoder,
                   speaker_encoder=speaker_encoder, defaults=GenerationDefaults.from_dir(ckpt),
                   engine_config=engine_config)

    def configure_code2wav(self, max_batch: int, windows: list[int], cuda_graphs: bool,
                           dtype: torch.dtype = torch.float32, batch_wait_s: float = 0.0,
                           max_frames: int | None = None) -> None:
        """The deploy's Code2Wav stage (deploy_settings.code2wav_settings), before serving: its dtype, batch bound, batch
        wait and CUDA graphs; its stream rows for as many streams as the Talker seats."""
        if self.code2wav is None:
            return
        self.code2wav.cast(dtype)
        engine, seats = self.code2wav_loop.engine, self.engine.engine.config.max_num_seqs
        self.code2wav_loop.call(lambda: engine.configure(max_batch, windows, cuda_graphs, batch_wait_s, max_frames,
                                                         seats)).result()

    # ------------------------------------------------------------------ properties
    @property
    def model_type(self) -> str:
        return self.config.tts_model_type

    @property
    def speakers(self) -> list[str]:
        return self.config.speakers

    @property
    def languages(self) -> list[str]:
        return self.config.languages

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @property
    def task_types(self) -> tuple[str, ...]:
        """The API task types served (one per checkpoint; a `TalkerSet` serves several)."""
        return (TASK_OF_MODEL_TYPE[self.model_type],)

    def for_task(self, task_type: str) -> "Qwen3TTS":
        return self

    @property
    def facades(self) -> list["Qwen3TTS"]:
        return [self]

    # ------------------------------------------------------------------ voices
    def create_voice_prompt(self, wav: np.ndarray, sr: int, ref_text: str | None = None,
                            x_vector_only: bool = False) -> VoiceClonePrompt:
        """x-vector (and, for ICL, reference codes) of a reference recording. Base models only."""
        if self.model_type != "base":
            raise TTSRequestError(f"voice cloning needs a Base checkpoint; this one is {self.model_type}")
        if not x_vector_only and not (ref_text and ref_text.strip()):
            raise TTSRequestError("ref_text is required for voice cloning unless x_vector_only_mode is set")
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim == 2:  # [samples, channels] -> mono
            wav = wav.mean(axis=1)
        if wav.ndim != 1 or wav.size == 0:
            raise TTSRequestError(f"reference audio must be a non-empty mono waveform, got shape {wav.shape}")
        if not np.isfinite(wav).all():
            raise TTSRequestError("reference audio contains NaN or infinite samples")
        if self.speaker_encoder is None:
            raise TTSRequestError("this checkpoint has no speaker encoder")
        if not x_vector_only and self.codec_encoder is None:
            raise TTSRequestError("this checkpoint has no codec encoder (speech_tokenizer/) for reference codes")
        try:
            x_vector = self.speaker_encoder.speaker_embedding(wav, int(sr)).float().cpu()
            ref_codes = None if x_vector_only else self.codec_encoder.encode(wav, int(sr)).long().cpu()
        except ValueError as e:  # SpeakerAudioError / CodecInputError: unusable audio
            raise TTSRequestError(str(e)) from e
        if not torch.isfinite(x_vector).all():  # would reach the Talker as NaN embeddings: a fault, not a voice
            raise TTSRequestError("reference audio gives no usable speaker embedding; send a clear recording of the "
                                  "voice, a few seconds long")
        return VoiceClonePrompt(ref_codes=ref_codes, x_vector=x_vector, ref_text=ref_text if not x_vector_only else None,
                                x_vector_only=bool(x_vector_only))

    # ------------------------------------------------------------------ requests
    def validate(self, req: TTSRequest) -> None:
        """TTSRequestError with a clear message for anything this checkpoint cannot serve."""
        if req.task_type not in TASK_TYPES:
            raise TTSRequestError(f"task_type must be one of {sorted(TASK_TYPES)}, got {req.task_type!r}")
        if TASK_TYPES[req.task_type] != self.model_type:
            raise TTSRequestError(f"task_type {req.task_type} needs a {req.task_type} checkpoint; "
                                  f"the loaded one is {self.model_type}")
        if req.text_feed is not None:
            if req.non_streaming_mode:
                raise TTSRequestError("text that arrives while it is spoken needs non_streaming_mode false")
        elif req.text_ids is not None:
            self._check_text_ids(req.text_ids)
        elif req.text is None or not req.text.strip():
            raise TTSRequestError("input text is empty")
        if (req.language or "auto").lower() not in self.languages:
            raise TTSRequestError(f"unknown language {req.language!r}; supported: {self.languages}")
        if req.task_type == "CustomVoice":
            if not req.speaker:
                raise TTSRequestError(f"CustomVoice needs a speaker, one of {self.speakers}")
            if req.speaker.lower() not in self.config.talker.spk_id:
                raise TTSRequestError(f"unknown speaker {req.speaker!r}; supported: {self.speakers}")
        if req.task_type == "Base":
            v = req.voice
            if v is None:
                raise TTSRequestError("Base (voice clone) needs a reference voice (ref_audio or a registered voice)")
            if v.x_vector is None or v.x_vector.numel() != self.config.talker.hidden_size:
                raise TTSRequestError("the reference voice's x-vector does not match this checkpoint")
            if not v.x_vector_only and (v.ref_codes is None or not (v.ref_text and v.ref_text.strip())):
                raise TTSRequestError("in-context voice cloning needs reference codes and ref_text "
                                      "(or use x_vector_only_mode)")
        try:
            self._sampling(req).validate()
        except ValueError as e:
            raise TTSRequestError(str(e)) from e

    def _check_text_ids(self, ids: list[int]) -> None:
        c = self.config
        ok = (len(ids) > 8 and ids[0] == c.im_start_token_id and ids[1] == c.assistant_token_id
              and ids[-5] == c.im_end_token_id and ids[-3] == c.im_start_token_id and ids[-2] == c.assistant_token_id)
        if not ok:
            raise TTSRequestError("text_ids must be a tokenised '<|im_start|>assistant\\n{text}<|im_end|>\\n"
                                  "<|im_start|>assistant\\n' with non-empty text")
        if any(not 0 <= int(i) < c.talker.text_vocab_size for i in ids):
            raise TTSRequestError("text_ids contain ids outside the text vocabulary")

    def _sampling(self, req: TTSRequest) -> SamplingParams:
        names = [f.name for f in fields(SamplingParams) if f.name != "min_new_tokens"]
        return SamplingParams(**{n: getattr(self.defaults, n) if getattr(req, n) is None else getattr(req, n)
                                 for n in names})

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def text_tokens(self) -> StableTokens:
        """Body ids of a text given piece by piece, for `TTSRequest.text_feed` (the same ids as the whole text's)."""
        return StableTokens(self.tokenizer)

    def feed_text(self, request_id: str, req: TTSRequest, ids: list[int], end: bool = False) -> None:
        """More body ids for a running `text_feed` request (and its end): the Talker takes them before its next step."""
        req.text_feed.put(ids, end)
        self.talker_loop.feed(request_id)

    def _talker_input(self, req: TTSRequest) -> TalkerInput | None:
        """One request's TalkerInput (callers that step the Talker's engine themselves); None as `_talker_plan`."""
        plan = self._talker_plan(req)
        return None if plan is None else talker_inputs(self.talker, [plan])[0]

    def _talker_plan(self, req: TTSRequest) -> TalkerPlan | None:
        """The request's prompt, planned on the host; None while a streamed text is too short for it (the stage
        waits for more)."""
        self.validate(req)
        feed, text_open, taken = req.text_feed, False, 0
        if feed is not None:
            body, ended = feed.snapshot()
            if ended and not body:
                raise TTSRequestError("input text is empty")
            frame = self._ids(target_template(""))  # role + the 5 closing ids around the body
            text_ids, text_open, taken = frame[:3] + body + frame[3:], not ended, len(body)
        else:
            text_ids = list(req.text_ids) if req.text_ids is not None else self._ids(target_template(req.text))
        non_streaming = req.non_streaming_mode
        if non_streaming is None:  # qwen-tts defaults per generate_* method
            non_streaming = req.task_type != "Base"
        instruct = req.instruct if req.instruct else None
        if req.task_type == "CustomVoice" and not self.config.supports_instruct:
            instruct = None  # the 0.6B CustomVoice ignores instructions (qwen-tts)
        if req.task_type == "Base":
            instruct = None
        voice = req.voice if req.task_type == "Base" else None
        icl = voice is not None and not voice.x_vector_only
        plan = plan_prompt(
            self.config, text_ids, language=req.language or "auto",
            speaker=req.speaker if req.task_type == "CustomVoice" else None,
            instruct_ids=self._ids(instruct_template(instruct)) if instruct else None,
            xvector=voice is not None,
            ref_text_ids=self._ids(ref_template(voice.ref_text)) if icl else None,
            num_ref_frames=int(voice.ref_codes.shape[0]) if icl else 0,
            non_streaming=non_streaming and feed is None, text_open=text_open)
        if plan is None:
            return None
        return TalkerPlan(plan, self._sampling(req), req.seed, xvector=voice.x_vector if voice is not None else None,
                          ref_codes=voice.ref_codes if icl else None, text=feed if text_open else None,
                          text_taken=taken)

    # ------------------------------------------------------------------ generation
    async def frames(self, req: TTSRequest, request_id: str | None = None) -> AsyncIterator[torch.Tensor]:
        """Codec frames [16] (long, host) as the Talker produces them; leaving early aborts the request."""
        try:
            async for out in self.talker_loop.submit(request_id or self.talker_loop.new_request_id(), req):
                for frame in frames_of(out):
                    yield frame
        except PromptTooLongError as e:
            raise TTSRequestError(str(e)) from e

    async def astream(self, req: TTSRequest, initial_chunk_frames: int = 1, chunk_frames: int = 25,
                      request_id: str | None = None) -> AsyncIterator[np.ndarray]:
        """24 kHz float32 chunks as frames are produced: the first after `initial_chunk_frames` frames, then every
        `chunk_frames`. The stateful decoder is frame-exact (no re-decoded context); for in-context cloning the
        reference codes prime the decoder state. Concatenated chunks equal `synthesize()`.

        The frames go from the Talker's thread straight to Code2Wav (`AudioRelay`): a window is queued there as soon
        as its frames exist, behind the stream's window being decoded, so an early window never waits for this event
        loop or for the caller to take the audio before it (the second window has only the first's 80 ms of audio
        to arrive in). Leaving early aborts the Talker request and the windows not yet decoded."""
        relay = AudioRelay(self.talker_loop, self.code2wav_loop, self._code2wav_session(req),
                           _frame_chunks(initial_chunk_frames, chunk_frames))
        try:
            relay.start(request_id or self.talker_loop.new_request_id(), req)
            async for wav in relay.audio():
                yield wav
        except PromptTooLongError as e:
            raise TTSRequestError(str(e)) from e
        finally:
            relay.close()

    def iter_frames(self, reqs: list[TTSRequest]) -> Iterator[tuple[int, torch.Tensor]]:
        """Offline: (request index, frame [16]) as soon as each frame exists, the requests batched together.
        Closing the iterator early aborts the unfinished ones (their KV blocks are freed)."""
        runs = [(self.talker_loop.new_request_id(), r) for r in reqs]
        try:
            for i, out in self.talker_loop.run_many(runs):
                for frame in frames_of(out):
                    yield i, frame
        except PromptTooLongError as e:
            raise TTSRequestError(str(e)) from e

    def stream(self, req: TTSRequest, initial_chunk_frames: int = 1, chunk_frames: int = 25) -> Iterator[np.ndarray]:
        """Offline, blocking `astream`."""
        chunks = _frame_chunks(initial_chunk_frames, chunk_frames)
        session = self._code2wav_session(req)
        try:
            for _, frame in self.iter_frames([req]):
                if (codes := chunks.add(frame)) is not None:
                    yield self._decode_chunk(session, codes)
            if (codes := chunks.rest()) is not None:
                yield self._decode_chunk(session, codes, last=True)
        finally:
            session.close()

    def _decode_chunk(self, session: Code2WavSession, codes: torch.Tensor, last: bool = False) -> np.ndarray:
        return next(self.code2wav_loop.run(self.code2wav_loop.new_request_id(), Code2WavChunk(session, codes, last)))

    def _code2wav_session(self, req: TTSRequest) -> Code2WavSession:
        self._require_codec()
        return Code2WavSession(context=self._reference_codes(req), may_wait=req.played)

    def stats(self) -> dict[str, float]:
        """Offline and tests: the loop's counters (running, waiting, free_blocks, ...) once it has applied what is
        queued (aborts included). Servers read `talker_loop.counters`, which never waits."""
        self.talker_loop.settle()
        return self.talker_loop.stats()

    def generate_codes(self, reqs: list[TTSRequest]) -> list[torch.Tensor]:
        """Codec frames per request, [T_i, 16] long (without any reference codes)."""
        frames: list[list[torch.Tensor]] = [[] for _ in reqs]
        for i, frame in self.iter_frames(reqs):
            frames[i].append(frame)
        return [torch.stack(f) if f else torch.zeros(0, 16, dtype=torch.long) for f in frames]

    def close(self) -> None:
        for loop in (self.talker_loop, self.code2wav_loop):
            if loop is not None:
                loop.close()

    # ------------------------------------------------------------------ audio
    def _require_codec(self):
        if self.code2wav is None:
            raise CheckpointError("this checkpoint has no speech_tokenizer/ (Code2Wav): cannot make audio")
        return self.code2wav

    @staticmethod
    def _reference_codes(req: TTSRequest) -> torch.Tensor | None:
        v = req.voice
        if req.task_type == "Base" and v is not None and not v.x_vector_only and v.ref_codes is not None:
            return v.ref_codes.long().cpu()
        return None

    def decode(self, codes: torch.Tensor, ref_codes: torch.Tensor | None = None) -> np.ndarray:
        """Whole-utterance decode as qwen-tts does it: reference codes prepended as context, then cut."""
        code2wav = self._require_codec()
        full = codes if ref_codes is None else torch.cat([ref_codes, codes])
        if full.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        with torch.inference_mode():
            wav = code2wav.decode(full.to(code2wav_device(code2wav)))
        if ref_codes is not None:
            wav = wav[int(ref_codes.shape[0] / full.shape[0] * wav.shape[0]):]
        return wav.float().cpu().numpy().astype(np.float32)

    def synthesize(self, req: TTSRequest) -> np.ndarray:
        """float32 mono waveform at 24 kHz for the whole utterance."""
        self._require_codec()
        codes = self.generate_codes([req])[0]
        return self.decode(codes, self._reference_codes(req))


def _frame_chunks(initial: int, steady: int) -> FrameChunks:
    try:
        return FrameChunks(initial, steady)
    except ValueError as e:
        raise TTSRequestError(str(e)) from e


def load_qwen3_tts_stage(stage: Stage, device: str, dtype: torch.dtype, load_format: str) -> Qwen3TTS:
    """Runtime loader of a deploy file's Talker stage: TTS engine defaults under the deploy's fields."""
    config = engine_config(stage, default_engine_config(device))
    return Qwen3TTS.load(stage.model, device=device, dtype=dtype, load_format=load_format, engine_config=config)
