"""No merge left its conflict markers in a tracked text file."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("<<<<<<< ", ">>>>>>> ")


def test_no_conflict_markers_in_tracked_files():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".js", ".html", ".txt", ".json"}:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.startswith(MARKERS):
                hits.append(f"{name}:{n}")
    assert not hits, f"conflict markers at {hits}"
