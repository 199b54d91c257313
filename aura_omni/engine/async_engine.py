"""The engine for an asyncio server: steps run in a background thread, outputs land in per-request queues.

    engine = AsyncLLMEngine(LLMEngine(...))
    async for out in engine.generate("req-1", prompt_ids, params):   # one RequestOutput per new token
        ...
Leaving the `async for` early (client gone, task cancelled) aborts the request and frees its blocks.
Bad requests raise from `generate` before the first output (ValueError -> HTTP 400).
"""

import asyncio
import collections
import logging
import threading
from typing import AsyncIterator

from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.outputs import RequestOutput
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt

log = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """A step raised; every request then in flight gets this error (the cause is chained)."""


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._lock = threading.Lock()  # the engine itself: held by the step thread (and `stats`)
        # adds and aborts from the event loop wait here for the step thread, so the loop never blocks on a step
        self._inbox: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._running = True
        self._thread = threading.Thread(target=self._loop, name=f"engine-{engine.name}", daemon=True)
        self._thread.start()

    async def generate(self, request_id: str, prompt_token_ids: list[int] | None = None,
                       params: SamplingParams | None = None, mm: MultimodalPrompt | None = None,
                       eos_token_ids: list[int] | None = None) -> AsyncIterator[RequestOutput]:
        if not self._running:
            raise EngineDeadError("engine is shut down")
        queue: asyncio.Queue = asyncio.Queue()
        self._inbox.append(("add", request_id, (prompt_token_ids, params, mm, eos_token_ids),
                            asyncio.get_running_loop(), queue))
        self._wake.set()
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):  # a bad request (ValueError) or a failed step
                    finished = True
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        """Drop a request; the step thread frees its blocks before its next step."""
        self._inbox.append(("abort", request_id))
        self._wake.set()

    def stats(self) -> dict[str, float]:
        with self._lock:
            return self.engine.stats()

    def _deliver(self, request_id: str, item) -> None:
        target = self._queues.get(request_id)
        if target is None:
            return
        loop, queue = target
        if isinstance(item, BaseException) or item.finished:
            self._queues.pop(request_id, None)
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody listens any more
            self.engine.abort(request_id)

    def _drain_inbox(self) -> None:
        """Apply queued adds and aborts (under the lock, between steps)."""
        while self._inbox:
            op = self._inbox.popleft()
            if op[0] == "abort":
                self._queues.pop(op[1], None)
                self.engine.abort(op[1])
                continue
            _, rid, args, loop, queue = op
            self._queues[rid] = (loop, queue)
            if not self._running:
                self._deliver(rid, EngineDeadError("engine is shut down"))
                continue
            try:
                self.engine.add_request(rid, *args)
            except Exception as e:  # noqa: BLE001 - a bad request fails alone, at its caller
                self._deliver(rid, e)

    def _loop(self) -> None:
        while self._running:
            self._wake.wait()
            self._wake.clear()  # before draining: a later add sets it again and is not missed
            with self._lock:
                self._drain_inbox()
            while self._running:
                with self._lock:
                    self._drain_inbox()
                    if not self.engine.has_unfinished():
                        break
                    try:
                        outputs = self.engine.step()
                    except Exception as e:  # noqa: BLE001 - fail every request loudly instead of hanging them
                        log.exception("engine %s: step failed", self.engine.name)
                        for rid in list(self._queues):
                            self.engine.abort(rid)
                            err = EngineDeadError(f"engine step failed: {type(e).__name__}: {e}")
                            err.__cause__ = e
                            self._deliver(rid, err)
                        continue
                    for out in outputs:
                        self._deliver(out.request_id, out)

    def shutdown(self) -> None:
        self._running = False
        self._wake.set()
        self._thread.join(timeout=10)
        with self._lock:
            self._drain_inbox()  # pending aborts free their blocks; pending adds are refused
            for rid in list(self._queues):
                self._deliver(rid, EngineDeadError("engine is shut down"))
