"""The AURA Omni pipeline: stage input processors (pure functions), the orchestrator, the runtime that loads the
deploy file's stages, and the request -> turn builder (TurnBuilder, media policy) shared by the server and Omni."""
