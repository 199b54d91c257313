"""The ```bash and ```python blocks of README.md and docs/*.md, with what each needs to run.

A block runs against the demo deploy (scripts/demo.sh) unless an HTML comment on the line before its fence says
otherwise: `<!-- example: KIND [words] -->`.

  serve                the block starts servers (`aura-omni serve`, `aura-omni make-tiny`): each command is parsed by
                       the real CLI and its deploy file and limits loaded as `serve` would, without starting it
  excerpt NAME ...     lines taken from server code, not a program: compiled, and each dotted NAME must exist
  needs-gpu, needs-real-weights, needs-cluster, long-running, installs
                       cannot run on a CPU machine with tiny checkpoints in CI: skipped, with the reason shown
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

SKIPPED = {
    "needs-gpu": "needs a CUDA GPU",
    "needs-real-weights": "needs the real checkpoints (a download of several GB)",
    "needs-cluster": "needs a Ray cluster of several machines",
    "long-running": "runs for tens of minutes",
    "installs": "installs packages (a venv, pip, apt-get): what CI's own setup does (.ci/run runs scripts/test.sh)",
}
KINDS = {"run", "serve", "excerpt", *SKIPPED}

_FENCE = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)
_MARKER = re.compile(r"^<!--\s*example:\s*(\S+)(.*?)-->$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    language: str  # bash | python
    code: str
    kind: str = "run"
    words: tuple[str, ...] = ()  # after the kind: an excerpt's names

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    out = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").splitlines()
        marker = _MARKER.match(before[-1].strip()) if before else None
        kind, words = (marker.group(1), tuple(marker.group(2).split())) if marker else ("run", ())
        out.append(Block(doc, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), kind, words))
    return out


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc)]


def commands(code: str) -> list[str]:
    """Shell lines with continuations joined and comments, blank lines and a trailing `&` dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(line.removesuffix("&").strip())
    return out
