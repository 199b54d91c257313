"""Every environment variable aura-omni reads, in one place, read once at start (`current()`).

What changes how a deployment behaves is a deploy key (docs/deploy.md) or a `serve` flag; what is left here is what
must come from the process's environment: a secret (the API key), the operator's remote-media allowlist, the process
defaults of the kernel switches (each stage's deploy `kernels:` wins; "0" turns one off for an A/B run), and the
switches of the test suite. docs/deploy.md lists every variable of `VARIABLES` (tests/unit/test_env_registry.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    test_only: bool = False  # read by the test suite (tests/), never by a server


API_KEY = "AURA_OMNI_API_KEY"
ALLOWED_MEDIA_DOMAINS = "AURA_OMNI_ALLOWED_MEDIA_DOMAINS"
GEMV, PDL = "AURA_OMNI_GEMV", "AURA_OMNI_PDL"
PREFILL_GRAPHS, STAGE_STREAMS = "AURA_OMNI_PREFILL_GRAPHS", "AURA_OMNI_STAGE_STREAMS"
STEP_TRACE = "AURA_OMNI_STEP_TRACE"

VARIABLES = (
    Variable(API_KEY, "the default of `serve --api-key`: requests must carry `Authorization: Bearer KEY`"),
    Variable(ALLOWED_MEDIA_DOMAINS, "comma-separated hosts remote media may come from, when `serve "
                                    "--allowed-media-domains` is not given (none: remote media is refused)"),
    Variable(GEMV, "\"0\": no one-row Triton GEMVs, for stages whose `kernels.gemv` is unset"),
    Variable(PDL, "\"0\": Triton kernels without programmatic dependent launch, for stages whose `kernels.pdl` is "
                  "unset"),
    Variable(PREFILL_GRAPHS, "\"0\": no CUDA graphs of short prefill steps, for stages whose "
                             "`kernels.prefill_graphs` is unset"),
    Variable(STAGE_STREAMS, "\"0\": every stage on the default CUDA stream, for stages whose "
                            "`kernels.stage_stream` is unset"),
    Variable(STEP_TRACE, "a folder: every stage loop writes its timeline there (aura_omni/step_trace.py; read with "
                         "scripts/step_trace_report.py), to explain a latency"),
    Variable("AURA_OMNI_TINY_DIR", "where the tests' tiny checkpoints are made (a temporary folder otherwise)", True),
    Variable("AURA_OMNI_REQUIRE_BROWSER", "\"1\": the web page test fails instead of skipping without Chromium", True),
    Variable("AURA_OMNI_REQUIRE_FRAMEWORKS", "\"1\": the agent framework tests fail instead of skipping without "
                                             "their venv", True),
    Variable("AURA_OMNI_FRAMEWORKS_VENV", "the agent frameworks' venv (default .venv-agents)", True),
    Variable("AURA_OMNI_SCREENSHOT_DIR", "where the web page test saves its screenshots", True),
    Variable("AURA_OMNI_FUZZ_EXAMPLES", "examples per schema fuzz test", True),
)


@dataclass(frozen=True)
class ProcessEnv:
    """The values a server uses, as read from its environment."""

    api_key: str | None = None
    allowed_media_domains: tuple[str, ...] = ()
    gemv: bool = True
    pdl: bool = True
    prefill_graphs: bool = True
    stage_streams: bool = True
    step_trace: str | None = None  # the folder of the stage loops' timelines; None: none written


def read(environ: Mapping[str, str] = os.environ) -> ProcessEnv:
    def on(name: str) -> bool:
        return environ.get(name, "1") != "0"

    domains = tuple(d.strip() for d in environ.get(ALLOWED_MEDIA_DOMAINS, "").split(",") if d.strip())
    return ProcessEnv(environ.get(API_KEY) or None, domains, on(GEMV), on(PDL), on(PREFILL_GRAPHS), on(STAGE_STREAMS),
                      environ.get(STEP_TRACE) or None)


_current: ProcessEnv | None = None


def current() -> ProcessEnv:
    """The process's values, read from its environment on first use (at start) and kept."""
    global _current
    if _current is None:
        _current = read()
    return _current
