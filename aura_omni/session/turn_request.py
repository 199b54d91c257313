"""A response's pipeline request: the session's settings, AURA's history and the turn's inputs (audio, texts, images)
made into a TurnSpec and built; the camera window added as AURA's vision input."""

from __future__ import annotations

import numpy as np

from ..pipeline.constants import ASR_SAMPLE_RATE
from ..request.turn_builder import TurnSpec
from .session_config import SessionConfig
from .responses import Response
from .tools import session_tool_use


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
