"""A session's refusals: a client event it cannot apply, a resume it cannot grant."""

from __future__ import annotations

class ClientError(ValueError):
    """A client event this session cannot apply; answered with an `error` event."""

    def __init__(self, code: str, message: str, param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


class ResumeRefused(ValueError):
    """A `session.resume` that cannot take the session over; `code` is the handshake error's."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
