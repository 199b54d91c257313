"""Native PyTorch models loading the real Hugging Face checkpoints (no code from the checkpoint is run)."""
