"""The drafter's architecture search: its score, its front, and a toy run end to end."""

from __future__ import annotations

import json

import pytest

from lab import drafter_search
from lab.drafter_search import CANDIDATES, front, score
from lab.train_drafter import parser


def test_candidates_are_real_training_options() -> None:
    for name, options in CANDIDATES.items():
        parser().parse_args(options)  # a misspelt option would exit
        assert len(options) <= 2, name  # one change from the shipped architecture each


def test_score_is_tokens_per_step_over_the_step_cost() -> None:
    ev = {"tokens_per_step": 1.6, "tokens_per_step_lookup": 1.8, "acc1": 0.5}
    s = score(ev, {"one_ms": 10.0, "verify_ms": 15.0, "pass_ms": 3.0})
    assert s["step_cost"] == 1.8 and s["pass"] == 0.3
    assert s["score"] == 1.0 and s["rows_free"] == round(1.8 / 1.3, 3)


def test_the_front_keeps_what_nothing_beats_on_both_counts() -> None:
    r = {
        "cheap": {"tokens_per_step_lookup": 1.5, "step_cost": 1.5},
        "good": {"tokens_per_step_lookup": 1.9, "step_cost": 2.0},
        "worse": {"tokens_per_step_lookup": 1.7, "step_cost": 2.1},
        "tie": {"tokens_per_step_lookup": 1.5, "step_cost": 1.6},
    }
    assert front(r) == ["cheap", "good"]


@pytest.mark.slow
def test_a_toy_search_trains_scores_and_resumes(lm, tmp_path, capsys) -> None:
    from lab import gen_data

    data = tmp_path / "data"
    gen_data.main(["--out", str(data), "--rounds", "1", "--batch", "4", "--max-new-tokens", "8",
                   "--max-batches", "2", "--no-hidden"])  # fmt: skip
    args = ["--data", str(data), "--only", "as shipped,MLP 384", "--target-tokens", "20",
            "--out-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "r.json"),
            "--eval-answers", "2", "--reps", "2", "--threads", "1"]  # fmt: skip
    drafter_search.main(args)
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(report["results"]) == {"as shipped", "MLP 384"}
    assert report["best"] in report["results"] and report["front"]
    for r in report["results"].values():  # (toy data: its few answers may hold none held out)
        assert r["step_cost"] > 1 and r["pass"] > 0 and r["train_s"] >= 0
    capsys.readouterr()
    drafter_search.main(args)  # both trained: nothing is trained again
    assert "training" not in capsys.readouterr().out
