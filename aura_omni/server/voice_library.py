"""Registered voices by name, kept in a directory (vLLM-Omni's `custom_voice_dir`) or in memory only.

Each voice is two files, named by its lower-cased name (names are `VOICE_NAME_PATTERN`, safe as file names):

    <name>.<token>.safetensors  the clone prompt's tensors: `x_vector` [H] float32, `ref_codes` [F, 16] int64 (ICL only)
    <name>.json                 its card (name, created_at, ref_text, x_vector_only_mode, ...) and the tensors' file

Both are written to a temporary file and renamed into place (os.replace), tensors first: a voice exists once its
JSON does, whole. Every process pointed at the directory serves the same voices: a lookup that misses, a listing,
or any lookup after the directory changed (its mtime) re-reads it, loading only files it has not seen. The token
keeps a re-registration (after a delete) from overwriting tensors a reader of the old JSON may still open.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from ..stages.tts import VoiceClonePrompt
from .protocol import VoiceCard

log = logging.getLogger(__name__)
FORMAT = 1  # the JSON's `format`: bump when the layout changes
CODE_GROUPS, CODEBOOK_SIZE = 16, 2048  # Qwen3-TTS-Tokenizer-12Hz: codes per frame, entries per codebook
FORCED_RESCAN_S = 0.2  # an unchanged directory is re-read on a miss at most this often
ORPHAN_AGE_S = 300.0  # tensors no card names, older than this, are a crash's leftovers: removed at start


@dataclass
class RegisteredVoice:
    card: VoiceCard
    prompt: Any  # stages.tts.VoiceClonePrompt (x-vector, and ref codes in ICL mode)


class VoiceExists(Exception):
    """Another process registered a voice of this name meanwhile."""


def _write_atomic(path: Path, write, exclusive: bool = False) -> None:
    """`write(tmp_path)`, then rename over `path`: readers see the old file or the whole new one. `exclusive`: link
    instead, which fails when `path` exists (VoiceExists), so of two processes creating one name only one wins;
    a filesystem without hard links falls back to the rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
                return
            except FileExistsError:
                raise VoiceExists(path.stem) from None
            except OSError:  # no hard links here (some network and FUSE filesystems)
                if path.exists():
                    raise VoiceExists(path.stem) from None
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def _check_tensors(x_vector, ref_codes, x_vector_only: bool | None) -> None:
    """A voice file edited or damaged by hand must not reach a stage as a bad index or a NaN: refuse it here."""
    if x_vector is None or x_vector.ndim != 1 or not x_vector.is_floating_point() or not x_vector.isfinite().all():
        raise ValueError("x_vector must be finite floats of one dimension")
    if ref_codes is None:
        if not x_vector_only:
            raise ValueError("an in-context voice needs ref_codes")
        return
    if (ref_codes.ndim != 2 or ref_codes.shape[1] != CODE_GROUPS or ref_codes.is_floating_point()
            or (ref_codes.numel() and not 0 <= int(ref_codes.min()) <= int(ref_codes.max()) < CODEBOOK_SIZE)):
        raise ValueError(f"ref_codes must be integer codes [frames, {CODE_GROUPS}] in [0, {CODEBOOK_SIZE})")


class VoiceLibrary:
    """Cloned voices by lower-cased name; `root` None keeps them in memory only. Safe to use from the event loop and
    the model thread; file reads and writes are small (an x-vector and a few seconds of codes)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else None
        self._voices: dict[str, RegisteredVoice] = {}
        self._seen: dict[str, int] = {}  # key -> mtime_ns of the JSON it was loaded from
        self._dir_mtime = -1
        self._scanned_at = -FORCED_RESCAN_S  # time.monotonic() of the last re-read
        self._lock = threading.Lock()
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_orphans()
            self._rescan()
            log.info("voice library %s: %d voices", self.root, len(self._voices))

    # ------------------------------------------------------------------ registry
    def get(self, name: str) -> RegisteredVoice | None:
        key = name.lower()
        with self._lock:
            self._rescan(force=key not in self._voices)
            return self._voices.get(key)

    def add(self, voice: RegisteredVoice) -> None:
        """Keep `voice` (in its directory too); VoiceExists when another process registered the name first."""
        key = voice.card.name.lower()
        stamp = self._write(key, voice) if self.root is not None else None
        with self._lock:
            self._voices[key] = voice
            if stamp is not None:
                self._seen[key] = stamp  # its own card: not read back from the directory

    def remove(self, name: str) -> bool:
        key = name.lower()
        with self._lock:
            self._rescan(force=True)
            known = self._voices.pop(key, None) is not None
            self._seen.pop(key, None)
        if self.root is None:
            return known
        card = self.root / f"{key}.json"
        tensors = self._tensor_file(card)
        removed = _unlink(card)  # the card first: from here on no process loads the voice
        if tensors is not None:
            _unlink(self.root / tensors)
        return known or removed

    def cards(self) -> list[VoiceCard]:
        with self._lock:
            self._rescan(force=True)
            return [v.card for v in self._voices.values()]

    # ------------------------------------------------------------------ files
    def _write(self, key: str, voice: RegisteredVoice) -> int:
        """The voice's files; returns its card's mtime_ns."""
        prompt = voice.prompt
        tensors = {"x_vector": prompt.x_vector.detach().float().cpu().contiguous()}
        if prompt.ref_codes is not None:
            tensors["ref_codes"] = prompt.ref_codes.detach().long().cpu().contiguous()
        tensor_name = f"{key}.{secrets.token_hex(6)}.safetensors"
        _write_atomic(self.root / tensor_name, lambda p: save_file(tensors, str(p), metadata={"format": str(FORMAT)}))
        meta = {"format": FORMAT, "tensors": tensor_name, "card": voice.card.model_dump(exclude_none=True)}
        card_text = json.dumps(meta, indent=1)
        try:
            _write_atomic(self.root / f"{key}.json", lambda p: p.write_text(card_text, encoding="utf-8"),
                          exclusive=True)
        except BaseException:
            _unlink(self.root / tensor_name)  # no card names it
            raise
        return (self.root / f"{key}.json").stat().st_mtime_ns

    def _tensor_file(self, card: Path) -> str | None:
        try:
            name = json.loads(card.read_text(encoding="utf-8")).get("tensors")
        except (OSError, ValueError, AttributeError):
            return None
        return name if isinstance(name, str) and "/" not in name and "\\" not in name else None

    def _read(self, card_path: Path) -> RegisteredVoice:
        meta = json.loads(card_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, this build reads {FORMAT}")
        card = VoiceCard.model_validate(meta["card"])
        if card.name.lower() != card_path.stem:
            raise ValueError(f"card names {card.name!r}")
        tensors = load_file(str(self.root / self._tensor_file(card_path)))
        _check_tensors(tensors.get("x_vector"), tensors.get("ref_codes"), card.x_vector_only_mode)
        prompt = VoiceClonePrompt(ref_codes=tensors.get("ref_codes"), x_vector=tensors["x_vector"],
                                  ref_text=card.ref_text, x_vector_only=bool(card.x_vector_only_mode))
        return RegisteredVoice(card=card, prompt=prompt)

    def _rescan(self, force: bool = False) -> None:
        """Bring the in-memory voices up to the directory (under the lock): new and rewritten cards are loaded, cards
        gone are dropped. A no-op when memory only, or when the directory has not changed and `force` is unset. A
        forced re-read (a miss, a listing) of an unchanged directory happens at most every FORCED_RESCAN_S: the
        mtime tick is coarse, but a stream of unknown names must not list the directory for each."""
        if self.root is None:
            return
        try:
            mtime = self.root.stat().st_mtime_ns
        except OSError:
            return
        now = time.monotonic()
        if mtime == self._dir_mtime and (not force or now - self._scanned_at < FORCED_RESCAN_S):
            return
        self._dir_mtime, self._scanned_at = mtime, now
        on_disk: dict[str, int] = {}
        for entry in os.scandir(self.root):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                try:
                    on_disk[entry.name[:-5]] = entry.stat().st_mtime_ns
                except FileNotFoundError:  # deleted meanwhile
                    pass
        for key in [k for k in self._voices if k not in on_disk]:
            del self._voices[key]
            self._seen.pop(key, None)
        for key, stamp in on_disk.items():
            if self._seen.get(key) == stamp:
                continue
            try:
                self._voices[key] = self._read(self.root / f"{key}.json")
                self._seen[key] = stamp
            except FileNotFoundError:  # deleted between the listing and the read
                self._voices.pop(key, None)
            except Exception as e:  # a damaged file must not take the library (or the server) down
                if self._seen.get(key) != -stamp:
                    log.warning("voice library %s: skipping %s.json: %s", self.root, key, e)
                self._seen[key] = -stamp  # warned once per version of the file

    def _remove_orphans(self) -> None:
        named = {self._tensor_file(p) for p in self.root.glob("*.json")}
        now = time.time()
        for path in self.root.glob("*.safetensors"):
            if path.name not in named:
                try:
                    if now - path.stat().st_mtime > ORPHAN_AGE_S:
                        path.unlink()
                except FileNotFoundError:
                    pass
        for path in self.root.glob(".*.tmp"):
            try:
                if now - path.stat().st_mtime > ORPHAN_AGE_S:
                    path.unlink()
            except FileNotFoundError:
                pass
