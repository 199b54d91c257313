// The aura-omni page: a live AURA session over WS /v1/realtime (plain JS, no build step, no CDN).
// Protocol: vLLM-Omni's aura-ptt profile plus server VAD (docs/realtime.md):
//   session.update -> session.updated; every 200 ms input_audio_buffer.append {audio: pcm16 16 kHz, is_speech,
//   sample_rate_hz, video_frames?}; push-to-talk ends a turn with input_audio_buffer.commit {create_response};
//   hands-free leaves turns to the server's VAD. Reply audio (pcm16 24 kHz) plays as it arrives, and
//   playback.ack tells the server how much was heard; response.cancel (Stop, or speaking over AURA) barges in.
//   A dropped connection is resumed from a new one (session.resume with the newest resume_token and the last
//   server_event_seq received): the reply goes on where it was; session.event_ack lets the server forget what arrived.
"use strict";

const INPUT_RATE = 16000; // pcm16 sent to the server (Qwen3-ASR's rate)
const OUTPUT_RATE = 24000; // Qwen3-TTS Code2Wav output
const APPEND_MS = 200; // aura-ptt: one append every 200 ms
const JPEG_QUALITY = 0.7; // aura-ptt camera frames
const FRAME_MAX_WIDTH = 640;
const FOLLOW_SAMPLES = 160; // aura-ptt vision-follow: 10 ms of silence carries the frame
const CLONE_SECONDS = 4; // reference audio for a cloned voice (Qwen recommends a few seconds)
const CLONE_NAME = "my-voice";
const READY_TIMEOUT_MS = 15000; // aura-ptt: wait this long for session.updated
const CLOSE_WAIT_MS = 1000; // aura-ptt: wait this long for session.closed
const RESUME_TRIES = 4; // a dropped connection is resumed within the server's 30 s grace: 1, 2, 3, 4 s apart
const RESUME_BACKOFF_MS = 1000;
const EVENT_ACK_MS = 2000; // how often the page tells the server which events arrived
const FINAL_CLOSE_CODES = [1000, 1008, 1013]; // closed on purpose (or replaced by another tab), a bad key, full
const SERVER_VAD = { type: "server_vad", threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500,
                     create_response: true, interrupt_response: true };

const $ = (id) => document.getElementById(id);
const ui = {
  status: $("status"), apiKey: $("api-key"), voice: $("voice"), clone: $("clone"), camera: $("camera"), fps: $("fps"),
  follow: $("follow"),
  instructions: $("instructions"), extraBody: $("extra-body"), connect: $("connect"), talk: $("talk"),
  stop: $("stop"), level: $("level"), played: $("played"), hint: $("hint"), preview: $("preview"),
  conversation: $("conversation"), log: $("log"),
};

const page = {
  ws: null, model: null, mode: "ptt", ready: false,
  mic: null, captureCtx: null, captureNode: null, downsample: null, pending: [], held: false, turnHasFrame: false,
  timer: null,
  cam: null, camTimer: null, newestFrame: null, frameFresh: false, canvas: document.createElement("canvas"),
  playCtx: null, playNode: null, playedSamples: 0, enqueuedSamples: 0,
  responses: new Map(), // response_id -> {item, li, text, pending, start, samples, audioDone, done, stopped}
  order: [], // response_ids whose audio is queued for the player, oldest first
  unacked: [], // response_ids fed to the player and not yet acknowledged (playback.ack)
  followCommits: 0, // vision-follow commits whose committed event has not come back yet
  users: new Map(), // user item_id -> li
  deltaFamily: null, // "ga" | "beta": the server sends deltas under both names; use the first seen
  stats: { appends: 0, frames: 0, followTurns: 0 },
  resume: null, // {sessionId, token, lastSeq, ackedSeq}: what a new connection needs to take the session over
  resuming: 0, // the try of the resume in progress (0: none)
  readyTimer: null, ackTimer: null,
};
window.auraPage = page; // for tests and the console

// ------------------------------------------------------------------------------------------ small helpers

function setStatus(text, isError = false) {
  ui.status.textContent = text;
  ui.status.classList.toggle("error", isError);
}

function setState(s) { document.body.dataset.state = s; }

function log(direction, event) {
  const line = `${new Date().toISOString().slice(11, 23)} ${direction} ${summarize(event)}\n`;
  const atEnd = ui.log.scrollTop + ui.log.clientHeight >= ui.log.scrollHeight - 4;
  ui.log.textContent = (ui.log.textContent + line).slice(-200000);
  if (atEnd) ui.log.scrollTop = ui.log.scrollHeight; // follow new events unless the user scrolled back
}

function summarize(event) { // audio and images are long: log their size instead
  return JSON.stringify(event, (k, v) => {
    if ((k === "audio" || k === "delta") && typeof v === "string" && v.length > 80) return `<${v.length} b64>`;
    if (k === "video_frames" && Array.isArray(v)) return v.map((f) => `<jpeg ${f.length} b64>`);
    return v;
  });
}

function authHeaders() {
  const key = ui.apiKey.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function send(event) {
  if (!page.ws || page.ws.readyState !== WebSocket.OPEN) return;
  if (event.type !== "input_audio_buffer.append") log("→", event);
  page.ws.send(JSON.stringify(event));
}

function pcm16(samples) { // float32 in [-1, 1] -> little-endian int16 bytes
  const view = new DataView(new ArrayBuffer(2 * samples.length));
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(2 * i, s < 0 ? s * 0x8000 : s * 0x7fff, true);
  }
  return new Uint8Array(view.buffer);
}

function bytesBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function pcm16Base64(samples) { return bytesBase64(pcm16(samples)); }

function wavBase64(samples, rate) { // a mono pcm16 WAV file
  const data = pcm16(samples);
  const head = new DataView(new ArrayBuffer(44));
  const text = (offset, s) => [...s].forEach((c, i) => head.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF"); head.setUint32(4, 36 + data.length, true); text(8, "WAVE");
  text(12, "fmt "); head.setUint32(16, 16, true); head.setUint16(20, 1, true); head.setUint16(22, 1, true);
  head.setUint32(24, rate, true); head.setUint32(28, 2 * rate, true); head.setUint16(32, 2, true);
  head.setUint16(34, 16, true); text(36, "data"); head.setUint32(40, data.length, true);
  const file = new Uint8Array(44 + data.length);
  file.set(new Uint8Array(head.buffer));
  file.set(data, 44);
  return bytesBase64(file);
}

function base64Float32(b64) { // pcm16 little-endian -> float32 in [-1, 1]
  const binary = atob(b64);
  const view = new DataView(new ArrayBuffer(binary.length));
  for (let i = 0; i < binary.length; i++) view.setUint8(i, binary.charCodeAt(i));
  const out = new Float32Array(binary.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(2 * i, true) / 32768;
  return out;
}

function addEntry(kind, text, cls = "") {
  const li = document.createElement("li");
  li.className = `${kind} ${cls}`.trim();
  li.textContent = text;
  ui.conversation.appendChild(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

// ------------------------------------------------------------------------------------------ server info

async function loadServerInfo() {
  try {
    const health = await fetch("/health"); // open: says whether this deployment has AURA at all
    const roles = health.ok ? (await health.json()).roles : null;
    if (Array.isArray(roles) && !roles.includes("aura")) {
      ui.connect.disabled = true;
      setStatus("this server has no AURA stage (text-to-speech only): live sessions need the full pipeline", true);
      return;
    }
    const models = await fetch("/v1/models", { headers: authHeaders() });
    if (models.ok) page.model = (await models.json()).data[0].id;
    const r = await fetch("/v1/audio/voices", { headers: authHeaders() });
    if (r.status === 401) { setStatus("enter the server's API key", true); return; }
    const chosen = ui.voice.value;
    ui.voice.length = 1; // keep "(server default)"
    if (r.ok) {
      const voices = (await r.json()).data;
      for (const v of voices) ui.voice.add(new Option(v.type === "preset" ? v.name : `${v.name} (cloned)`, v.name));
      if (chosen) ui.voice.value = chosen;
      else if (ui.voice.length > 1) ui.voice.selectedIndex = 1;
      ui.clone.hidden = voices.some((v) => v.type === "preset"); // presets: a CustomVoice Talker, which cannot clone
    }
    if (!page.ws) setStatus("not connected");
  } catch (e) {
    setStatus(`server unreachable: ${e.message}`, true);
  }
}

// ------------------------------------------------------------------------------------------ audio in / out

async function startAudio() {
  page.mic = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
  let source;
  try {
    page.captureCtx = new AudioContext({ sampleRate: INPUT_RATE });
    source = page.captureCtx.createMediaStreamSource(page.mic);
  } catch (e) { // Firefox: a stream cannot feed a context at another rate; capture at the device's, resample here
    if (page.captureCtx) page.captureCtx.close();
    page.captureCtx = new AudioContext();
    source = page.captureCtx.createMediaStreamSource(page.mic);
  }
  page.downsample = downsampler(page.captureCtx.sampleRate, INPUT_RATE);
  page.playCtx = new AudioContext({ sampleRate: OUTPUT_RATE });
  await Promise.all([page.captureCtx.audioWorklet.addModule("/web/audio-worklet.js"),
                     page.playCtx.audioWorklet.addModule("/web/audio-worklet.js")]);
  page.captureNode = new AudioWorkletNode(page.captureCtx, "capture");
  const mute = page.captureCtx.createGain(); // keeps the capture node pulled without playing the mic back
  mute.gain.value = 0;
  source.connect(page.captureNode).connect(mute).connect(page.captureCtx.destination);
  page.captureNode.port.onmessage = (e) => onMicBlock(e.data);

  page.playNode = new AudioWorkletNode(page.playCtx, "playback", { outputChannelCount: [1] });
  page.playNode.connect(page.playCtx.destination);
  page.playNode.port.onmessage = (e) => onPlayback(e.data);
  await Promise.all([page.captureCtx.resume(), page.playCtx.resume()]);
}

function downsampler(inRate, outRate) { // stateful: each output sample averages the input samples of its span
  if (inRate === outRate) return (block) => block;
  const step = inRate / outRate;
  let carry = new Float32Array(0);
  let pos = 0; // where the next output span starts, within carry + the new block
  return (block) => {
    const x = new Float32Array(carry.length + block.length);
    x.set(carry);
    x.set(block, carry.length);
    const out = [];
    for (; pos + step <= x.length; pos += step) {
      const a = Math.floor(pos), b = Math.floor(pos + step);
      let sum = 0;
      for (let i = a; i < b; i++) sum += x[i];
      out.push(b > a ? sum / (b - a) : x[a]);
    }
    const keep = Math.floor(pos);
    carry = x.slice(keep);
    pos -= keep;
    return Float32Array.from(out);
  };
}

function onMicBlock(raw) {
  const block = page.downsample(raw);
  if (!block.length) return;
  let sum = 0;
  for (let i = 0; i < block.length; i++) sum += block[i] * block[i];
  const rms = Math.sqrt(sum / block.length);
  ui.level.value = Math.min(1, rms * 8);
  if (page.ready && (page.mode === "vad" || page.held)) page.pending.push(block);
}

function flushAppend() { // everything captured since the last append, as one append
  if (!page.pending.length) return false;
  const blocks = page.pending;
  page.pending = [];
  const samples = new Float32Array(blocks.reduce((n, b) => n + b.length, 0));
  let offset = 0;
  for (const b of blocks) {
    samples.set(b, offset);
    offset += b.length;
  }
  // microphone audio is speech as far as the page knows: push-to-talk is held, or server VAD decides
  const event = { type: "input_audio_buffer.append", audio: pcm16Base64(samples), format: "pcm16",
                  sample_rate_hz: INPUT_RATE, is_speech: true };
  const frame = takeFrame();
  if (frame) event.video_frames = [frame];
  send(event);
  page.stats.appends += 1;
  page.stats.frames += frame ? 1 : 0;
  return true;
}

function takeFrame() { // a new camera frame, or the newest one if this turn has none yet (sticky frame)
  if (!page.newestFrame || !(page.frameFresh || !page.turnHasFrame)) return null;
  page.frameFresh = false;
  page.turnHasFrame = true;
  return page.newestFrame;
}

function enqueueAudio(responseId, samples) {
  const r = page.responses.get(responseId);
  if (!r || r.stopped || r.done === "cancelled") return; // a late delta of a stopped reply is never played
  r.pending.push(samples);
  if (!page.order.includes(responseId)) page.order.push(responseId);
  pump();
}

function pump() { // feed the player reply by reply: an overlapped reply waits until the one before it is complete
  while (page.order.length) {
    const id = page.order[0];
    const r = page.responses.get(id);
    if (r.pending.length && r.start === null) {
      r.start = page.enqueuedSamples;
      page.unacked.push(id);
    }
    for (const chunk of r.pending) {
      r.samples += chunk.length;
      page.enqueuedSamples += chunk.length;
      page.playNode.port.postMessage(chunk, [chunk.buffer]); // transferred: `chunk` is empty after this
    }
    r.pending = [];
    if (!r.audioDone && !r.stopped) break; // more of this reply may come
    page.order.shift();
  }
  showSpeaking();
}

function speaking() { return page.order.length > 0 || page.unacked.length > 0; }

function showSpeaking() {
  ui.stop.disabled = !speaking();
  setState(page.held ? "talking" : speaking() ? "speaking" : "ready");
}

function playedMs(r) {
  const heard = Math.max(0, Math.min(r.samples, page.playedSamples - r.start));
  return Math.round(heard * 1000 / OUTPUT_RATE);
}

function onPlayback(msg) {
  page.playedSamples = msg.played;
  ui.played.textContent = `${Math.round(msg.played * 1000 / OUTPUT_RATE)} ms`;
  ui.played.dataset.ms = String(Math.round(msg.played * 1000 / OUTPUT_RATE));
  if (msg.type === "cleared") page.enqueuedSamples = msg.played;
  ackHeard(msg.type === "cleared");
}

function ackHeard(truncated = false) { // playback.ack for each reply heard to its end (or cut short by a stop)
  for (const id of [...page.unacked]) {
    const r = page.responses.get(id);
    if (!truncated && !(r.audioDone && page.playedSamples >= r.start + r.samples)) continue;
    page.unacked.splice(page.unacked.indexOf(id), 1);
    const ms = playedMs(r);
    send({ type: "playback.ack", response_id: id, item_id: r.item, played_ms: ms, committed_ms: ms,
           ...(truncated ? { truncate: true } : {}) });
  }
  showSpeaking();
}

function stopPlayback(cancel) { // barge-in: drop what is queued or still arrives; the "cleared" report acks
  for (const id of new Set([...page.order, ...page.unacked])) {
    const r = page.responses.get(id);
    if (cancel && !r.done) send({ type: "response.cancel", response_id: id });
    r.stopped = true;
    r.li.classList.add("cancelled");
  }
  page.order = [];
  if (page.playNode) page.playNode.port.postMessage("clear");
}

function visionFollow() { // aura-ptt: while AURA's finished reply plays, a new camera frame is a frame-only turn
  send({ type: "input_audio_buffer.append", audio: pcm16Base64(new Float32Array(FOLLOW_SAMPLES)), format: "pcm16",
         sample_rate_hz: INPUT_RATE, is_speech: false, video_frames: [page.newestFrame] });
  page.frameFresh = false;
  page.followCommits += 1;
  page.stats.appends += 1;
  page.stats.frames += 1;
  page.stats.followTurns += 1;
  send({ type: "input_audio_buffer.commit", create_response: true });
}

function followDue() {
  if (!ui.follow.checked || page.mode !== "ptt" || page.held || !page.frameFresh || !page.unacked.length) return false;
  return [...page.responses.values()].every((r) => r.done); // the server is free: every reply has been generated
}

// ------------------------------------------------------------------------------------------ voice clone

async function recordClip(seconds) { // the microphone for `seconds`, at INPUT_RATE
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, noiseSuppression: true } });
  const ctx = new AudioContext(); // the device's rate, resampled below: works in every browser
  try {
    await ctx.audioWorklet.addModule("/web/audio-worklet.js");
    const node = new AudioWorkletNode(ctx, "capture");
    const mute = ctx.createGain();
    mute.gain.value = 0;
    ctx.createMediaStreamSource(stream).connect(node).connect(mute).connect(ctx.destination);
    const down = downsampler(ctx.sampleRate, INPUT_RATE);
    const parts = [];
    node.port.onmessage = (e) => parts.push(down(e.data));
    await ctx.resume();
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    const clip = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    parts.reduce((offset, p) => { clip.set(p, offset); return offset + p.length; }, 0);
    return clip;
  } finally {
    stream.getTracks().forEach((t) => t.stop());
    ctx.close();
  }
}

async function cloneVoice() { // a Base Talker speaks in a registered voice: register the user's own
  ui.clone.disabled = true;
  try {
    setStatus(`recording ${CLONE_SECONDS} s: say a sentence or two in your usual voice…`);
    const clip = await recordClip(CLONE_SECONDS);
    setStatus("registering the voice…");
    if ([...ui.voice.options].some((o) => o.value === CLONE_NAME)) { // registered before: replace it
      await fetch(`/v1/audio/voices/${CLONE_NAME}`, { method: "DELETE", headers: authHeaders() });
    }
    const r = await fetch("/v1/audio/voices", {
      method: "POST", headers: { ...authHeaders(), "Content-Type": "application/json" },
      body: JSON.stringify({ name: CLONE_NAME, ref_audio: `data:audio/wav;base64,${wavBase64(clip, INPUT_RATE)}` }) });
    if (!r.ok) throw new Error((await r.json()).error.message);
    ui.voice.value = "";
    await loadServerInfo();
    ui.voice.value = CLONE_NAME;
    setStatus(`voice "${CLONE_NAME}" registered: Connect to talk with it`);
  } catch (e) {
    setStatus(`voice clone: ${e.message}`, true);
  } finally {
    ui.clone.disabled = false;
  }
}

// ------------------------------------------------------------------------------------------ camera

async function setCamera(on) {
  if (!on) {
    clearInterval(page.camTimer);
    if (page.cam) page.cam.getTracks().forEach((t) => t.stop());
    page.cam = page.newestFrame = null;
    ui.preview.classList.remove("on");
    return;
  }
  if (page.cam) page.cam.getTracks().forEach((t) => t.stop());
  try {
    page.cam = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 } });
  } catch (e) {
    ui.camera.checked = false;
    setStatus(`camera: ${e.message}`, true);
    return;
  }
  ui.preview.srcObject = page.cam;
  ui.preview.classList.add("on");
  await ui.preview.play().catch(() => {});
  const grab = () => {
    const v = ui.preview;
    if (!v.videoWidth) return;
    const scale = Math.min(1, FRAME_MAX_WIDTH / v.videoWidth);
    page.canvas.width = Math.round(v.videoWidth * scale);
    page.canvas.height = Math.round(v.videoHeight * scale);
    page.canvas.getContext("2d").drawImage(v, 0, 0, page.canvas.width, page.canvas.height);
    page.newestFrame = page.canvas.toDataURL("image/jpeg", JPEG_QUALITY).split(",")[1]; // bare base64, as appends want
    page.frameFresh = true;
  };
  clearInterval(page.camTimer);
  page.camTimer = setInterval(grab, 1000 / Number(ui.fps.value));
  setTimeout(grab, 200);
}

// ------------------------------------------------------------------------------------------ session

function sessionUpdate() {
  const session = {
    modalities: ["audio", "text"],
    audio: { input: { format: { type: "audio/pcm", rate: INPUT_RATE },
                      turn_detection: page.mode === "vad" ? SERVER_VAD : null } },
    extra_body: { auto_response: true },
  };
  if (ui.voice.value) session.audio.output = { voice: ui.voice.value };
  if (ui.instructions.value.trim()) session.instructions = ui.instructions.value.trim();
  const extra = ui.extraBody.value.trim();
  if (extra) Object.assign(session.extra_body, JSON.parse(extra)); // a JSON error is shown before connecting
  return { type: "session.update", session };
}

async function connect() {
  let update;
  try {
    update = sessionUpdate();
  } catch (e) {
    setStatus(`extra_body is not valid JSON: ${e.message}`, true);
    return;
  }
  ui.connect.disabled = true;
  setStatus("starting microphone…");
  setState("connecting");
  try {
    await startAudio();
    if (ui.camera.checked) await setCamera(true);
  } catch (e) {
    setStatus(`microphone: ${e.message}`, true);
    teardown();
    return;
  }
  await loadServerInfo();
  setStatus("connecting…");
  page.readyTimer = setTimeout(() => {
    if (!page.ready) { setStatus("no session.updated within 15 s", true); if (page.ws) page.ws.close(); }
  }, READY_TIMEOUT_MS);
  watch(openSocket(""), () => send(update));
  page.timer = setInterval(() => {
    if (page.mode === "vad" || page.held) flushAppend();
    else if (followDue()) visionFollow();
  }, APPEND_MS);
  page.ackTimer = setInterval(ackEvents, EVENT_ACK_MS);
  ui.connect.textContent = "Disconnect";
  ui.connect.disabled = false;
}

function openSocket(query) {
  const key = ui.apiKey.value.trim();
  const url = `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}/v1/realtime?duplex=1` +
              (page.model ? `&model=${encodeURIComponent(page.model)}` : "") + query;
  // a browser cannot set headers on a WebSocket: the key rides as a subprotocol (OpenAI's convention)
  return key ? new WebSocket(url, ["realtime", `openai-insecure-api-key.${key}`]) : new WebSocket(url);
}

function watch(ws, onOpen) {
  page.ws = ws;
  ws.onopen = onOpen;
  ws.onmessage = (e) => onServerEvent(JSON.parse(e.data));
  ws.onerror = () => {
    if (!page.resuming) setStatus("connection failed (wrong API key, or no /v1/realtime on this server?)", true);
  };
  ws.onclose = (e) => {
    if (page.ws !== ws) return;
    if (page.ready && page.resume && (page.resuming || !FINAL_CLOSE_CODES.includes(e.code))) {
      resume(); // the network dropped, or a resume try did not get through
      return;
    }
    clearTimeout(page.readyTimer);
    if (e.code !== 1000 || !page.ready) setStatus(`disconnected (${e.code}${e.reason ? ": " + e.reason : ""})`, e.code !== 1000);
    else setStatus(e.reason === "session_replaced" ? "disconnected: this session continues in another tab" : "disconnected");
    teardown();
  };
}

function resume() { // take the session over from a new connection, a few tries apart (the server holds it 30 s)
  page.ws = null;
  if (page.resuming >= RESUME_TRIES) {
    setStatus("connection lost: the session could not be resumed", true);
    teardown();
    return;
  }
  page.resuming += 1;
  setStatus(`connection lost: resuming the session (try ${page.resuming} of ${RESUME_TRIES})…`, true);
  const r = page.resume;
  setTimeout(() => {
    if (page.resume !== r) return; // disconnected meanwhile
    watch(openSocket("&autostart=0"), () => send({ type: "session.resume", session_id: r.sessionId,
                                                   resume_token: r.token, last_received_server_event_seq: r.lastSeq }));
  }, RESUME_BACKOFF_MS * page.resuming);
}

function sessionLost(why) {
  const ws = page.ws;
  page.ws = null; // its close is ours: not another resume
  if (ws) ws.close(1000);
  teardown();
  setStatus(`connection lost: the session could not be resumed (${why}); connect again`, true);
}

function ackEvents() { // the server keeps events for a resume until they are acknowledged
  const r = page.resume;
  if (r && !page.resuming && r.lastSeq > r.ackedSeq) {
    send({ type: "session.event_ack", server_event_seq: r.lastSeq });
    r.ackedSeq = r.lastSeq;
  }
}

async function disconnect() {
  const ws = page.ws;
  if (!ws) return;
  send({ type: "session.close" });
  await new Promise((resolve) => {
    const t = setTimeout(resolve, CLOSE_WAIT_MS);
    page.onClosed = () => { clearTimeout(t); resolve(); };
  });
  page.ws = null;
  ws.close(1000);
  setStatus("disconnected");
  teardown();
}

function teardown() {
  clearInterval(page.timer);
  clearInterval(page.ackTimer);
  clearTimeout(page.readyTimer);
  page.ws = null;
  page.resume = null;
  page.resuming = 0;
  page.ready = page.held = false;
  page.pending = [];
  setCamera(false);
  if (page.mic) page.mic.getTracks().forEach((t) => t.stop());
  for (const ctx of [page.captureCtx, page.playCtx]) if (ctx) ctx.close();
  page.mic = page.captureCtx = page.playCtx = page.captureNode = page.playNode = null;
  page.order = [];
  page.unacked = [];
  page.followCommits = 0;
  page.playedSamples = page.enqueuedSamples = 0;
  ui.talk.disabled = ui.stop.disabled = true;
  ui.talk.classList.remove("held");
  ui.connect.textContent = "Connect";
  ui.connect.disabled = false;
  ui.level.value = 0;
  setState("idle");
}

// ------------------------------------------------------------------------------------------ push to talk

function pressTalk() {
  if (!page.ready || page.mode !== "ptt" || page.held) return;
  if (speaking()) bargeIn(); // talking over AURA interrupts it
  page.held = true;
  page.pending = [];
  page.turnHasFrame = false;
  ui.talk.classList.add("held");
  setState("talking");
}

function releaseTalk() {
  if (!page.held) return;
  page.held = false;
  ui.talk.classList.remove("held");
  flushAppend();
  send({ type: "input_audio_buffer.commit", create_response: true });
  showSpeaking();
}

function bargeIn() { // Stop, or talking over AURA: the server stops replies still running; we stop hearing them
  stopPlayback(true);
}

// ------------------------------------------------------------------------------------------ server events

function responseOf(event) {
  const id = event.response_id || (event.response && event.response.id);
  if (!id) return null;
  if (!page.responses.has(id)) {
    const li = addEntry("assistant", "…", "pending");
    page.responses.set(id, { item: `item_${id}`, li, text: "", pending: [], start: null, samples: 0,
                             audioDone: false, done: null, stopped: false });
  }
  return [id, page.responses.get(id)];
}

function deltaWanted(family) { // GA and beta copies of each delta arrive: follow one family only
  if (!page.deltaFamily) page.deltaFamily = family;
  return page.deltaFamily === family;
}

function userEntry(itemId) {
  if (!page.users.has(itemId)) page.users.set(itemId, addEntry("user", "…", "pending"));
  return page.users.get(itemId);
}

function onServerEvent(event) {
  const t = event.type;
  if (!/audio\.delta$|audio_transcript\.delta$|text\.delta$/.test(t)) log("←", event);
  const seq = event.server_event_seq;
  if (page.resume && typeof seq === "number" && t !== "session.resumed") {
    if (seq <= page.resume.lastSeq) return; // already had it
    page.resume.lastSeq = seq;
  }
  switch (t) {
    case "session.created":
      page.resume = event.resume_token // a server that holds dropped sessions: keep what resuming needs
        ? { sessionId: event.session.id, token: event.resume_token, lastSeq: seq || 0, ackedSeq: 0 } : null;
      break;
    case "session.resumed": // the answer to our resume (a later one in a replay is old news)
      if (page.resuming && page.resume && event.session_id === page.resume.sessionId) {
        page.resume.token = event.resume_token;
        page.resuming = 0;
        page.stats.resumed = (page.stats.resumed || 0) + 1;
        setStatus("reconnected: the session goes on");
      }
      break;
    case "session.resync_required":
      sessionLost(`events were lost (${event.reason})`);
      break;
    case "session.updated":
      if (!page.ready) {
        page.ready = true;
        ui.talk.disabled = page.mode !== "ptt";
        setStatus(page.mode === "ptt" ? "connected: hold the button (or space) and speak"
                                      : "connected: just speak (hands-free)");
        ui.hint.textContent = page.mode === "ptt" ? "Hold to talk; release to send." : "Speak; pause to send.";
        setState("ready");
      }
      break;
    case "input_audio_buffer.speech_started":
      if (speaking()) stopPlayback(false); // the server cancels the reply (interrupt_response); stop hearing it now
      page.turnHasFrame = false;
      userEntry(event.item_id);
      setState("talking");
      break;
    case "input_audio_buffer.speech_stopped":
      showSpeaking();
      break;
    case "input_audio_buffer.committed":
      if (page.followCommits > 0) { // a frame-only turn of ours: there is no speech to transcribe
        page.followCommits -= 1;
        const li = userEntry(event.item_id);
        li.textContent = "(camera frame)";
        li.classList.replace("pending", "frame");
      } else {
        userEntry(event.item_id);
      }
      page.turnHasFrame = false;
      break;
    case "conversation.item.input_audio_transcription.delta": {
      const li = userEntry(event.item_id);
      li.textContent = (li.classList.contains("pending") ? "" : li.textContent) + (event.delta || "");
      li.classList.remove("pending");
      break;
    }
    case "conversation.item.input_audio_transcription.completed": {
      const li = userEntry(event.item_id);
      li.textContent = event.transcript || "(no speech recognised)";
      li.classList.remove("pending");
      break;
    }
    case "response.created":
      responseOf(event);
      break;
    case "response.output_item.added": {
      const found = responseOf(event);
      if (found && event.item && event.item.id) found[1].item = event.item.id;
      break;
    }
    case "response.output_audio.delta":
    case "response.audio.delta": {
      if (!deltaWanted(t.includes("output_") ? "ga" : "beta")) break;
      const found = responseOf(event);
      if (found) enqueueAudio(found[0], base64Float32(event.delta));
      break;
    }
    case "response.output_audio_transcript.delta":
    case "response.audio_transcript.delta":
    case "response.output_text.delta":
    case "response.text.delta": {
      if (!deltaWanted(t.includes("output_") ? "ga" : "beta")) break;
      const found = responseOf(event);
      if (!found) break;
      const r = found[1];
      r.text += event.delta || "";
      r.li.textContent = r.text;
      r.li.classList.remove("pending");
      break;
    }
    case "response.output_audio_transcript.done":
    case "response.audio_transcript.done":
    case "response.output_text.done":
    case "response.text.done": {
      const found = responseOf(event);
      const text = event.transcript !== undefined ? event.transcript : event.text;
      if (found && text) { found[1].text = text; found[1].li.textContent = text; found[1].li.classList.remove("pending"); }
      break;
    }
    case "response.output_audio.done":
    case "response.audio.done": {
      const found = responseOf(event);
      if (found) { found[1].audioDone = true; pump(); ackHeard(); }
      break;
    }
    case "response.listen": { // AURA chose <|silent|>: nothing to say, nothing to play
      const found = responseOf(event) || [null, { li: addEntry("assistant", "", "") }];
      found[1].li.textContent = "(silent: AURA is listening)";
      found[1].li.classList.remove("pending");
      found[1].li.classList.add("silent");
      if (found[0]) { found[1].done = "listening"; found[1].audioDone = true; pump(); }
      showSpeaking();
      break;
    }
    case "response.done": {
      const found = responseOf(event);
      if (!found) break;
      const [id, r] = found;
      const status = event.response && event.response.status;
      r.done = status || "completed";
      r.audioDone = true;
      if (status === "cancelled") {
        r.li.classList.add("cancelled");
        if (page.order.includes(id) || page.unacked.includes(id)) stopPlayback(false);
      }
      if (r.li.classList.contains("pending")) {
        r.li.classList.remove("pending");
        if (!r.text) { r.li.textContent = "(silent: AURA is listening)"; r.li.classList.add("silent"); }
      }
      pump();
      ackHeard();
      break;
    }
    case "session.closed":
      if (page.onClosed) page.onClosed();
      break;
    case "error": {
      // OpenAI's {error: {type, code, message}}, or a handshake refusal's flat {error: "<text>", code}
      const err = typeof event.error === "object" && event.error ? event.error : { message: event.error, code: event.code };
      addEntry("error", `${err.code ? err.code + ": " : ""}${err.message}`);
      setStatus(err.message || "error", true);
      if (page.resuming) { // the session is gone (expired, or its slot went to another): connect again
        sessionLost(err.message);
        break;
      }
      if (!page.ready && page.ws) { // the session was refused: close, so the settings can change before a retry
        const ws = page.ws;
        page.ws = null;
        ws.close(1000);
        teardown();
      }
      break;
    }
    default:
      break;
  }
}

// ------------------------------------------------------------------------------------------ wiring

ui.connect.addEventListener("click", () => (page.ws ? disconnect() : connect()));
ui.talk.addEventListener("pointerdown", (e) => { e.preventDefault(); ui.talk.setPointerCapture(e.pointerId); pressTalk(); });
ui.talk.addEventListener("pointerup", releaseTalk);
ui.talk.addEventListener("pointercancel", releaseTalk);
ui.stop.addEventListener("click", bargeIn);
ui.clone.addEventListener("click", cloneVoice);
document.addEventListener("keydown", (e) => {
  if (e.code === "Space" && !e.repeat && !/INPUT|TEXTAREA|SELECT/.test(e.target.tagName)) { e.preventDefault(); pressTalk(); }
});
document.addEventListener("keyup", (e) => { if (e.code === "Space" && page.held) { e.preventDefault(); releaseTalk(); } });
for (const radio of document.querySelectorAll("input[name=mode]")) {
  radio.addEventListener("change", () => {
    page.mode = radio.value;
    if (page.ws && page.ready) { // switch live: the new turn detection applies from now on
      page.pending = [];
      send({ type: "session.update", session: { audio: { input: { turn_detection: page.mode === "vad" ? SERVER_VAD : null } } } });
      ui.talk.disabled = page.mode !== "ptt";
      setStatus(page.mode === "ptt" ? "push to talk" : "hands-free: just speak");
    }
  });
}
ui.camera.addEventListener("change", () => { if (page.ws) setCamera(ui.camera.checked); });
ui.fps.addEventListener("change", () => { if (page.cam) setCamera(true); });
ui.apiKey.addEventListener("change", () => { sessionStorage.setItem("aura-omni.api-key", ui.apiKey.value); loadServerInfo(); });
ui.apiKey.value = sessionStorage.getItem("aura-omni.api-key") || ""; // this tab only, never sent elsewhere
page.mode = document.querySelector("input[name=mode]:checked").value;
loadServerInfo();
