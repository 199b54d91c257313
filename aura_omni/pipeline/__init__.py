"""The AURA Omni pipeline, orchestration only: the orchestrator of a turn and what it needs of each stage, the
processors between stages (pure functions), and the runtime that loads the deploy file's stages and warms them."""
