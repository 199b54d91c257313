"""How many streams' windows one batched Code2Wav step decodes.

A step's cost follows the frames it decodes (the decoder's state carries each stream's context, so a window of n
frames is n frames of work), so the bound is a budget of frames as well as of streams: with the deploy's
`max_num_batched_tokens` (16 codes a frame), a step takes a few steady windows of 25 frames but every new stream's
first window of 1 or 2 frames at once. With the bound counted in steady windows alone, a burst of 64 new requests
waited for eight steps before the last of them heard anything.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Code2WavBatch:
    max_streams: int  # the Code2Wav stage's max_num_seqs
    max_frames: int | None = None  # its max_num_batched_tokens / 16; None: only max_streams bounds a step

    def __post_init__(self):
        if self.max_streams < 1 or (self.max_frames is not None and self.max_frames < 1):
            raise ValueError("a Code2Wav step takes at least one stream and one frame")

    def streams(self, frames: int) -> int:
        """Streams whose windows of `frames` frames one step decodes (at least one, whatever its length)."""
        if self.max_frames is None:
            return self.max_streams
        return max(1, min(self.max_streams, self.max_frames // max(1, frames)))
