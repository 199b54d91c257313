"""The AURA Omni pipeline: stage input processors (pure functions), orchestrator, stage placement."""
