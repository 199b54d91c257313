"""Qwen3-ASR output format and language names.

The model writes `language {Name}<asr_text>{transcript}` then <|im_end|>; `language None` means it
heard no speech. With a forced language the prompt already ends in `language X<asr_text>`, so the
output is the transcript alone.
"""

import unicodedata
from dataclasses import dataclass

# Canonical names (config.json `support_languages`) and the ISO 639 codes clients send (OpenAI `language`).
LANGUAGE_CODES = {
    "zh": "Chinese", "en": "English", "yue": "Cantonese", "ar": "Arabic", "de": "German", "fr": "French",
    "es": "Spanish", "pt": "Portuguese", "id": "Indonesian", "it": "Italian", "ko": "Korean", "ru": "Russian",
    "th": "Thai", "vi": "Vietnamese", "ja": "Japanese", "tr": "Turkish", "hi": "Hindi", "ms": "Malay",
    "nl": "Dutch", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "pl": "Polish", "cs": "Czech",
    "fil": "Filipino", "fa": "Persian", "el": "Greek", "ro": "Romanian", "hu": "Hungarian", "mk": "Macedonian",
}
SUPPORTED_LANGUAGES = tuple(LANGUAGE_CODES.values())
NO_SPEECH = "none"  # `language None<asr_text>`: the model heard no speech


class UnsupportedLanguageError(ValueError):
    """A forced language Qwen3-ASR does not know (the server answers 400)."""


@dataclass(frozen=True)
class Transcript:
    language: str  # "English", "Chinese,English" for mixed pieces, "" when unknown or silent
    text: str


def normalize_language(value: str | None, supported: tuple[str, ...] | list[str] = SUPPORTED_LANGUAGES) -> str | None:
    """'en', 'EN', 'english', 'English' -> 'English'; None or '' -> None (auto-detect)."""
    if value is None or not str(value).strip():
        return None
    key = str(value).strip()
    name = LANGUAGE_CODES.get(key.lower()) or next((s for s in supported if s.lower() == key.lower()), None)
    if name is None or name not in supported:
        raise UnsupportedLanguageError(
            f"language {value!r} is not supported; use one of {', '.join(supported)} or their ISO 639-1 codes")
    return name


def parse_asr_output(raw: str, forced_language: str | None = None) -> Transcript:
    """Decoded generation (special tokens skipped, `<asr_text>` kept) -> Transcript."""
    if forced_language:
        return Transcript(forced_language, raw.strip())
    raw = (raw or "").strip()
    if not raw:
        return Transcript("", "")
    if "<asr_text>" not in raw:
        return Transcript("", raw)
    meta, text = raw.split("<asr_text>", 1)
    language = ""
    for line in meta.splitlines():  # the meta part may span lines; its first non-empty line counts
        line = line.strip()
        if line:
            language = line[len("language "):].strip() if line.lower().startswith("language ") else line
            break
    if language.lower() == NO_SPEECH:
        return Transcript("", "")
    return Transcript(language, text.strip())


def merge_languages(languages: list[str]) -> str:
    """Languages of consecutive pieces, consecutive repeats and blanks dropped: 'Chinese,English'."""
    out: list[str] = []
    for lang in languages:
        if lang and (not out or out[-1] != lang):
            out.append(lang)
    return ",".join(out)


def _is_cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def join_texts(texts: list[str]) -> str:
    """Join the transcripts of consecutive pieces: no separator between CJK text, one space otherwise."""
    out = ""
    for t in (t.strip() for t in texts):
        if not t:
            continue
        if out and not (_is_cjk(out[-1]) and _is_cjk(t[0])):
            out += " "
        out += t
    return out
