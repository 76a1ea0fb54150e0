"""Operator evaluation (rewind.envs.evaluation): records, summaries, Wilson interval, determinism."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
from helpers.envs import require_task

from rewind.envs.evaluation import OperatorEpisode, TakeoverConfig, run_from_reset, run_takeover, summarize
from rewind.utils.stats import wilson_interval

SEEDS = (0, 1)
SHORT = TakeoverConfig(min_prefix=3, max_prefix=20)


def _wilson_by_hand(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [
        (8, 10, (0.4902, 0.9433)),
        (200, 200, (0.9812, 1.0)),
        (0, 20, (0.0, 0.1611)),
        (195, 200, (0.9428, 0.9893)),
    ],
)
def test_wilson_interval_hand_computed(k: int, n: int, expected: tuple[float, float]) -> None:
    lo, hi = wilson_interval(k, n)
    assert (lo, hi) == pytest.approx(expected, abs=1e-4)
    assert (lo, hi) == pytest.approx(_wilson_by_hand(k, n), abs=1e-12)


def test_from_reset_records(task: str) -> None:
    require_task(task)
    recs = run_from_reset(task, SEEDS)
    assert [r.seed for r in recs] == list(SEEDS)
    for r in recs:
        assert r.protocol == "reset" and r.success and r.final_stage == "done"
        assert 0 < r.length and r.prefix_steps == 0 and r.stage_at_handover is None
        assert r.failure_cause() is None and not r.out_of_reach and r.sim_error is None


def test_takeover_records_and_summary(task: str) -> None:
    require_task(task)
    recs = run_takeover(task, SEEDS, SHORT)
    for r in recs:
        assert r.protocol == "takeover" and r.prefix_kind in ("random", "noisy")
        assert 0 < r.prefix_steps <= SHORT.max_prefix
        assert r.stage_at_handover is not None
        assert r.done_at_handover == (r.length == 0)
        assert set(r.perturbations) <= {"object_nudge", "grasp_slip", "gripper_push"}
    s = summarize(recs)
    assert s["episodes"] == len(SEEDS) and sum(s["stage_at_handover"].values()) == len(SEEDS)
    assert s["successes"] + sum(s["failure_causes"].values()) == len(SEEDS)
    assert s["wilson95"] == [round(x, 4) for x in wilson_interval(s["successes"], len(SEEDS))]


def test_takeover_depends_only_on_the_seed() -> None:
    require_task("pick_place")
    a = run_takeover("pick_place", [5, 7], SHORT)
    b = run_takeover("pick_place", [7], SHORT)
    assert asdict(a[1]) == asdict(b[0])
    assert asdict(run_takeover("pick_place", [5], SHORT)[0]) == asdict(a[0])


def test_summary_failure_causes() -> None:
    recs = [
        OperatorEpisode(0, "reset", True, 40, "done"),
        OperatorEpisode(1, "reset", False, 90, "carry"),
        OperatorEpisode(2, "reset", False, 90, "grasp", out_of_reach=True),
        OperatorEpisode(3, "reset", False, 12, "done", sim_error="boom"),
    ]
    s = summarize(recs)
    assert s["failure_causes"] == {"timeout:carry": 1, "out_of_reach": 1, "sim_error": 1}
    assert (s["successes"], s["mean_len"], s["max_len"], s["failed_object_out_of_reach"]) == (1, 40.0, 40, 1)
    assert s["failed_seeds"] == [1, 2, 3] and "stage_at_handover" not in s


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="max_prefix"):
        TakeoverConfig(min_prefix=10, max_prefix=5)
    with pytest.raises(ValueError, match="burst_prob"):
        TakeoverConfig(burst_prob=1.5)
