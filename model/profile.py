"""Decoding profiles: the hybrid decoder's settings searched for one model on one machine by
`python main.py tune` (model/tune.py), loaded by LM.load by default (lm.profile '').

A profile is a JSON file of lm.* values (`TUNED`) with the key it was measured under: the model
(file name and size), the CPU kernel or GPU, the machine and the thread count. LM.load looks for
the file of its own key; a value the user's config sets away from its default wins over the
profile's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from dllm_voice.model.config import LMConfig
from dllm_voice.model.drafts import model_identity, user_cache
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.transformer import Transformer

log = logging.getLogger(__name__)

# The lm.* settings a profile may set: the shape of a step's draft tree and what drafts it.
TUNED = ("draft_len", "draft_branch", "row_cost", "lookup_ngram", "drafter_pass", "drafter_skip")
PROFILES_ENV = "DLLM_VOICE_PROFILES"  # the folder of profiles, instead of the user's cache
Value = int | float | str  # a setting's value, or a part of a profile's key
Settings = dict[str, Value]


@dataclass(frozen=True)
class Profile:
    key: Settings
    settings: Settings
    path: Path

    def apply(self, cfg: LMConfig) -> LMConfig:
        """cfg with the profile's values wherever cfg keeps the default."""
        defaults = {f.name: f.default for f in fields(LMConfig)}
        keep = {k: v for k, v in self.settings.items() if getattr(cfg, k) == defaults[k]}
        return dataclasses.replace(cfg, **keep) if keep else cfg


def profiles_dir() -> Path:
    return user_cache(PROFILES_ENV, "profiles")


def _cpu_name() -> str:
    """The first CPU's model name, family and model ("AMD EPYC / 25 / 1"): KVM guests often
    show the bare vendor line, which the family and model tell apart."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    info = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in first.splitlines())}
    return " / ".join(info.get(p) or "?" for p in ("model name", "cpu family", "model"))


def machine_key(model: Transformer, model_path: str) -> Settings:
    """What a profile's figures depend on: model, kernel, machine, threads."""
    name, size = model_identity(model_path)
    dev = model.embed.weight.device
    if dev.type == "cuda":
        machine, kernel = torch.cuda.get_device_name(dev), "cuda"
    else:
        machine, kernel = f"{_cpu_name()} x{os.cpu_count()}", model.cpu_kernel
    return {
        "model": name,
        "bytes": size,
        "kernel": kernel,
        "machine": machine,
        "threads": torch.get_num_threads(),
    }


def default_path(key: Settings) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return profiles_dir() / f"{Path(key['model']).stem}-{digest}.json"


def check(settings: Settings, where: Path) -> Settings:
    """The settings, each a TUNED lm.* key whose value passes its setting's range; else one
    ModelLoadError line."""
    meta = {f.name: (f.type, f.metadata) for f in fields(LMConfig)}
    for k, v in settings.items():
        if k not in TUNED:
            raise ModelLoadError(f"{where}: {k!r} is not a decoding setting ({', '.join(TUNED)})")
        kind, m = meta[k]
        want = {"int": int, "float": (int, float), "str": str}[str(kind)]
        bad = isinstance(v, bool) or not isinstance(v, want)
        bad = bad or ("choices" in m and v not in m["choices"])
        bad = bad or ("min" in m and v < m["min"]) or ("max" in m and v > m["max"])
        if bad:
            raise ModelLoadError(f"{where}: lm.{k} = {v!r} is out of its range")
    return settings


def read(path: Path) -> Profile:
    try:
        data = json.loads(path.read_text())
        key, settings = data["key"], data["settings"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"lm.profile: cannot read {path}: {exc}") from None
    return Profile(key, check(dict(settings), path), path)


def write(path: Path, key: Settings, settings: Settings, report: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "settings": settings, **report}, indent=1) + "\n")
    tmp.replace(path)


def find(cfg: LMConfig, model: Transformer) -> Profile | None:
    """The profile lm.profile names: '' = this machine's for the model if tune wrote one."""
    if cfg.profile == "none":
        return None
    if cfg.profile:
        path = Path(cfg.profile).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"lm.profile: no such file: {path}")
        return read(path)
    path = default_path(machine_key(model, cfg.path))
    return read(path) if path.is_file() else None
