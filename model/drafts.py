"""Where a model's drafts live: the block drafter and n-gram store `python -m lab.drafts` builds
for the loaded model, in one folder per model file under the user's cache ($DLLM_VOICE_DRAFTS
instead, where set).

lm.drafter / lm.ngram '' load that model's built file where there is one; otherwise the files
shipped in model/adapters/ for the bundled model, and nothing for another model (they were made
from the bundled model's weights and tokenizer).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from dllm_voice.model.drafter import DEFAULT_ADAPTER
from dllm_voice.model.loader import default_model_path
from dllm_voice.model.ngram import DEFAULT_STORE

DRAFTS_ENV = "DLLM_VOICE_DRAFTS"
FILES = {"drafter": DEFAULT_ADAPTER.name, "ngram": DEFAULT_STORE.name}


def user_cache(env: str, name: str) -> Path:
    """$env where set, else the user's cache folder's dllm-voice/<name>."""
    if os.environ.get(env):
        return Path(os.environ[env])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "dllm-voice" / name


@functools.cache  # every hybrid answer resolves its drafts: one look at the files per process
def model_identity(lm_path: str) -> tuple[str, int]:
    """lm.path's file (or folder) name and size in bytes: what tells two models apart here."""
    path = Path(lm_path) if lm_path else default_model_path()
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return path.name, sum(p.stat().st_size for p in files if p.is_file())


def model_dir(lm_path: str) -> Path:
    """The folder of lm.path's drafts: <name>-<hash of name and size>."""
    name, size = model_identity(lm_path)
    digest = hashlib.sha1(f"{name}:{size}".encode()).hexdigest()[:12]
    return user_cache(DRAFTS_ENV, "drafts") / f"{Path(name).stem}-{digest}"


def resolve(spec: str, lm_path: str, kind: str) -> str:
    """lm.drafter (kind "drafter") or lm.ngram ("ngram") as the file spec to load: a set value
    as it is; '' = the file lab.drafts built for this model, else the bundled one for the
    bundled model ('') and none for another."""
    if spec:
        return spec
    built = model_dir(lm_path) / FILES[kind]
    if built.is_file():
        return str(built)
    return "none" if lm_path else ""
