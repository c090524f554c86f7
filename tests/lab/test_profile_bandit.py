import math

from lab.profile_bandit import Bandit, candidates


def test_the_bandit_tries_every_arm_then_mostly_plays_the_fastest() -> None:
    bandit = Bandit([{"draft_len": n} for n in (4, 8, 12)], seed=0)
    speed = {4: 100.0, 8: 160.0, 12: 120.0}  # tokens/s
    played = []
    for i in range(60):
        arm = bandit.pick()
        played.append(arm.settings["draft_len"])
        jitter = 1 + 0.1 * math.sin(i)  # the prompt's own speed, the same for every arm
        bandit.learn(arm, 64, 64 / (speed[arm.settings["draft_len"]] * jitter))
    assert sorted(played[:3]) == [4, 8, 12]
    assert played[30:].count(8) >= 25


def test_candidates_move_one_setting_at_a_time_and_skip_the_drafters_own_without_its_pass() -> None:
    first = {"draft_len": 8, "row_cost": 0.3, "drafter_pass": "off", "drafter_skip": 0.6}
    values = {"draft_len": (4, 8), "row_cost": (0.3, 0.5), "drafter_skip": (0.4, 0.8)}
    assert candidates(first, values) == [
        first,
        {**first, "draft_len": 4},
        {**first, "row_cost": 0.5},
    ]
