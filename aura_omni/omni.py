"""Offline API for scripts: the server's Runtime, TurnBuilder and orchestrator without HTTP.

    from aura_omni import Omni
    omni = Omni(deploy_config="configs/aura_omni.yaml")           # device: stage `devices`, or e.g. "cpu"
    result = omni.generate(audio="question.wav", video="clip.mp4", text="What is happening?",
                           tts_ref_audio="me.wav", tts_ref_text="A line I said.")
    result.text, result.audio (float32, 24 kHz), result.transcript, result.silent
    for event in omni.stream(audio="question.wav", tts_speaker="Vivian"): ...   # TextDelta / AudioChunk / ...
    async for event in omni.astream(...): ...
    async with omni.session(voice="Vivian") as s:   # a realtime session, the /v1/realtime handler in process
        await s.send("input_audio_buffer.append", audio=pcm16_b64, video_frames=[jpeg_b64])
        await s.send("input_audio_buffer.commit", create_response=True)
        async for event in s: ...   # ServerEvent: .type, ["field"], .audio (float32 24 kHz of an audio delta)

Media may be a path, bytes, a data URL / base64, or decoded arrays: audio as (samples, rate), an image as
uint8 RGB [H, W, 3]. `**options` are vLLM-Omni `additional_information` keys (aura_system_prompt,
tts_task_type, tts_language, tts_speaker, tts_instruct, tts_ref_audio, tts_ref_text,
tts_x_vector_only_mode, tts_pass_token_ids, tts_max_new_tokens, is_speech) or AURA sampling fields
(temperature, top_p, top_k, max_tokens, seed, logit_bias, stop, ...). Local files are always readable here.
Function calling and structured output take OpenAI's chat fields (docs/chat.md): `tools`, `tool_choice`,
`parallel_tool_calls`, `response_format`; the calls come back in `result.tool_calls` (ToolCall: id, name, arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Sequence

import numpy as np

from .deploy import DeployConfig, load_deploy_config
from .media.limits import Limits
from .pipeline.constants import TTS_SAMPLE_RATE
from .media.request_media import MediaPolicy
from .pipeline.runtime import Runtime
from .pipeline.tool_calls import ToolCall, response_format_schema, tool_use
from .pipeline.turn import TurnEvent, collect_turn
from .request.turn_builder import TurnBuilder, TurnSpec
from .session import RealtimeSession

AURA_SAMPLING_OPTIONS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "seed", "logit_bias",
                         "stop", "stop_token_ids", "presence_penalty", "frequency_penalty", "repetition_penalty",
                         "ignore_eos")
TOOL_OPTIONS = ("tools", "tool_choice", "parallel_tool_calls", "response_format")
_ids = itertools.count()


@dataclass
class OmniResult:
    text: str  # AURA's reply ("" when silent)
    audio: np.ndarray | None  # float32 mono at `sample_rate`; None when not spoken or silent
    transcript: str | None  # what ASR heard (None without audio input)
    silent: bool
    sample_rate: int = TTS_SAMPLE_RATE
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"  # "tool_calls" when the reply called tools
    tool_calls: list[ToolCall] = field(default_factory=list)


def _source(value: Any) -> Any:
    """A path-like or an existing file path -> file bytes; everything else as given."""
    if isinstance(value, Path) or (isinstance(value, str) and not value.startswith("data:") and len(value) < 4096
                                   and Path(value).is_file()):
        return Path(value).read_bytes()
    return value


def _many(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and not (isinstance(value, tuple) and len(value) == 2
                                                  and isinstance(value[1], int)):
        return list(value)
    return [value]


class Omni:
    def __init__(self, deploy_config: str | Path | DeployConfig, device: str | None = None, *,
                 dtype: str | None = None, load_format: str | None = None, voices=None):
        deploy = deploy_config if isinstance(deploy_config, DeployConfig) else load_deploy_config(deploy_config)
        self.runtime = Runtime.load(deploy, device=device, dtype=dtype, load_format=load_format)
        # offline scripts may read any local file (the server only below --allowed-local-media-path)
        self.builder = TurnBuilder(self.runtime, voices, MediaPolicy(allowed_local_media_path=Path("/"),
                                                                     limits=Limits.from_values(deploy.limits)))
        self._loop = asyncio.new_event_loop()  # one loop for sync calls: the runtime's queues live on it
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="omni-loop", daemon=True)
        self._loop_thread.start()

    # ------------------------------------------------------------------ turns
    def _spec(self, audio, images, video, text, speak, history, options) -> TurnSpec:
        info = {k: v for k, v in options.items() if k not in (*AURA_SAMPLING_OPTIONS, *TOOL_OPTIONS, "voice")}
        if info.get("tts_ref_audio") is not None:
            info["tts_ref_audio"] = _source(info["tts_ref_audio"])
        sampling = {k: v for k, v in options.items() if k in AURA_SAMPLING_OPTIONS and v is not None}
        if isinstance(sampling.get("stop"), str):
            sampling["stop"] = [sampling["stop"]]
        images, videos = _many(images), _many(video)
        vision = [("image", _source(i)) for i in images] + [("video", _source(v)) for v in videos]
        return TurnSpec(audio=_source(audio) if audio is not None else None, vision=vision,
                        text_parts=[text] if text else [], speak=speak, info=info, aura_sampling=sampling,
                        history=list(history or []), voice=options.get("voice"), info_param="", voice_param="voice",
                        vision_params=[f"images[{i}]" for i in range(len(images))]
                        + [f"video[{i}]" for i in range(len(videos))],
                        tool_use=tool_use(options.get("tools"), options.get("tool_choice"),
                                          options.get("parallel_tool_calls")),
                        output_schema=response_format_schema(options.get("response_format")))

    async def astream(self, audio=None, images=None, video=None, text: str | None = None, speak: bool = True,
                      history: Sequence[tuple[str, str]] = (), **options) -> AsyncIterator[TurnEvent]:
        """Events of one turn: TranscriptReady, TextDelta, TextDone, AudioChunk (as produced), TurnDone."""
        spec = self._spec(audio, images, video, text, speak, history, options)
        async with contextlib.aclosing(self._turn(spec)) as events:
            async for ev in events:  # closing this generator closes the turn's at once: every stage stops
                yield ev

    async def _turn(self, spec: TurnSpec) -> AsyncIterator[TurnEvent]:
        req = await self.builder.build(spec, f"omni-{next(_ids)}")
        events = self.runtime.pipeline.turn(req)
        try:
            async for ev in events:
                yield ev
        finally:
            await events.aclose()

    def stream(self, *args, **kwargs) -> Iterator[TurnEvent]:
        """`astream` as a plain iterator (runs on the Omni's own event loop); closing it cancels the turn."""
        agen = self.astream(*args, **kwargs)
        try:
            while True:
                try:
                    yield asyncio.run_coroutine_threadsafe(anext(agen), self._loop).result()
                except StopAsyncIteration:
                    return
        finally:
            asyncio.run_coroutine_threadsafe(agen.aclose(), self._loop).result()

    async def agenerate(self, audio=None, images=None, video=None, text: str | None = None, speak: bool = True,
                        history: Sequence[tuple[str, str]] = (), **options) -> OmniResult:
        spec = self._spec(audio, images, video, text, speak, history, options)
        spec.played = False  # taken whole: no window of its audio waits to share a Code2Wav step
        async with contextlib.aclosing(self._turn(spec)) as events:
            turn = await collect_turn(events)
        done = turn.done
        return OmniResult(text=done.text, audio=turn.audio if speak and not done.silent else None,
                          transcript=turn.transcript, silent=done.silent,
                          prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens,
                          finish_reason=done.finish_reason, tool_calls=done.tool_calls)

    def generate(self, audio=None, images=None, video=None, text: str | None = None, speak: bool = True,
                 history: Sequence[tuple[str, str]] = (), **options) -> OmniResult:
        """One turn, whole: AURA's text, the spoken reply (24 kHz float32), the ASR transcript, silence."""
        coro = self.agenerate(audio, images, video, text, speak, history, **options)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @contextlib.asynccontextmanager
    async def session(self, *, duplex: bool = False, model: str = "aura-omni", **session) -> AsyncIterator[RealtimeSession]:
        """A realtime session (the handler behind WS /v1/realtime) on the caller's event loop. `session`: the
        fields of a first `session.update` (instructions, voice, turn_detection, extra_body, ...). Leaving the
        block closes it: every stage of a reply still running is stopped."""
        live = RealtimeSession(self.runtime, self.builder, model=model, duplex=duplex)
        if not duplex:
            live.start()
        try:
            if session:
                await live.send("session.update", session=session)
            yield live
        finally:
            await live.close("client_close")

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        self.runtime.close()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=5)

    def __enter__(self) -> Omni:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
