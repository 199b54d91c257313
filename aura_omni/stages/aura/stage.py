"""AURA (Qwen3-VL) as the pipeline's AuraStage (pipeline/stage_api.py): prompt turns + vision inputs -> streamed reply deltas.

Runs on the continuous-batching engine under the stage's loop (stages/loop.py), so concurrent turns share decode
steps and a repeated system prompt / conversation history hits the prefix cache. The prompt is tokenised off the
event loop; the vision encoder and the prompt embeddings run on the loop thread as the request joins the engine
(on the stage's stream, between steps).
"""

import asyncio
import logging
from dataclasses import dataclass
from typing import AsyncIterator

import torch

from aura_omni.deploy import Stage
from aura_omni.engine.detokenizer import IncrementalDetokenizer
from aura_omni.engine.grammar import GrammarCompiler, GrammarError
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.prompts import vl_request
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.layers import kernel_switches
from aura_omni.media.vision_preprocess import VisionInput
from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
from aura_omni.models.tokenizer import load_tokenizer
from aura_omni.models.vision_graphs import VisionGraphs
from aura_omni.stages.aura.prompt_tokens import AuraPrompt, PromptTokenizer
from aura_omni.stages.aura.vision_cache import VisionEmbeddingCache
from aura_omni.stages.aura.vocab import AURA_STOP_TOKEN_IDS, QWEN_IM_END_ID
from aura_omni.stages.deploy_settings import engine_config, sampling_params
from aura_omni.stages.llm import EngineRequest, LLMStageEngine
from aura_omni.stages.loop import StageLoop

log = logging.getLogger(__name__)


class AuraRequestError(ValueError):
    """A request AURA cannot serve as asked (400): `param` names the request field at fault."""

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class AuraRequest:
    """What the AURA loop takes: prompt ids (vision placeholders expanded), the vision inputs they show, sampling."""

    ids: list[int]
    vision: list[VisionInput]
    params: SamplingParams


@dataclass
class AuraDelta:
    text: str  # new detokenised text (special tokens kept, e.g. <|silent|>)
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 0


def stop_prefix_len(text: str, stops: list[str]) -> int:
    """Length of the longest end of `text` that begins one of `stops` (held back while streaming)."""
    return max((k for s in stops for k in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:k])), default=0)


class AuraPipelineStage:
    def __init__(self, model: Qwen3VLForCausalLM, tokenizer, engine: LLMEngine | None, stage: Stage):
        self.model, self.tokenizer, self.engine, self.stage = model, tokenizer, engine, stage
        self.kernels = engine_config(stage).kernels  # the vision encoder runs with the stage's kernel switches too
        if model.device.type == "cuda" and not stage.enforce_eager:
            with kernel_switches.using(self.kernels):
                model.vision_graphs = VisionGraphs(model.visual)
        self.vision_cache = VisionEmbeddingCache(model.encode_vision)
        self.prompt_tokens = PromptTokenizer(tokenizer)
        # constrained replies end at <|im_end|> only: under a grammar <|silent|> is not an answer it allows
        self.grammars = GrammarCompiler(tokenizer, model.config.vocab_size, [QWEN_IM_END_ID])
        pads = (self.prompt_tokens.image_pad, self.prompt_tokens.video_pad)
        if pads != (model.config.image_token_id, model.config.video_token_id):
            raise ValueError(f"{stage.model}: tokenizer vision pads {pads} differ from config.json's "
                             f"{(model.config.image_token_id, model.config.video_token_id)}")
        self.loop = None if engine is None else StageLoop(  # no engine: prompt building only (parity tests)
            LLMStageEngine(engine, self.prepare), model.device, name="aura", streams=engine.config.use_stage_stream,
            kernels=self.kernels)

    @classmethod
    def load(cls, stage: Stage, device: str, dtype: torch.dtype, load_format: str) -> "AuraPipelineStage":
        from aura_omni.models.loader import resolve_checkpoint
        from aura_omni.models.qwen_vocab import dummy_tokenizer_dir

        model = Qwen3VLForCausalLM.from_pretrained(stage.model, dtype=dtype, device=device, load_format=load_format)
        tokenizer = load_tokenizer(resolve_checkpoint(stage.model) if load_format != "dummy"
                                   else dummy_tokenizer_dir("aura"))
        engine = LLMEngine(model, engine_config(stage), eos_token_ids=list(AURA_STOP_TOKEN_IDS),
                           detokenize=lambda ids: tokenizer.decode(ids, skip_special_tokens=False), name="aura")
        return cls(model, tokenizer, engine, stage)

    def prompt_ids(self, prompt: AuraPrompt, vision: list[VisionInput]) -> list[int]:
        """The prompt's token ids, vision placeholders expanded (host work)."""
        return self.prompt_tokens(prompt, vision)

    def embed_prompt(self, ids: list[int], vision: list[VisionInput]):
        """(ids, MultimodalPrompt) of prompt ids: the vision encoder and the embeddings (device work)."""
        with torch.inference_mode(), kernel_switches.using(self.kernels):
            encoded = self.vision_cache(vision) if vision else None
            return vl_request(self.model.build_prompt(ids, vision, encoded), vision)

    async def prefetch_vision(self, vision: list[VisionInput]) -> None:
        """Encode `vision` into the vision cache now, on the stage's thread between steps, so the request that shows
        it finds it encoded: a turn calls this while its transcript is being made, taking the encoder off the path
        from the transcript to AURA's first token."""
        if vision and self.loop is not None:
            await asyncio.wrap_future(self.loop.call(lambda: self.vision_cache(vision)))

    async def prefill_prefix(self, prompt: AuraPrompt, vision: list[VisionInput], *, request_id: str) -> int:
        """Prefill `prompt` through its last vision item into the prefix cache; returns that prefix's tokens (0: no
        vision, or no prefix cache to keep it in). A turn calls this while its transcript is being made: the vision
        tokens, the bulk of a camera turn's prompt, come before the words, so the turn's own request then prefills
        little more than its words. A one-token request: its KV blocks stay cached after it ends."""
        if not vision or self.loop is None or not self.engine.config.enable_prefix_caching:
            return 0
        ids = await asyncio.to_thread(self.prompt_ids, prompt, vision)
        end = len(ids) - ids[::-1].index(self.prompt_tokens.vision_end)
        prefix = AuraRequest(ids[:end], vision, SamplingParams(temperature=0.0, max_tokens=1))
        async for _ in self.loop.submit(request_id, prefix):
            pass
        return end

    def prepare(self, request: AuraRequest) -> EngineRequest:
        """The engine's request (ids, embeddings, MRoPE positions, DeepStack): the vision encoder and the prompt
        embeddings, on the loop's thread and the stage's stream as the request joins the engine."""
        ids, mm = self.embed_prompt(request.ids, request.vision)
        return EngineRequest(ids, request.params, mm)

    async def generate(self, prompt: AuraPrompt, vision: list[VisionInput], *, request_id: str,
                       sampling: dict | None = None) -> AsyncIterator[AuraDelta]:
        params = sampling_params(self.stage.default_sampling_params, sampling, stop_token_ids=list(AURA_STOP_TOKEN_IDS))
        if (sampling or {}).get("grammar") is not None:  # a Grammar (engine/grammar.py): compiled here, cached
            try:
                params.grammar = await asyncio.to_thread(self.grammars.compile, sampling["grammar"])
            except GrammarError as e:
                raise AuraRequestError(f"this output constraint cannot be compiled: {e}", param=e.path) from None
        ids = await asyncio.to_thread(self.prompt_ids, prompt, vision)
        hidden_stops = [] if params.include_stop_str_in_output else params.stop
        detok = IncrementalDetokenizer(lambda x: self.tokenizer.decode(x, skip_special_tokens=False))
        pending: list[int] = []
        shown = ""
        async for out in self.loop.submit(request_id, AuraRequest(ids, vision, params)):
            pending += out.new_token_ids
            new = detok.add(out.new_token_ids)
            if out.finished:
                detok.flush()
            text = detok.text
            if out.finished and isinstance(out.stop_reason, str) and out.text is not None:
                text = out.text  # the engine cut the reply before its stop string
            elif not out.finished:
                if not new and detok.holding:
                    continue  # an incomplete UTF-8 sequence: wait for the rest of the character
                text = text[:len(text) - stop_prefix_len(text, hidden_stops)]  # may still become a stop string
            if len(text) < len(shown):
                text = shown
            yield AuraDelta(text[len(shown):], pending, finished=out.finished, finish_reason=out.finish_reason,
                            prompt_tokens=out.num_prompt_tokens or len(ids))
            shown, pending = text, []

    def stats(self) -> dict[str, float]:
        """Offline and tests: the loop's counters (running, waiting, free_blocks, ...) once it has applied what is
        queued (aborts included). Servers read `loop.counters`, which never waits."""
        self.loop.settle()
        return self.loop.stats()

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


def load_aura_stage(stage: Stage, device: str, dtype: torch.dtype, load_format: str) -> AuraPipelineStage:
    """Runtime loader of a deploy file's `aura` stage (pipeline/runtime.py STAGE_LOADERS)."""
    return AuraPipelineStage.load(stage, device, dtype, load_format)
