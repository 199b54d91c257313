"""The stages: each is an engine driven by one `StageLoop` (loop.py)."""
