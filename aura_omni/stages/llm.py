"""An LLMEngine as a stage loop's engine: one RequestOutput per request and step.

`prepare` turns a stage request into the engine's `EngineRequest` on the loop thread, so model work done there (an encoder, prompt embeddings) runs on the stage's stream; `on_add` attaches
per-request model state (the Talker's) to the new sequence; `after_step` runs after every step and after an abort
(what a finished or aborted request held is given back then: the Talker's frame-decoder slot).
"""

from dataclasses import dataclass
from typing import Any, Callable

from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.outputs import RequestOutput
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.stages.stage_engine import StageError, StageOutput



@dataclass(frozen=True)
class EngineRequest:
    """A request as the LLMEngine takes it."""

    ids: list[int]  # prompt token ids
    params: SamplingParams
    mm: MultimodalPrompt | None = None  # embeddings, positions, DeepStack of a multimodal prompt
    state: Any = None  # per-request model state for `on_add` (the Talker's)


def numerical_fault(engine: LLMEngine, output: RequestOutput) -> StageError | None:
    """What a request hears when its engine stopped it for non-finite values (finish_reason "error"), else None."""
    if output.finish_reason != "error":
        return None
    return StageError(f"stage {engine.name}: the model's values for this request were not finite (a numerical "
                      f"fault, logged); the request was stopped")


class LLMStageEngine:
    def __init__(self, engine: LLMEngine, prepare: Callable[[Any], EngineRequest] | None = None, *,
                 on_add: Callable[[Any, Any], None] | None = None, after_step: Callable[[], None] | None = None):
        self.engine = engine
        self.prepare = prepare or (lambda request: request)
        self.on_add = on_add
        self.after_step = after_step

    def add(self, request_id: str, request: Any) -> None:
        prepared = self.prepare(request)
        seq = self.engine.add_request(request_id, prepared.ids, prepared.params, prepared.mm)
        if self.on_add is not None:
            self.on_add(seq, prepared.state)

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)
        if self.after_step is not None:  # no step may follow an abort: give its state back now
            self.after_step()

    def has_work(self) -> bool:
        return self.engine.has_unfinished()

    def step(self) -> list[StageOutput]:
        outputs = self.engine.step()
        if self.after_step is not None:
            self.after_step()
        return [StageOutput(o.request_id, numerical_fault(self.engine, o) or o, o.finished) for o in outputs]

    def stats(self) -> dict[str, float]:
        return self.engine.stats()
