"""Decoding profiles (model/profile.py) and `tune` (model/tune.py) on the bundled model."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dllm_voice.model import profile as profiles
from dllm_voice.model import tune
from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM
from dllm_voice.model.errors import ModelLoadError
from lab import prompt_bulk, prompts


def test_tuning_prompts_are_in_no_training_set() -> None:
    seen = {
        m["content"].strip().lower()
        for c in [*prompts.conversations("all"), *prompt_bulk.conversations()]
        for m in c
        if m["role"] == "user"
    }
    assert len(set(tune.TUNE_PROMPTS)) == len(tune.TUNE_PROMPTS) == 24
    assert not [q for q in tune.TUNE_PROMPTS if q.lower() in seen]


def test_a_profile_sets_what_the_config_leaves_at_its_default(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    profiles.write(path, {"model": "m"}, {"draft_len": 6, "drafter_pass": "on"}, {})
    p = profiles.read(path)
    cfg = p.apply(LMConfig())
    assert (cfg.draft_len, cfg.drafter_pass) == (6, "on")
    mine = p.apply(LMConfig(draft_len=9))  # the user's own value wins
    assert (mine.draft_len, mine.drafter_pass) == (9, "on")


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"decoder": "ar"}, "not a decoding setting"),
        ({"draft_len": 0}, "out of its range"),
        ({"drafter_pass": "maybe"}, "out of its range"),
        ({"row_cost": "cheap"}, "out of its range"),
        ({"draft_branch": True}, "out of its range"),
    ],
)
def test_a_bad_profile_is_one_line(tmp_path: Path, settings: dict, why: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"key": {}, "settings": settings}))
    with pytest.raises(ModelLoadError, match=why):
        profiles.read(path)
    path.write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read"):
        profiles.read(path)
    with pytest.raises(ModelLoadError, match="no such file"):
        profiles.find(LMConfig(profile=str(tmp_path / "absent.json")), None)  # type: ignore[arg-type]


def test_tune_writes_a_lossless_profile_that_lm_load_then_uses(
    lm: LM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A toy-sized search (2 prompts, 12 tokens, 2 settings) end to end: the costs measured,
    every candidate checked against ar, the fastest written under this machine's key, and the
    next LM.load (lm.profile '') decoding with it; lm.profile none ignores it."""
    small = {"draft_len": (4, 8), "lookup_ngram": (0, 8)}
    monkeypatch.setattr(tune, "space", lambda lm, costs: small)
    report, log = io.StringIO(), io.StringIO()
    assert tune.run(lm.cfg, n_prompts=2, max_new=12, rounds=1, report=report, log=log) == 0
    key = profiles.machine_key(lm.model, "")
    path = profiles.default_path(key)
    data = json.loads(path.read_text())
    assert data["key"] == key and set(data["settings"]) == set(profiles.TUNED)
    assert data["costs"]["row_cost"] >= 0 and "1" in data["costs"]["forward_ms"]
    assert data["settings"]["draft_len"] in (4, 8, LMConfig.draft_len)  # the start is a candidate
    assert "Pareto front" in report.getvalue() and "chosen: draft_len=" in report.getvalue()
    assert "NOT EXACT" not in log.getvalue()
    loaded = LM.load(LMConfig())
    assert loaded.profile is not None and loaded.profile.path == path
    assert loaded.cfg.draft_len == data["settings"]["draft_len"]
    session = loaded.session()
    session.configure(LMConfig(max_new_tokens=20))  # a session's own settings keep it
    assert session.cfg.draft_len == data["settings"]["draft_len"]
    assert LM.load(LMConfig(profile="none")).profile is None
    path.unlink()


def test_tune_keeps_the_untuned_settings_unless_a_finalist_beats_them_head_to_head(
    lm: LM, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A finalist whose prompt-by-prompt gain over the untuned settings is within MARGIN is
    noise: the untuned settings are written instead, whatever its first timing said."""
    monkeypatch.setattr(tune, "space", lambda lm, costs: {"draft_len": (4, 8)})
    gains: list[dict] = []

    def versus(self: tune.Search, settings: dict, base: dict, rounds: int) -> float:
        gains.append(settings)
        return 1.0 + tune.MARGIN / 2

    monkeypatch.setattr(tune.Search, "versus", versus)
    out = tmp_path / "profile.json"
    report, log = io.StringIO(), io.StringIO()
    assert (
        tune.run(lm.cfg, n_prompts=2, max_new=8, rounds=1, out=str(out), report=report, log=log)
        == 0
    )
    data = json.loads(out.read_text())
    assert gains and all(g["draft_len"] != data["settings"]["draft_len"] for g in gains)
    assert data["settings"]["draft_len"] == LMConfig.draft_len and data["paired_vs_untuned"] == 1.0
