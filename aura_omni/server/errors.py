"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with a matching HTTP status.

FastAPI's own 422 validation answer becomes a 400 `invalid_request_error` naming the field, and
malformed JSON a 400 too, so every client error looks like OpenAI's and the server stays healthy.

Only our own request-error types (`request_error_types`) are answered as client errors; anything else is a
500 `server_error` with a generic message (the traceback goes to the log, never to the client).
"""

import functools
import json
import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("aura_omni.server")

# HTTP status -> OpenAI error type.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
          413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error", 500: "server_error", 503: "service_unavailable_error"}


class APIError(Exception):
    """Raise anywhere in a handler to answer with an OpenAI-style error."""

    def __init__(self, message: str, status: int = 400, *, param: str | None = None, code: str | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code
        self.type = type or _TYPES.get(status, "invalid_request_error")


@functools.cache
def request_error_types() -> tuple[type[Exception], ...]:
    """Exceptions that mean "the request is wrong" wherever they are raised (400 with their message)."""
    from ..asr.transcript import UnsupportedLanguageError
    from ..engine.llm_engine import PromptTooLongError
    from ..media.audio import AudioDecodeError
    from ..media.encode import UnsupportedFormatError
    from ..media.limits import LimitError, MediaError
    from ..stages.tts import TTSRequestError
    from ..pipeline.processors import PipelineRequestError

    return (PipelineRequestError, LimitError, MediaError, AudioDecodeError, TTSRequestError, PromptTooLongError,
            UnsupportedLanguageError, UnsupportedFormatError)


def client_error(exc: BaseException) -> APIError | None:
    """The OpenAI error a request error stands for; None when `exc` is not the client's fault."""
    if isinstance(exc, APIError):
        return exc
    if not isinstance(exc, request_error_types()):
        return None
    from ..media.limits import plain

    status = getattr(exc, "status", 400)
    code = getattr(exc, "code", None) or ("limit_exceeded" if type(exc).__name__ == "LimitError" else "invalid_request")
    return APIError(plain(exc), status, param=getattr(exc, "param", None), code=code)


def internal_error(where: str) -> APIError:
    """A 500 for a failure that is ours: logged with its traceback under an id the client can quote."""
    ref = uuid.uuid4().hex[:12]
    log.exception("%s failed (error id %s)", where, ref)
    return APIError(f"the server failed to process this request (error id {ref}); try again, and report the id "
                    f"if it persists", 500, code="server_error", type="server_error")


def error_body(message: str, status: int, *, param: str | None = None, code: str | None = None,
               type: str | None = None) -> dict:
    return {"error": {"message": message, "type": type or _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(error_body(err.message, err.status, param=err.param, code=err.code, type=err.type),
                        status_code=err.status)


_UNION_MEMBERS = {"str", "int", "float", "bool", "list", "dict", "none"}  # pydantic names union branches in `loc`


def _is_union_member(part) -> bool:
    return isinstance(part, str) and (part in _UNION_MEMBERS or "[" in part or part[:1].isupper())


def _field(loc: tuple) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header") and not _is_union_member(p)]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else ("." if out else "") + p
    return out


def validation_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    # a value matching no branch of a union fails once per branch: the deepest failure is the one that explains it
    errors = sorted(errors, key=lambda e: -len([p for p in e.get("loc", ()) if not _is_union_member(p)]))
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return APIError(f"request body is not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})",
                        param=None, code="invalid_json")
    field = _field(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if not field and first.get("type") == "missing":
        return APIError("request body is missing: send a JSON object", code="invalid_request_body")
    if not field and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        if isinstance(first.get("input"), (bytes, str)):  # a body FastAPI did not parse as JSON
            return APIError("request body must be JSON (Content-Type: application/json)", code="invalid_json")
        return APIError("request body must be a JSON object", code="invalid_request_body")
    if first.get("type") == "missing":
        msg = "required field is missing"
    elif first.get("type") == "extra_forbidden":
        msg = "unknown field; check its spelling against the API reference"
    fields = {_field(tuple(e.get("loc", ()))) for e in errors}
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    return APIError(f"{field}: {msg}{more}" if field else f"{msg}{more}", param=field or None, code="invalid_value")


# Starlette's and FastAPI's own words, said so that a person knows what to send
_PLAIN_HTTP_DETAILS = {
    (404, "Not Found"): "no such endpoint; this server answers /v1/chat/completions, /v1/audio/speech, "
                        "/v1/audio/transcriptions, /v1/audio/voices, /v1/models, /v1/realtime and /health",
    (400, "There was an error parsing the body"): "request body could not be read; send UTF-8 JSON "
                                                 "(Content-Type: application/json) or a multipart form",
    (400, "Missing boundary in multipart."): "the multipart form has no boundary; let your HTTP client build the "
                                             "multipart/form-data body",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        return error_response(validation_error(exc))

    @app.exception_handler(json.JSONDecodeError)
    async def _bad_json(_: Request, exc: json.JSONDecodeError):
        return error_response(APIError(f"request body is not valid JSON ({exc.msg})", code="invalid_json"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        message = _PLAIN_HTTP_DETAILS.get((exc.status_code, message), message)
        return JSONResponse(error_body(message, exc.status_code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def _request_error(_: Request, exc: Exception):
        return error_response(client_error(exc))

    for error_type in request_error_types():  # handled here, not re-raised to the server's error log
        app.add_exception_handler(error_type, _request_error)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        err = client_error(exc)
        return error_response(err if err is not None else internal_error(f"{request.method} {request.url.path}"))
