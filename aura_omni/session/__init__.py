"""Realtime sessions: one state machine (`RealtimeSession`) behind `WS /v1/realtime` and `Omni.session()`.

The session turns client events (OpenAI Realtime names, plus vLLM-Omni's duplex extensions) into pipeline
turns and typed server events, in one wire dialect per session (`dialects/`: OpenAI GA, OpenAI beta, duplex).
`handler.py` dispatches each client event to the room that holds its state (input buffer, camera, conversation,
responses, resume). It never imports the HTTP server; transports only move JSON.
"""

from .session_config import SessionConfig, SessionConfigError
from .events import ServerEvent
from .handler import RealtimeSession

__all__ = ["RealtimeSession", "ServerEvent", "SessionConfig", "SessionConfigError"]
