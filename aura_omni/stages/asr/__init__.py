"""Speech recognition stage (Qwen3-ASR): prompts, output parsing, long-audio splitting, the service loop."""
