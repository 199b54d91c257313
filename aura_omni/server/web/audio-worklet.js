// AudioWorklet processors of the aura-omni page (loaded with audioWorklet.addModule; no build step).
//   "capture":  microphone samples (at the AudioContext's rate, 16 kHz) posted to the page in 20 ms blocks.
//   "playback": a queue of 24 kHz float32 chunks played back to back; reports how many samples were played
//               so far (cumulative), on progress, when the queue drains and when it is cleared.

const CAPTURE_BLOCK = 320; // 20 ms at 16 kHz: small enough for a smooth level meter, few messages

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = new Float32Array(CAPTURE_BLOCK);
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    let i = 0;
    while (i < channel.length) {
      const n = Math.min(channel.length - i, CAPTURE_BLOCK - this.filled);
      this.block.set(channel.subarray(i, i + n), this.filled);
      this.filled += n;
      i += n;
      if (this.filled === CAPTURE_BLOCK) {
        this.port.postMessage(this.block, [this.block.buffer]);
        this.block = new Float32Array(CAPTURE_BLOCK);
        this.filled = 0;
      }
    }
    return true;
  }
}

const REPORT_EVERY = 2400; // samples (100 ms at 24 kHz) between progress messages

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // Float32Array chunks not yet played
    this.offset = 0; // read position in queue[0]
    this.played = 0; // samples played since the start (silence between chunks is not counted)
    this.sinceReport = 0;
    this.port.onmessage = (e) => {
      if (e.data === "clear") { // barge-in / stop: drop what is queued, report what was heard
        this.queue = [];
        this.offset = 0;
        this.port.postMessage({ type: "cleared", played: this.played });
      } else {
        this.queue.push(e.data);
      }
    };
  }

  process(_, outputs) {
    const out = outputs[0][0];
    let i = 0;
    const wasPlaying = this.queue.length > 0;
    while (i < out.length && this.queue.length) {
      const chunk = this.queue[0];
      const n = Math.min(out.length - i, chunk.length - this.offset);
      out.set(chunk.subarray(this.offset, this.offset + n), i);
      i += n;
      this.offset += n;
      if (this.offset === chunk.length) {
        this.queue.shift();
        this.offset = 0;
      }
    }
    out.fill(0, i);
    this.played += i;
    this.sinceReport += i;
    if (wasPlaying && !this.queue.length) {
      this.port.postMessage({ type: "drained", played: this.played });
      this.sinceReport = 0;
    } else if (this.sinceReport >= REPORT_EVERY) {
      this.port.postMessage({ type: "progress", played: this.played });
      this.sinceReport = 0;
    }
    return true;
  }
}

registerProcessor("capture", CaptureProcessor);
registerProcessor("playback", PlaybackProcessor);
