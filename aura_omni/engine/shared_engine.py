"""One LLMEngine shared by many threads, for callers that want a plain (blocking) iterator.

Each caller adds its requests under the lock; whichever caller finds its own queue empty steps the
engine for everybody, so concurrent callers share decode steps (continuous batching) without a
background thread. Closing a caller's iterator early aborts its unfinished requests, which frees their
KV blocks at once; a failed step is handed to every waiting caller instead of hanging them.

    shared = SharedEngine(LLMEngine(model, config))
    for i, out in shared.run([(prompt_ids, params, mm), ...]): ...   # (request index, RequestOutput)
"""

import collections
import itertools
import threading
from typing import Any, Callable, Iterator

from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.outputs import RequestOutput
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt, Sequence

_ids = itertools.count()

# (prompt token ids, sampling params, multimodal prompt or None)
EngineRequest = tuple[list[int] | None, SamplingParams, MultimodalPrompt | None]


class SharedEngine:
    def __init__(self, engine: LLMEngine, *, on_add: Callable[[Sequence, Any], None] | None = None,
                 after_step: Callable[[], None] | None = None):
        self.engine = engine
        self.on_add = on_add  # per-request model state (the Talker's), given the request's `extra`
        self.after_step = after_step
        self.lock = threading.Lock()
        self._sinks: dict[str, tuple[collections.deque, int]] = {}

    def run(self, requests: list[EngineRequest], extras: list[Any] | None = None) -> Iterator[tuple[int, RequestOutput]]:
        sink: collections.deque = collections.deque()
        rids: list[str] = []
        with self.lock:
            try:
                for i, (ids, params, mm) in enumerate(requests):
                    rid = f"{self.engine.name}-{next(_ids)}"
                    seq = self.engine.add_request(rid, ids, params, mm)
                    if self.on_add is not None:
                        self.on_add(seq, extras[i] if extras else None)
                    self._sinks[rid] = (sink, i)
                    rids.append(rid)
            except Exception:  # a bad request: none of this call's requests run
                for rid in rids:
                    self._abort(rid)
                raise
        live = set(range(len(requests)))
        try:
            while live:
                if not sink:
                    with self.lock:
                        if not sink:
                            self._step()
                    continue
                i, out = sink.popleft()
                if isinstance(out, BaseException):
                    live.clear()
                    raise out
                if out.finished:
                    live.discard(i)
                yield i, out
        finally:
            if live:
                with self.lock:
                    for i in live:
                        self._abort(rids[i])
                    if self.after_step is not None:
                        self.after_step()

    def stats(self) -> dict[str, float]:
        with self.lock:
            return self.engine.stats()

    def _abort(self, rid: str) -> None:
        self._sinks.pop(rid, None)
        self.engine.abort(rid)

    def _step(self) -> None:
        """One engine step for everybody (under the lock)."""
        try:
            outputs = self.engine.step()
        except Exception as e:  # noqa: BLE001 - every waiting caller gets the failure
            for rid, (sink, i) in list(self._sinks.items()):
                self._abort(rid)
                sink.append((i, e))
            return
        for out in outputs:
            target = self._sinks.get(out.request_id)
            if target is not None:
                target[0].append((target[1], out))
                if out.finished:
                    del self._sinks[out.request_id]
        if self.after_step is not None:
            self.after_step()
