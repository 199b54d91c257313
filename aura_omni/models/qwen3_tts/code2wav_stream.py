"""Per-request Code2Wav decoder state, so a stream decoded chunk by chunk equals the full decode.

The decoder is fully causal (qwen3_tts.md §1.6), so it is frame-exact if each request keeps:
- every causal conv's last (k-1)*dilation inputs (zeros at the start = the conv's causal zero padding),
- every transposed conv's overlap tail (k - stride samples, without bias),
- the last sliding_window - 1 keys/values of each transformer layer, and the frame count (RoPE position).
A fresh state therefore *is* the full decode's starting point; `Code2Wav.decode` runs on one too.
"""

from dataclasses import dataclass, field

import torch


@dataclass
class Code2WavStream:
    """Decoder state of B requests (B = 1 for one request). Tensors are batch-first."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    frames: torch.Tensor | None = None  # [B] long: frames decoded so far (= next RoPE position)

    @property
    def batch_size(self) -> int:
        return int(self.frames.shape[0])

    @staticmethod
    def stack(states: list["Code2WavStream"]) -> "Code2WavStream":
        """One batched state from several requests' states (for a batched decode step)."""
        if not states:
            raise ValueError("no stream states to stack")
        keys = states[0].tensors.keys()
        return Code2WavStream({k: torch.cat([s.tensors[k] for s in states]) for k in keys},
                              torch.cat([s.frames for s in states]))

    def unstack_into(self, states: list["Code2WavStream"]) -> None:
        """Write row i of this batched state back into states[i] (the callers keep their objects)."""
        for i, s in enumerate(states):
            s.tensors = {k: v[i:i + 1].clone() for k, v in self.tensors.items()}
            s.frames = self.frames[i:i + 1].clone()
