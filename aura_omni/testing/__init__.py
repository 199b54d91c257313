"""Tiny random-weight checkpoints with the real file layouts, for tests and the CPU demo."""
