"""Per-app server state shared by the endpoint modules (`request.app.state.server`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..media.limits import Limits
from ..media.request_media import MediaPolicy
from ..pipeline.runtime import Runtime
from .drain import Drain
from .errors import APIError
from .metrics import ServerMetrics
from .voice_library import VoiceLibrary


@dataclass
class ServerState:
    runtime: Runtime
    served_model_name: str
    model_aliases: tuple[str, ...] = ()  # further --served-model-name values, accepted as `model` and listed
    api_key: str | None = None
    allowed_local_media_path: Path | None = None  # server-local reference audio only below this root
    voices: VoiceLibrary = field(default_factory=VoiceLibrary)  # in memory only unless given a directory
    limits: Limits = field(default_factory=Limits)  # the same on every endpoint
    allowed_media_domains: tuple[str, ...] = ()  # hosts of http(s) media; none by default
    metrics: ServerMetrics | None = None  # GET /metrics; built over the runtime's stage stats when not given
    drain: Drain = field(default_factory=Drain)  # SIGTERM: refuse new work, finish what runs, then stop

    def __post_init__(self):
        self.metrics = self.metrics or ServerMetrics(lambda: self.runtime.stage_stats(),
                                                     lambda: self.runtime.stage_latencies(),
                                                     lambda: self.runtime.process_memory())
        self.runtime.turn_observer = self.metrics.observe_turn_phases

    def media_policy(self) -> MediaPolicy:
        return MediaPolicy(allowed_local_media_path=self.allowed_local_media_path,
                           allowed_media_domains=self.allowed_media_domains, limits=self.limits)

    @property
    def model_names(self) -> set[str]:
        """Names a request's `model` may use: the served name, and any stage's checkpoint id/path."""
        return {self.served_model_name, *self.model_aliases} | {s.model for s in self.runtime.deploy.stages}

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.model_names:
            served = ", ".join(f"`{name}`" for name in (self.served_model_name, *self.model_aliases))
            raise APIError(f"The model `{model}` does not exist; this server serves {served}",
                           404, param="model", code="model_not_found")
