#!/usr/bin/env python
"""Runs INSIDE the isolated reference venv (.venv-qwen-tts: qwen-tts 0.1.1, transformers 4.57.3), never in the
project's environment. Runs the reference codec (qwen_tts.Qwen3TTSTokenizer on a codec directory written by
aura_omni.testing.tiny_codec) and the reference ECAPA speaker encoder (qwen-tts's Qwen3TTSSpeakerEncoder built
from a config, loaded with given weights, run through Qwen3TTSForConditionalGeneration.extract_speaker_embedding)
on inputs from an .npz, for tests/parity/test_qwen3_tts_codec_parity.py.

Usage: python codec_reference.py --codec DIR --inputs IN.npz --out OUT.npz
                                 [--speaker-config SE.json --speaker-weights SE.safetensors]
Input keys (by prefix) -> output keys:
  decode_<name>    codes [T,16] or [B,T,16] (-1 right padding) -> decode_<name>.<row> waveform
  encode_<name>    mono audio; sr from sr_encode_<name> (default 24000) -> encode_<name> codes [T,16]
  latents_<name>   24 kHz mono audio -> latents_<name> [hidden, frames]: the Mimi encoder's output before the RVQ,
                   computed with the steps of transformers 4.57 MimiModel._encode_frame
  xvector_<name>   mono audio; sr from sr_xvector_<name> (default 24000), resampled to 24 kHz with librosa like
                   Qwen3TTSModel.create_voice_clone_prompt -> xvector_<name> [enc_dim], resampled_<name> (24 kHz)
"""

import argparse
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_reference import _stub_modules  # noqa: E402  (torchaudio / sox stubs; run_reference applies them on import)

_stub_modules()

import librosa  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

SPEAKER_SAMPLE_RATE = 24000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--codec", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--speaker-config")
    ap.add_argument("--speaker-weights")
    args = ap.parse_args()

    from qwen_tts import Qwen3TTSTokenizer

    torch.set_grad_enabled(False)
    inputs = dict(np.load(args.inputs))
    out: dict[str, np.ndarray] = {}
    tok = Qwen3TTSTokenizer.from_pretrained(args.codec, device_map="cpu")
    speaker = _speaker_encoder(args.speaker_config, args.speaker_weights) if args.speaker_config else None

    for key, value in inputs.items():
        op, _, name = key.partition("_")
        if op == "decode":
            wavs, sr = tok.decode({"audio_codes": torch.from_numpy(value).long()})
            assert sr == 24000
            for i, w in enumerate(wavs):
                out[f"{key}.{i}"] = np.asarray(w, dtype=np.float32)
        elif op == "encode":
            sr = int(inputs.get(f"sr_{key}", 24000))
            enc = tok.encode(value.astype(np.float32), sr=sr)
            out[key] = enc.audio_codes[0].cpu().numpy().astype(np.int64)
        elif op == "latents":
            mimi = tok.model.encoder
            hidden = mimi.encoder(torch.from_numpy(value.astype(np.float32))[None, None])
            hidden = mimi.encoder_transformer(hidden.transpose(1, 2), return_dict=True).last_hidden_state
            out[key] = mimi.downsample(hidden.transpose(1, 2))[0].numpy()
        elif op == "xvector":
            if speaker is None:
                raise SystemExit("xvector inputs need --speaker-config and --speaker-weights")
            sr = int(inputs.get(f"sr_{key}", SPEAKER_SAMPLE_RATE))
            wav = value.astype(np.float32)
            if sr != SPEAKER_SAMPLE_RATE:  # as Qwen3TTSModel.create_voice_clone_prompt does
                wav = librosa.resample(y=wav, orig_sr=sr, target_sr=SPEAKER_SAMPLE_RATE)
            out[f"resampled_{name}"] = wav.astype(np.float32)
            out[key] = speaker(wav).float().cpu().numpy()
    np.savez(args.out, **out)
    print(json.dumps({k: list(v.shape) for k, v in out.items()}))


def _speaker_encoder(config_path: str, weights_path: str):
    """The reference ECAPA with our weights, run by the reference's own extract_speaker_embedding."""
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration, Qwen3TTSSpeakerEncoder
    from safetensors.torch import load_file

    cfg = json.loads(Path(config_path).read_text())
    encoder = Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(**cfg)).eval()
    encoder.load_state_dict(load_file(weights_path), strict=True)
    owner = types.SimpleNamespace(speaker_encoder=encoder, device=torch.device("cpu"), dtype=torch.float32)
    return lambda wav: Qwen3TTSForConditionalGeneration.extract_speaker_embedding(owner, wav, SPEAKER_SAMPLE_RATE)


if __name__ == "__main__":
    main()
