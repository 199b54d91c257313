"""What this build honours of the deploy schema: a field the schema accepts but this build would ignore is refused
with the reason, naming file and field (issue 13), so a deploy file means what it says. docs/deploy.md lists every
field and what it does here."""

from __future__ import annotations

from aura_omni.deploy.schema import ASR, AURA, CODE2WAV, TALKER, DeployConfig, Stage

CODEC_NUM_QUANTIZERS = 16  # codes per Qwen3-TTS 12 Hz codec frame (Code2Wav counts "tokens" as codes)
CODEC_ATTENTION_WINDOW = 72  # Qwen3-TTS-Tokenizer-12Hz decoder `sliding_window`, frames
TALKER_MIN_TOKENS = 2  # qwen-tts generate(min_new_tokens=2), models/qwen3_tts/sampling.py MIN_NEW_TOKENS
TALKER_STOP_IDS = [2150]  # Qwen3-TTS talker codec stop id, always a stop
PLATFORMS = ("cuda", "cpu", "npu")  # keys of `platforms:`: the kind of the first stage's device
IN_PROCESS = "stages run in one process and hand their data through in-memory queues"
REFUSED_EXTRAS = {
    "shm_threshold_bytes": f"there is no shared-memory transport: {IN_PROCESS}",
    "connector_get_sleep_s": f"nothing polls: {IN_PROCESS}, whose consumers wake on arrival",
    "connector_get_max_wait_first_chunk": f"nothing polls: {IN_PROCESS}; a turn is bounded by its request timeout",
    "connector_get_max_wait": f"nothing polls: {IN_PROCESS}; a turn is bounded by its request timeout",
    "decode_cudagraph_capture_sizes": "Code2Wav captures a CUDA graph for each window length of its schedule "
                                      "(initial_codec_chunk_frames doubling up to codec_chunk_frames) at each batch "
                                      "size up to max_num_seqs by itself; set enforce_eager: true on the code2wav stage "
                                      "for none",
    "ref_code_context_frames": "the voice-clone reference codes prime the stateful Code2Wav decoder in full",
    **{k: "adaptive codec chunk scheduling is not implemented; windows are initial_codec_chunk_frames, then "
          "codec_chunk_frames" for k in ("codec_chunk_ramp", "codec_chunk_adaptive", "codec_chunk_min_frames",
                                          "codec_chunk_safety_margin_ms", "codec_chunk_ramp_divisor",
                                          "codec_chunk_ramp_delta_min")},
}
ANY = object()  # any value: the field cannot change what the stage does (e.g. a seed of a greedy decoder)
# default_sampling_params a stage applies; every other key must be absent or hold a value the stage acts on anyway.
HONOURED_SAMPLING = {
    ASR: {"max_tokens"},
    AURA: {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
           "seed", "stop_token_ids", "stop", "include_stop_str_in_output", "min_tokens", "max_tokens", "ignore_eos"},
    TALKER: {"temperature", "top_k", "top_p", "repetition_penalty", "seed", "max_tokens"},
    CODE2WAV: {"max_tokens"},  # codes of one request: checked against what the Talker can produce
}
NEUTRAL_SAMPLING = {"n": [1], "top_p": [1.0], "top_k": [-1, 0], "min_p": [0.0], "repetition_penalty": [1.0],
                    "presence_penalty": [0.0], "frequency_penalty": [0.0], "min_tokens": [0], "ignore_eos": [False],
                    "stop": [[]], "stop_token_ids": [[]], "logprobs": [None]}
MATCHING_SAMPLING = {  # what the stage does anyway, per role
    ASR: {"temperature": [0.0], "seed": ANY, "detokenize": [True], "skip_special_tokens": [True]},
    AURA: {"detokenize": [True], "skip_special_tokens": [False]},
    TALKER: {"min_tokens": [TALKER_MIN_TOKENS], "stop_token_ids": [[], TALKER_STOP_IDS], "detokenize": [False]},
    CODE2WAV: {"temperature": [0.0], "seed": ANY, "detokenize": [True, False]},
}
SAMPLING_WHY = {ASR: "the asr stage decodes greedily; per-request sampling goes in sampling_params_list",
                AURA: "the aura stage streams its text with special tokens kept (<|silent|> stays visible)",
                TALKER: "the Talker samples codec frames with temperature / top_k / top_p / repetition_penalty / seed",
                CODE2WAV: "Code2Wav is a deterministic decoder: it does not sample"}


def _device_name(devices: str) -> str:
    return devices.strip().removeprefix("cuda:")  # "0" and "cuda:0" are one GPU


def _is_cuda(devices: str) -> bool:
    return devices.strip().isdigit() or devices.strip().startswith("cuda")


def refusals(cfg: DeployConfig) -> list[tuple[str, str]]:
    """(field path, why) for every field this build would not honour as written."""
    out: list[tuple[str, str]] = []
    if cfg.pipeline == "qwen3_tts" and "async_chunk" in cfg.model_fields_set and not cfg.async_chunk:
        out.append(("async_chunk", "false asks Code2Wav to decode after the Talker finishes; this build always "
                                   "streams codec windows (set true)"))
    if cfg.session_mode == "duplex" and cfg.pipeline != "aura_omni":
        out.append(("session_mode", f"duplex sessions are an aura_omni pipeline mode (got pipeline {cfg.pipeline!r})"))
    for name, conn in cfg.connectors.items():
        where = f"connectors.{name}"
        if conn.name != "SharedMemoryConnector":
            out.append((f"{where}.name", f"only SharedMemoryConnector (single host): {IN_PROCESS} (got {conn.name!r})"))
        extra = conn.extra
        for key in sorted(extra.model_fields_set):
            if key in REFUSED_EXTRAS:
                out.append((f"{where}.extra.{key}", REFUSED_EXTRAS[key]))
        if "codec_streaming" in extra.model_fields_set and extra.codec_streaming is not True:
            out.append((f"{where}.extra.codec_streaming", "the Talker always streams codec frames to Code2Wav"))
        if ("codec_left_context_frames" in extra.model_fields_set
                and extra.codec_left_context_frames < CODEC_ATTENTION_WINDOW):
            out.append((f"{where}.extra.codec_left_context_frames",
                        f"the stateful Code2Wav decoder keeps every frame's state, so its audio equals the full "
                        f"decode, which a re-decoded left context of >= {CODEC_ATTENTION_WINDOW} frames (the decoder's "
                        f"attention window) stands for; a shorter, approximate context is not implemented "
                        f"(got {extra.codec_left_context_frames})"))
        if "initial_codec_chunk_frames" in extra.model_fields_set and extra.initial_codec_chunk_frames == 0:
            out.append((f"{where}.extra.initial_codec_chunk_frames",
                        "0 (a first window sized by load) is not implemented; give a frame count (absent: 2)"))
    talker = cfg.stage(TALKER)
    codec_edge = set(talker.output_connectors.values()) if talker is not None else set()
    used = set()
    for i, st in enumerate(cfg.stages):
        for field, edges in (("input_connectors", st.input_connectors), ("output_connectors", st.output_connectors)):
            used |= set(edges.values())
            role = cfg.role_of(st)
            if edges and not ((role == TALKER and field == "output_connectors")
                              or (role == CODE2WAV and field == "input_connectors")):
                out.append((f"stages[{i}].{field}", "only the Talker -> Code2Wav edge has a connector: the other "
                                                    "edges hand their data over in process"))
            elif role == CODE2WAV and set(edges.values()) - codec_edge:
                out.append((f"stages[{i}].{field}", f"must name the Talker's output connector "
                                                    f"({', '.join(sorted(codec_edge)) or 'none'}): its settings are "
                                                    f"the codec windows'"))
    for name in sorted(set(cfg.connectors) - used):
        out.append((f"connectors.{name}", "no stage uses it"))
    for name in sorted(set(cfg.platforms) - set(PLATFORMS)):
        out.append((f"platforms.{name}", f"a platform is one of {', '.join(PLATFORMS)} (a stage device's kind)"))
    if cfg.ray_address is not None and cfg.distributed_executor_backend != "ray":
        out.append(("ray_address", "a Ray cluster serves stages only with distributed_executor_backend: ray"))
    roles = cfg.roles
    if cfg.ray_stages is not None:
        if cfg.distributed_executor_backend != "ray":
            out.append(("ray_stages", "names the stages that run as Ray actors: set distributed_executor_backend: "
                                      "ray"))
        elif not cfg.ray_stages:
            out.append(("ray_stages", "name at least one stage (leave it out for every stage in Ray actors)"))
        for j, name in enumerate(cfg.ray_stages):
            if name == CODE2WAV:
                out.append((f"ray_stages[{j}]", f"{CODE2WAV} runs in its Talker's actor: name {TALKER}"))
            elif name not in roles:
                out.append((f"ray_stages[{j}]", f"no stage has role {name!r} (here: {', '.join(sorted(roles))})"))
    if cfg.process_stages and cfg.distributed_executor_backend == "ray":
        out.append(("process_stages", "with distributed_executor_backend: ray, ray_stages says which stages run apart"))
    named: set[str] = set()
    for j, entry in enumerate(cfg.process_stages):
        group = entry if isinstance(entry, list) else [entry]
        for k, name in enumerate(group):
            where = f"process_stages[{j}][{k}]" if isinstance(entry, list) else f"process_stages[{j}]"
            if name == CODE2WAV:
                out.append((where, f"{CODE2WAV} runs in its Talker's process: name {TALKER}"))
            elif name not in roles:
                out.append((where, f"no stage has role {name!r} (here: {', '.join(sorted(roles))})"))
            elif name in named:
                out.append((where, f"{name} is named twice: a stage runs in one process"))
            named.add(name)
        if isinstance(entry, list) and not entry:
            out.append((f"process_stages[{j}]", "an empty group"))
    gpu_shares: dict[str, list[float]] = {}
    for i, st in enumerate(cfg.stages):
        role, where, given = cfg.role_of(st), f"stages[{i}]", st.model_fields_set
        if st.num_replicas > 1 and cfg.distributed_executor_backend != "ray":
            out.append((f"{where}.num_replicas", "replicas are Ray actors: set distributed_executor_backend: ray "
                                                 "(or serve --distributed-executor-backend ray)"))
        elif st.num_replicas > 1 and role != CODE2WAV and not cfg.in_ray(st):
            out.append((f"{where}.num_replicas", f"replicas are Ray actors: name {role} in ray_stages"))
        if "," in st.devices:
            out.append((f"{where}.devices", f"a stage runs on one device in this build (got {st.devices!r})"))
        if "gpu_memory_utilization" in given and _is_cuda(st.devices):
            gpu_shares.setdefault(_device_name(st.devices), []).append(st.gpu_memory_utilization)
        if st.subtalker_sampling_params is not None and role != TALKER:
            out.append((f"{where}.subtalker_sampling_params", "only the Talker has a code predictor (sub-talker)"))
        k = st.kernels
        if k.stage_stream and role != ASR:
            out.append((f"{where}.kernels.stage_stream", "only the asr stage runs on a stream of its own: AURA, the "
                                                         "Talker and Code2Wav hand device tensors to each other"))
        if st.admission.hold_factor > 0 and role != ASR:
            out.append((f"{where}.admission.hold_factor", "only the asr stage holds new prompts to batch them"))
        if role in (TALKER, CODE2WAV) and st.enable_prefix_caching:
            out.append((f"{where}.enable_prefix_caching", f"{role} prompts are embeddings without content hashes: "
                                                          "never cached"))
        sp = st.default_sampling_params
        for key in sorted(sp.model_fields_set - HONOURED_SAMPLING[role]):
            value = getattr(sp, key)
            ok = MATCHING_SAMPLING[role].get(key, NEUTRAL_SAMPLING.get(key, []))
            if ok is not ANY and value not in ok:
                out.append((f"{where}.default_sampling_params.{key}", f"{SAMPLING_WHY[role]} (got {value!r}; "
                                                                      f"accepted: {', '.join(map(repr, ok)) or 'none'})"))
        if role == CODE2WAV and talker is not None:
            out += _code2wav_refusals(cfg, st, talker, where)
    for device, shares in gpu_shares.items():
        if sum(shares) > 1 + 1e-9:
            out.append(("stages", f"the gpu_memory_utilization of the stages on GPU {device} add up to "
                                  f"{sum(shares):g} > 1 (each stage's share is its own)"))
    return out


def _code2wav_refusals(cfg: DeployConfig, st: Stage, talker: Stage, where: str) -> list[tuple[str, str]]:
    """Code2Wav is no engine here: one stateful decoder per stream, streams' windows decoded together in a batch, on
    the Talker's device."""
    out, given = [], st.model_fields_set
    if _device_name(st.devices) != _device_name(talker.devices):
        out.append((f"{where}.devices", f"Code2Wav runs on the Talker's device ({talker.devices!r}) in this build"))
    if st.load_format != talker.load_format:
        out.append((f"{where}.load_format", f"Code2Wav loads with the Talker's checkpoint ({talker.load_format!r})"))
    if "num_replicas" in given and st.num_replicas != talker.num_replicas:
        out.append((f"{where}.num_replicas", f"Code2Wav runs inside each Talker replica (the Qwen3-TTS facade), "
                                             f"so it has the Talker's num_replicas ({talker.num_replicas}); "
                                             f"remove the key or set it equal"))
    if "async_scheduling" in given and not st.async_scheduling:
        out.append((f"{where}.async_scheduling", "Code2Wav windows are always decoded while the Talker keeps "
                                                 "stepping (it never waits for them)"))
    window = cfg.codec_streaming().codec_chunk_frames * CODEC_NUM_QUANTIZERS
    if st.max_num_batched_tokens is not None and st.max_num_batched_tokens < window:
        out.append((f"{where}.max_num_batched_tokens", f"one codec window of codec_chunk_frames needs {window} codes "
                                                       f"per step (got {st.max_num_batched_tokens})"))
    if talker.max_model_len is not None:
        need = talker.max_model_len * CODEC_NUM_QUANTIZERS  # a Talker request produces fewer frames than this
        for field, value in (("max_model_len", st.max_model_len),
                             ("default_sampling_params.max_tokens", st.default_sampling_params.max_tokens)):
            if value is not None and value < need:
                out.append((f"{where}.{field}", f"a Talker request (max_model_len {talker.max_model_len}) may produce "
                                                f"{need} codes; Code2Wav would have to cut it (got {value})"))
    return out
