"""The responses room: each response is one pipeline turn run as a task, from `response.create` (or a commit) to its
`response.done`. Overlapped input: a new response waits only until the previous reply's AURA text is final, then runs
while the previous one still drains in the Talker and Code2Wav (at most one drains; an older one is cancelled). Its
deltas reach the client only while it is not cancelled, so after a cancel (`response.cancel`, a barge-in) nothing of
it follows its `response.done` status `cancelled`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..media.wire_audio import OutputStream
from ..pipeline.constants import TTS_SAMPLE_RATE
from ..request.errors import api_error, internal_error
from ..pipeline.orchestrator import TurnTimeout
from ..placement import session_key
from .session_config import SessionConfig
from .conversation import PendingInput
from .dialects import ResponseView
from .errors import ClientError
from .events import new_id
from .history import History, Item
from .tools import TOOL_KEYS

RESPONSE_OPTIONS = ("instructions", "output_modalities", "modalities", "voice", "audio", "temperature",
                    "max_output_tokens", "max_response_output_tokens", *TOOL_KEYS)  # response.create may set these for one reply


@dataclass
class Response:
    id: str
    epoch: int
    config: SessionConfig  # the session's, with this response's overrides
    metadata: dict | None
    inputs: list[PendingInput]
    item: Item | None = None  # the assistant item, once AURA says something
    output: list[Item] = field(default_factory=list)  # its output items in order: the assistant item, its calls
    task: asyncio.Task | None = None
    aura_final: asyncio.Event = field(default_factory=asyncio.Event)  # its text is whole (the turn's TextDone)
    cancelled: bool = False
    started: bool = False  # response.created sent
    text: str = ""
    samples: int = 0  # 24 kHz samples sent
    wire: OutputStream | None = None  # its audio in the output format, made at its first chunk
    out_of_band: bool = False  # conversation "none": its output stays out of the conversation
    context: list[tuple[str, str]] | None = None  # AURA's history from response.input; None: the conversation's

    @property
    def speak(self) -> bool:
        return self.config.speak

    @property
    def item_id(self) -> str:
        return f"item_{self.id}"  # vLLM-Omni: the assistant item of response R is item_R

    @property
    def audio_ms(self) -> float:
        return self.samples * 1000.0 / TTS_SAMPLE_RATE


class Responses:
    """The session's responses in flight, oldest first, and the epoch a cancel advances."""

    def _init_responses(self) -> None:
        self.responses: list[Response] = []
        self.epoch = 0

    async def _response_create(self, event: dict) -> None:
        opts = event.get("response") or {}
        if not isinstance(opts, dict):
            raise ClientError("invalid_value", "response must be an object", "response")
        conversation = opts.get("conversation", "auto")
        if conversation not in ("auto", "none"):
            raise ClientError("invalid_value", f"response.conversation is auto or none (got {conversation!r})",
                              "response.conversation")
        given = opts.get("input")
        if given is not None and not isinstance(given, list):
            raise ClientError("invalid_value", "response.input must be a list of items", "response.input")
        if (self.duplex and given is None and not self.pending and not self.frames.frames  # vLLM-Omni's refusal
                and not self.history.ends_in_results()):  # a call's output is something to answer
            raise ClientError("response_create_without_input", "nothing to answer: commit audio, create an item or "
                              "send video_frames first")
        # OpenAI: with nothing new, AURA answers from the history, the instructions and the camera's frames (a greeting)
        self._create_response(opts, out_of_band=conversation == "none",
                              given=self._response_input(given) if given is not None else None)

    def _response_input(self, entries: list) -> tuple[list[tuple[str, str]], list[PendingInput]]:
        """response.input: a context of its own (OpenAI: instead of the conversation). Its trailing user items are
        the turn; the items before them are AURA's history. `item_reference` names an item of the conversation.
        Ending in call outputs, the outputs are the turn."""
        items = []
        for k, entry in enumerate(entries):
            param = f"response.input[{k}]"
            if isinstance(entry, dict) and entry.get("type") == "item_reference":
                ref = self.history.get(entry.get("id")) if isinstance(entry.get("id"), str) else None
                if ref is None:
                    raise ClientError("item_not_found", f"no item with id {entry.get('id')!r} in this session",
                                      f"{param}.id")
                items.append(PendingInput(ref))
            elif isinstance(entry, dict) and entry.get("type") in ("function_call", "function_call_output"):
                items.append(PendingInput(self._function_item(entry, param)))  # session/tools.py
            else:
                items.append(self._message(entry, param))
        first = len(items)
        while first and items[first - 1].item.role == "user":
            first -= 1
        context = History()  # response.input's own items, rendered as the conversation's are (calls included)
        context.items = [p.item for p in items[:first]]
        turns = context.turns(self.config.playback_commit_policy)
        if first == len(items) and context.ends_in_results():  # the calls' outputs are the turn, as in chat
            return turns[:-1], [PendingInput(Item(new_id("item"), "user", turns[-1][1]))]
        return turns, items[first:]

    def _create_response(self, opts: dict | None, *, out_of_band: bool = False,
                         given: tuple[list, list[PendingInput]] | None = None) -> Response:
        """A response to the pending inputs, or (`given`) to response.input's; an out-of-band one leaves the pending
        inputs for the conversation's next reply and its own output out of the conversation."""
        opts = opts or {}
        config = self.config.with_update({k: v for k, v in opts.items() if k in RESPONSE_OPTIONS}, "response")
        context, inputs = given if given is not None else (None, [] if out_of_band else self.pending)
        resp = Response(new_id("resp"), self.epoch, config, opts.get("metadata"), inputs, out_of_band=out_of_band,
                        context=context)
        if given is None and not out_of_band:
            self.pending = []
        previous = list(self.responses)
        self.responses.append(resp)
        resp.task = asyncio.create_task(self._run(resp, previous))
        return resp

    async def _cancel_event(self, event: dict) -> None:
        rid = event.get("response_id")
        targets = [r for r in self.responses if rid is None or r.id == rid]
        if not targets:
            raise ClientError("response_cancel_not_active", f"no response {rid!r} in progress" if rid else
                              "no response in progress", "response_id")
        for resp in targets:
            await self._cancel(resp, "client_cancelled")

    async def _barge_in(self, event: dict) -> None:
        if event["type"] == "turn.signal" and event.get("event") != "barge_in":
            return  # other turn signals carry no meaning for AURA
        for resp in list(self.responses):
            await self._cancel(resp, "barge_in")
        if event["type"] == "output_audio_buffer.clear":
            self.emit("output_audio_buffer.cleared", response_id=event.get("response_id"))

    async def _cancel(self, resp: Response, reason: str, announce: bool = True) -> None:
        """Stop every stage of a response; after this nothing of it is sent but its `response.done` (cancelled)."""
        if resp.cancelled:
            return
        resp.cancelled = True  # from here on its deltas are dropped, even those already on their way
        self.epoch += 1
        while resp.task is not None and not resp.task.done():
            resp.task.cancel()  # again if a wait_for inside swallowed it (its result arrived in the same tick)
            await asyncio.wait({resp.task}, timeout=0.01)
        self._finish(resp)
        for item in resp.output:
            if not item.silent:
                item.incomplete = True
        if announce and resp.started:
            self.emit("response.done", response=self._response_view(resp, "cancelled", reason))

    def _finish(self, resp: Response) -> None:
        if resp.item is not None:
            resp.item.text, resp.item.audio_ms = resp.text, resp.audio_ms
        for item in resp.output:
            item.done = True
        if resp in self.responses:
            self.responses.remove(resp)
        resp.aura_final.set()

    def _response_view(self, resp: Response, status: str, reason: str | None = None, **fields) -> ResponseView:
        output = [item for item in resp.output if not item.silent]
        return ResponseView(resp.id, status, resp.speak, output, reason, metadata=resp.metadata, epoch=resp.epoch,
                            modalities=resp.config.modalities, **fields)

    async def _run(self, resp: Response, previous: list[Response]) -> None:
        session_key.set(self.id)  # this task's stage requests: its AURA replica holds the session's prefix cache
        try:
            for prev in previous:  # overlapped input: start once the earlier replies' text is final
                await prev.aura_final.wait()
            draining = [r for r in self.responses if r is not resp and r.aura_final.is_set()]
            for old in draining[:-1]:  # at most one reply drains while this one runs
                await self._cancel(old, "new_response")
            transcribing = [p.transcription for p in resp.inputs if p.transcription is not None]
            if any(not t.done() for t in transcribing):  # AURA prefills the prompt up to the words meanwhile
                await self.pipeline.beside_aura(asyncio.gather(*transcribing, return_exceptions=True),
                                                lambda: self._turn_request(resp, words=False))
            req = await self._turn_request(resp)
            if req.audio is None:  # with audio, after its transcript (vLLM-Omni's order)
                self._created(resp)
            done = await self._stream(resp, req)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one failed turn is reported, the session carries on
            err = None if isinstance(e, TurnTimeout) else api_error(e)  # the client's request error, or a stage's
            kind, code = ((err.type, "invalid_request" if err.status < 500 else err.code) if err
                          else ("server_error", "turn_failed"))
            message = err.message if err else str(e) if isinstance(e, TurnTimeout) else internal_error(
                f"realtime turn {resp.id}").message  # logged with its traceback; the client gets an error id
            if isinstance(e, TurnTimeout):
                code = "timeout"
            self._finish(resp)
            if not resp.cancelled:
                self.error(code, message, kind=kind)
                self._created(resp)
                self.emit("response.done", response=self._response_view(
                    resp, "failed", "failed", error={"type": kind, "code": code, "message": message}))
            return
        self._finish(resp)
        if resp.cancelled:
            return
        if done.silent or resp.item is None and not done.tool_calls:
            self._listen(resp)
        elif resp.item is not None:
            self._complete(resp, done)
        if done.tool_calls:
            self._calls_done(resp, done.tool_calls)
        self.emit("response.done", response=self._response_view(
            resp, "completed", "listen" if resp.item is not None and resp.item.silent else "completed",
            usage={"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens,
                   "total_tokens": done.prompt_tokens + done.completion_tokens}))
        self.emit("rate_limits.updated", rate_limits=[])

    def _created(self, resp: Response) -> None:
        if not resp.started and not resp.cancelled:
            resp.started = True
            self.emit("response.created", response=self._response_view(resp, "in_progress"))
