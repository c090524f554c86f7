"""bench/lm.py: the lossy dial's curve and its area (accuracy under parallelism)."""

from __future__ import annotations

import pytest

from bench.lm import parallel_curve


def run(tpf: float, agreement: float) -> dict:
    return {"median": {"tokens_per_forward_pooled": tpf, "token_agreement_vs_ar": agreement}}


def test_the_area_weighs_agreement_lost_more_than_tokens_gained() -> None:
    report = {
        "ar": run(1.0, 1.0),
        "hybrid": run(1.5, 1.0),
        "parallel@0.9": run(2.0, 0.95),
        "parallel@0.5": run(4.0, 0.10),
    }
    curve = parallel_curve(report)
    assert curve is not None
    assert curve["points"]["parallel@0.5"] == [4.0, 10.0]
    # ar -> hybrid: 0.5 x 100; hybrid -> 0.9: 0.5 x (100 + 95 e^-0.15) / 2; 0.9 -> 0.5: the
    # 10 % point weighs 10 e^-2.7, next to nothing.
    w95, w10 = 95 * 2.718281828**-0.15, 10 * 2.718281828**-2.7
    assert curve["aup"] == pytest.approx(50 + 0.25 * (100 + w95) + (w95 + w10), abs=0.01)
    assert curve["best_threshold"] == 0.9  # 4 tokens/forward at 10 % agreement is worth less


def test_no_curve_without_ar_and_a_parallel_run() -> None:
    assert parallel_curve({"ar": run(1.0, 1.0), "hybrid": run(1.5, 1.0)}) is None
    assert parallel_curve({"parallel@0.9": run(2.0, 0.9)}) is None
