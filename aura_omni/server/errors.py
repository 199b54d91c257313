"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with a matching HTTP status.

FastAPI's own 422 validation answer becomes a 400 `invalid_request_error` naming the field, and
malformed JSON a 400 too, so every client error looks like OpenAI's and the server stays healthy.

Only our own request-error types (`request_error_types`) are answered as client errors; anything else is a
500 `server_error` with a generic message (the traceback goes to the log, never to the client).
"""

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..request.errors import (_TYPES, APIError, api_error, client_error, internal_error, stage_error,  # noqa: F401
                              request_error_types)
from ..pipeline.runtime import StageNotDeployedError
from ..placement import StageUnavailableError
from ..stages.stage_engine import StageError

log = logging.getLogger("aura_omni.server")

MISSING_FIELD = "missing_required_parameter"  # OpenAI's code for an absent required field, on every endpoint

def error_body(message: str, status: int, *, param: str | None = None, code: str | None = None,
               type: str | None = None) -> dict:
    return {"error": {"message": message, "type": type or _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(err: APIError) -> JSONResponse:
    headers = {"Retry-After": "1"} if err.status == 503 else None  # a stage failed or is restarting
    return JSONResponse(error_body(err.message, err.status, param=err.param, code=err.code, type=err.type),
                        status_code=err.status, headers=headers)


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
    code = MISSING_FIELD if first.get("type") == "missing" else "invalid_value"
    return APIError(f"{field}: {msg}{more}" if field else f"{msg}{more}", param=field or None, code=code)


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

    @app.exception_handler(StageNotDeployedError)
    async def _stage_not_deployed(_: Request, exc: StageNotDeployedError):
        return error_response(APIError(str(exc), 400, code="stage_not_deployed"))

    @app.exception_handler(StageUnavailableError)
    async def _stage_unavailable(_: Request, exc: StageUnavailableError):
        return error_response(APIError(str(exc), 503, code=exc.code))

    @app.exception_handler(StageError)  # here, not under `Exception`: Starlette re-raises what that one answers
    async def _stage_failed(_: Request, exc: StageError):
        return error_response(stage_error(exc))

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
        return unexpected_response(request.method, request.url.path, exc)


def unexpected_response(method: str, path: str, exc: Exception) -> JSONResponse:
    """The answer to an exception no handler took: a stage's failure is a 503; anything else not the client's is a
    logged 500."""
    err = api_error(exc)
    return error_response(err if err is not None else internal_error(f"{method} {path}"))
