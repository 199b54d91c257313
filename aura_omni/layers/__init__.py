"""Small reusable modules shared by every model: norms, rotary embeddings, attention, MLPs."""
