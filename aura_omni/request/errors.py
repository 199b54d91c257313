"""The OpenAI error vocabulary of every transport: an `APIError` carries message, type, param, code and the HTTP
status it stands for. The HTTP server (server/errors.py) answers it as JSON; a realtime session sends it as an
`error` event. Only our own request-error types count as the client's fault; anything else is a `server_error`
whose details go to the log under an id, never to the client.
"""

import functools
import logging
import uuid

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
    from ..stages.asr.transcript import UnsupportedLanguageError
    from ..engine.llm_engine import PromptTooLongError
    from ..media.audio import AudioDecodeError
    from ..media.encode import UnsupportedFormatError
    from ..media.limits import LimitError, MediaError
    from ..stages.aura.stage import AuraRequestError
    from ..stages.tts import TTSRequestError
    from ..pipeline.processors import PipelineRequestError

    return (PipelineRequestError, AuraRequestError, LimitError, MediaError, AudioDecodeError, TTSRequestError,
            PromptTooLongError, UnsupportedLanguageError, UnsupportedFormatError)


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


def stage_error(exc: BaseException) -> APIError | None:
    """503 for a request a stage failed (stages/loop.py): its step raised (`stage_failed`, a `server_error`; the
    details are in the server log), or the stage is down or restarting (`service_unavailable`). Retrying is safe."""
    from ..stages.stage_engine import StageError, StageUnavailable

    if isinstance(exc, StageUnavailable):
        return APIError("a stage of this server is down and restarting; try again in a few seconds", 503,
                        code="service_unavailable")
    if isinstance(exc, StageError):
        log.warning("request failed in a stage: %s", exc)
        return APIError("a stage of this server failed while running this request; try again", 503,
                        code="stage_failed", type="server_error")
    return None


def api_error(exc: BaseException) -> APIError | None:
    """The OpenAI error an exception stands for: the client's (4xx) or a stage's (503); None for anything else,
    which is a bug (`internal_error`)."""
    return client_error(exc) or stage_error(exc)


def internal_error(where: str) -> APIError:
    """A 500 for a failure that is ours: logged with its traceback under an id the client can quote."""
    ref = uuid.uuid4().hex[:12]
    log.exception("%s failed (error id %s)", where, ref)
    return APIError(f"the server failed to process this request (error id {ref}); try again, and report the id "
                    f"if it persists", 500, code="server_error", type="server_error")


