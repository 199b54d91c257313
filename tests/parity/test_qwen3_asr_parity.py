"""Qwen3-ASR against transformers' native Qwen3ASRForConditionalGeneration (the "-hf" layout).

Our tiny checkpoint is written in the ORIGINAL layout; its weights are mapped to transformers'
layout here, independently of the model's own key mapping. Compared at fp32: front end vs
WhisperFeatureExtractor, encoder outputs, greedy tokens and their logits, for single clips and a
batch of mixed lengths.
"""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from aura_omni.stages.asr.service import AsrService
from aura_omni.media.asr_features import log_mel_spectrogram
from tests.parity.asr_reference import hf_asr_inputs
from aura_omni.testing.tiny_asr import write_tiny_asr

pytestmark = pytest.mark.parity
transformers = pytest.importorskip("transformers")
from transformers import Qwen3ASRConfig as HFConfig, Qwen3ASRForConditionalGeneration, WhisperFeatureExtractor  # noqa: E402

SR = 16000
NEW_TOKENS = 8


def clip(seconds: float, seed: int) -> np.ndarray:
    """Deterministic speech-like test signal: a few harmonics with vibrato plus noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    f0 = 120 + 40 * seed + 10 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    wav = sum(0.2 / k * np.sin(k * phase) for k in range(1, 6)) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))
    return (wav + 0.02 * rng.standard_normal(t.shape)).astype(np.float32)


def original_to_hf(name: str) -> str:
    for src, dst in (("thinker.audio_tower.proj1.", "model.multi_modal_projector.linear_1."),
                     ("thinker.audio_tower.proj2.", "model.multi_modal_projector.linear_2."),
                     ("thinker.audio_tower.", "model.audio_tower."),
                     ("thinker.model.", "model.language_model."),
                     ("thinker.lm_head.", "lm_head.")):
        if name.startswith(src):
            return dst + name[len(src):]
    raise AssertionError(f"unexpected key {name}")


def reference_model(ckpt) -> Qwen3ASRForConditionalGeneration:
    cfg = json.loads((ckpt / "config.json").read_text())["thinker_config"]
    audio, text = dict(cfg["audio_config"]), dict(cfg["text_config"])
    for k in ("model_type", "max_source_positions", "conv_chunksize"):
        audio.pop(k, None)
    hf_text = dict(model_type="qwen3", vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                   intermediate_size=text["intermediate_size"], num_hidden_layers=text["num_hidden_layers"],
                   num_attention_heads=text["num_attention_heads"], num_key_value_heads=text["num_key_value_heads"],
                   head_dim=text["head_dim"], rms_norm_eps=text["rms_norm_eps"], max_position_embeddings=65536,
                   rope_parameters={"rope_type": "default", "rope_theta": text["rope_theta"]},
                   tie_word_embeddings=text["tie_word_embeddings"])
    hf_cfg = HFConfig(audio_config=audio, text_config=hf_text, audio_token_id=cfg["audio_token_id"],
                      tie_word_embeddings=text["tie_word_embeddings"])
    model = Qwen3ASRForConditionalGeneration(hf_cfg).float().eval()
    state = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), "pt") as sf:
            state.update({original_to_hf(k): sf.get_tensor(k).float() for k in sf.keys()})
    if text["tie_word_embeddings"]:
        assert "lm_head.weight" not in state
        state["lm_head.weight"] = state["model.language_model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("positional_embedding" in k for k in missing), (missing, unexpected)
    return model


@pytest.fixture(scope="module", params=["1.7b", "0.6b"])
def pair(request, tmp_path_factory):
    ckpt = write_tiny_asr(tmp_path_factory.mktemp(f"asr{request.param}"), size=request.param)
    return AsrService.from_pretrained(ckpt, dtype=torch.float32), reference_model(ckpt), request.param


def check(svc, ref, clips):
    pieces = svc.prepare([(c, SR) for c in clips])
    with torch.no_grad():
        features = svc.features(pieces)
        ours_audio = svc.model.encode_audio(features)
        inputs = hf_asr_inputs(pieces, features)
        ref_audio = ref.get_audio_features(inputs["input_features"], inputs["input_features_mask"]).pooler_output
        torch.testing.assert_close(torch.cat(ours_audio), ref_audio, atol=1e-4, rtol=0)

        from aura_omni.engine.sampling_params import SamplingParams

        ours = svc.generate(pieces, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS))
        out = ref.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                           return_dict_in_generate=True, eos_token_id=None)
        ref_tokens = out.sequences[:, inputs["input_ids"].shape[1]:]
        ref_logits = torch.stack(out.logits, 1)  # [B, steps, V]
        for i, p in enumerate(pieces):
            assert ours[i] == ref_tokens[i, :len(ours[i])].tolist()
            assert len(ours[i]) == NEW_TOKENS  # random weights never pick EOS here; a stop would hide tokens
            # our logits for the same tokens, from a cache-less forward over prompt + generated ids
            seq = p.input_ids + ours[i][:-1]
            embeds = svc.model.prompts_embeds([seq], [features[i]])[0]
            pos = torch.arange(len(seq))
            from aura_omni.layers.attention import AttentionMetadata

            hidden = svc.model.backbone(embeds, pos, AttentionMetadata.prefill([len(seq)]))
            logits = svc.model.compute_logits(hidden[len(p.input_ids) - 1:])
            torch.testing.assert_close(logits, ref_logits[i], atol=1e-4, rtol=0)


@pytest.mark.parametrize("pair, seconds", [("1.7b", 0.5), ("1.7b", 2.0), ("1.7b", 9.0),
                                           ("0.6b", 2.0)],  # the tied layout: one clip covers it
                         indirect=["pair"])
def test_single_clip_matches_transformers(pair, seconds):
    svc, ref, _ = pair
    check(svc, ref, [clip(seconds, seed=1)])


@pytest.mark.parametrize("pair", ["1.7b"], indirect=True)
def test_mixed_length_batch_matches_transformers(pair):
    svc, ref, _ = pair
    check(svc, ref, [clip(2.0, 2), clip(0.5, 3), clip(9.0, 4), clip(1.37, 5)])


@pytest.mark.parametrize("seconds", [0.5, 1.37, 9.0])
def test_log_mel_matches_whisper_feature_extractor(seconds):
    wav = clip(seconds, seed=7)
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SR, hop_length=160, n_fft=400, chunk_length=30,
                                 padding_value=0.0, return_attention_mask=True, dither=0.0)
    ref = fe(wav, sampling_rate=SR, padding="longest", return_tensors="pt")["input_features"][0]
    ours = log_mel_spectrogram(wav)
    assert ours.shape == (128, len(wav) // 160) == tuple(ref.shape)
    # the extractor's default (torch.stft in float32) carries float32 FFT rounding: up to ~1.5e-5 where a bin's power
    # nearly cancels; its numpy path takes the FFT in float64, as ours does (a DFT matmul), and agrees to rounding
    torch.testing.assert_close(ours, ref, atol=3e-5, rtol=0)
    exact = torch.from_numpy(fe._np_extract_fbank_features(wav[None], "cpu")[0][:, :len(wav) // 160]).float()
    torch.testing.assert_close(ours, exact, atol=1e-6, rtol=0)
