"""`POST /v1/audio/speech/batch` (vLLM-Omni): up to 32 texts spoken in one request, each a whole file.

Every item is a speech request of its own (its fields over the batch's defaults), validated and spoken on its own:
the items run at once, so the Talker batches them in its steps, and one item's error is that item's result, never
the batch's. The batch itself is refused (400) only for its own shape: no items or too many, an unknown default, a
model this server does not serve.
"""

from __future__ import annotations

import asyncio
import base64
import uuid

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from ..deploy import TALKER
from ..media.encode import media_type
from .disconnect import unless_client_leaves
from .errors import APIError, api_error, internal_error, validation_error
from .metrics import arrival
from .protocol import BATCH_DEFAULT_FIELDS, SpeechBatchRequest, SpeechRequest
from .speech import check_response_format, speak_file, speech_request, speech_usage, text_tokens

router = APIRouter()


@router.post("/v1/audio/speech/batch")
async def create_speech_batch(body: SpeechBatchRequest, request: Request):
    state = request.app.state.server
    defaults = body.defaults()
    if unknown := sorted(set(defaults) - BATCH_DEFAULT_FIELDS):
        raise APIError(f"{unknown[0]}: not a default a batch takes (every field of /v1/audio/speech but input and "
                       f"the streaming ones)", param=unknown[0], code="invalid_value")
    state.check_model(defaults.get("model"))
    tts = state.runtime.require(TALKER, "/v1/audio/speech/batch")
    since = arrival(request)
    items = [_speak(state, tts, i, {**defaults, **item}, request.url.path, since) for i, item in enumerate(body.items)]
    results = await unless_client_leaves(request, asyncio.gather(*items))
    if isinstance(results, Response):  # the client left: every item's stages were stopped
        return results
    succeeded = sum(r["status"] == "success" for r in results)
    return {"id": f"speech-batch-{uuid.uuid4().hex[:24]}", "results": results, "total": len(results),
            "succeeded": succeeded, "failed": len(results) - succeeded}


async def _speak(state, tts, index: int, fields: dict, path: str, since: float) -> dict:
    """One item's result: its file, or the error that item alone gets."""
    try:
        try:
            req = SpeechRequest.model_validate(fields)
        except ValidationError as e:
            raise validation_error(RequestValidationError(e.errors())) from None
        if req.stream or req.stream_format:
            raise APIError("stream_format: a batch item is a whole file, not a stream", param="stream_format",
                           code="unsupported_value")
        check_response_format(req, streaming=False)
        data, samples = await speak_file(state, await speech_request(state, req), req, path, since)
    except Exception as e:  # noqa: BLE001 - the item fails, the batch goes on
        err = api_error(e) or internal_error(f"speech batch item {index}")
        return {"index": index, "status": "error", "error": err.message, "code": err.code, "param": err.param}
    return {"index": index, "status": "success", "audio_data": base64.b64encode(data).decode(),
            "media_type": media_type(req.response_format),
            "usage": speech_usage(len(text_tokens(tts, req.input)), samples)}
