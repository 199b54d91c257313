"""A response's pipeline request: the session's settings, AURA's history and the turn's inputs (audio, texts, images)
made into a TurnSpec and built; the camera window added as AURA's vision input. Also the session's orchestrator, with
AURA watched so that a response knows when its text is final (overlapped input)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from ..pipeline.constants import ASR_SAMPLE_RATE
from ..pipeline.orchestrator import AuraOmniPipeline
from ..request.turn_builder import TurnSpec
from .config import SessionConfig
from .responses import Response
from .tools import session_tool_use


class _AuraWatch:
    """AURA stage wrapper: marks a response's text final when AURA's generation ends (TTS may still drain)."""

    def __init__(self, inner):
        self.inner = inner
        self.final: dict[str, asyncio.Event] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, prompt, vision, *, request_id: str, sampling: dict | None = None):
        try:
            async for delta in self.inner.generate(prompt, vision, request_id=request_id, sampling=sampling):
                yield delta
        finally:
            event = self.final.pop(request_id, None)
            if event is not None:
                event.set()


def session_pipeline(runtime) -> tuple[Any, _AuraWatch | None]:
    """The runtime's orchestrator over the same stages, with AURA watched for text finality."""
    base = runtime.pipeline
    if not isinstance(base, AuraOmniPipeline) or base.aura is None:  # another orchestrator: replies end at TurnDone
        return base, None
    watch = _AuraWatch(base.aura)
    return AuraOmniPipeline(base.asr, watch, base.speech, sentence_min_chars=base.sentence_min_chars,
                            default_timeout_s=base.default_timeout_s, stream_text_to_talker=base.stream_text_to_talker,
                            talker_start_words=base.talker_start_words,
                            max_utterance_chars=base.max_utterance_chars, on_phases=base.on_phases,
                            turn_settings=base.turn_settings), watch


class TurnRequests:
    """Builds the requests of a session's turns (and of the prefixes prefilled ahead of them)."""

    def _spec(self, config: SessionConfig, texts: list[str], images: list[str], audio: np.ndarray | None,
              exclude: set[str] = frozenset(), history: list[tuple[str, str]] | None = None) -> TurnSpec:
        sampling = {}
        if config.temperature is not None:
            sampling["temperature"] = config.temperature
        if config.max_output_tokens is not None:
            sampling["max_tokens"] = config.max_output_tokens
        info = dict(config.info)
        if audio is None and not texts:
            info["is_speech"] = False  # frames only (vision-follow): AURA decides whether to comment
        return TurnSpec(audio=(audio, ASR_SAMPLE_RATE) if audio is not None else None,
                        vision=[("image", url) for url in images], text_parts=texts,
                        system_prompt=config.system_prompt,
                        history=history if history is not None else self.history.turns(
                            config.playback_commit_policy, exclude), speak=config.speak, info=info,
                        voice=config.voice, stage_sampling=config.stage_sampling, aura_sampling=sampling,
                        info_param="session.extra_body", voice_param="session.audio.output.voice",
                        tool_use=session_tool_use(config))

    async def _prepare_aura(self, resp: Response) -> None:
        """While the turn's speech is still being transcribed (a commit, then response.create): the prompt as known
        without its words goes to the pipeline's `prepare_aura`, as the pipeline's own ASR path does."""
        await self.pipeline.prepare_aura(await self._turn_request(resp, words=False))

    async def _turn_request(self, resp: Response, words: bool = True):
        """The turn's request; `words=False`: without its words (audio, texts) or speech, the same prompt up to them."""
        return await self._request(resp.config, resp.inputs, resp.id, words, resp.item_id, history=resp.context)

    async def _request(self, config: SessionConfig, inputs: list, request_id: str, words: bool,
                       reply_item_id: str | None = None, vision=None, history: list[tuple[str, str]] | None = None):
        """A turn's request from its config and inputs (those items leave the history: they are the turn), with the
        camera window as AURA's vision input (`vision`, else the current window's)."""
        audio = next((p.audio for p in reversed(inputs) if p.audio is not None and p.transcription is None), None)
        texts = [p.item.text for p in inputs if p.item.text and p.audio is None]
        images = [url for p in inputs for url in p.images]
        exclude = {p.item.id for p in inputs} | ({reply_item_id} if reply_item_id else set())
        if history is None and not texts and audio is None and self.history.ends_in_results(exclude):
            # the calls' outputs are this turn's user message, as in a chat request ending in tool results
            history = self.history.turns(config.playback_commit_policy, exclude)
            texts = [history.pop()[1]]
        spec = self._spec(config, texts if words else [], images, audio if words else None, exclude, history)
        if not words:
            spec.speak = False  # no TTS template (a cloned voice's prompt) for a prompt prefix
        req = await self.builder.build(spec, request_id)
        vision = vision if vision is not None else await self._clip_input()
        if vision is not None:
            req.vision.append(vision)
        return req
