"""``recovery.stall_from_demos``: demo stage durations counted by hand on live episodes, the threshold
rule, one-line errors, and a loop round that uses and records the threshold (read back on resume)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers.loop import loop_config

from rewind.config import ConfigError
from rewind.envs import make_operator
from rewind.envs.config import EnvConfig, build_env
from rewind.loop import run_loop, stall
from rewind.loop.lineage import RECORD, round_dir
from rewind.loop.stall import (
    STALL_FILE,
    demo_stall_threshold,
    episode_stage_durations,
    store_episode_durations,
    store_stage_durations,
    threshold_steps,
)
from rewind.store import ReplayStore, store_spec_for


def _hand_count(live: list[int]) -> list[int]:
    """Steps between the increases of the running maximum of ``live`` (stage at reset, then after each
    step), as the stall trigger counts them: an independent formulation of the rule."""
    best = np.maximum.accumulate(np.asarray(live))
    advances = [0, *(np.flatnonzero(np.diff(best) > 0) + 1)]
    return np.diff(advances).tolist()


def _record_live(store: Path, name: str, seeds: range, max_steps: int | None = None) -> list[list[int]]:
    """Scripted episodes of env ``name`` into ``store`` (states before each action, success from the
    env); returns each successful episode's live stages (``info["stage"]``, with the one at reset)."""
    env = build_env(EnvConfig(name=name, max_steps=max_steps))
    base, operator = env.unwrapped, make_operator(name)
    lives = []
    with ReplayStore.open_or_create(store, store_spec_for(env)) as s:
        for seed in seeds:
            obs, info = env.reset(seed=seed)
            operator.reset(np.random.default_rng(seed))
            steps: dict[str, list] = {"obs": [], "action": [], "state": []}
            live, done = [base.stage()], False
            while not done:
                steps["obs"].append(obs)
                steps["state"].append(base.physics_state())
                steps["action"].append(operator.act(env))
                obs, _, terminated, truncated, info = env.step(steps["action"][-1])
                live.append(info["stage"])
                done = terminated or truncated
            n = len(steps["action"])
            s.add_episode(
                obs={k: np.stack([o[k] for o in steps["obs"]]) for k in steps["obs"][0]},
                actions=np.stack(steps["action"]),
                states=np.stack(steps["state"]),
                sources=["demo"] * n,
                meta={"seed": seed, "policy_version": "test", "success": bool(info["success"])},
            )
            if info["success"]:
                lives.append(live)
    env.close()
    return lives


def test_episode_durations_follow_the_best_stage_and_stop_at_success() -> None:
    # 0 0 0 | 1 1 (drop) 0 1 | 2 2 | success after the last stored state
    assert episode_stage_durations([0, 0, 0, 1, 1, 0, 1, 2, 2], 3, True) == [(0, 3), (1, 4), (2, 2)]
    # a skipped stage is one advance; stored states after success do not count
    assert episode_stage_durations([0, 2, 3, 3, 3], 3, True) == [(0, 1), (2, 1)]
    assert episode_stage_durations([0, 0, 1, 1], 3, False) == []  # a failed episode has no durations


def test_threshold_is_ceil_of_factor_times_percentile() -> None:
    assert threshold_steps([10, 20, 30, 40], 1.5, 50.0) == (38, 25.0)  # ceil(37.5)
    assert threshold_steps([10, 20, 30, 40], 2.0, 100.0) == (80, 40.0)
    assert threshold_steps([50], 1.1, 95.0)[0] == 55  # 1.1 * 50 is 55.000000000000007 in floats


def test_store_durations_match_a_hand_count_on_live_episodes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    lives = _record_live(store, "pick_place", range(2))
    _record_live(store, "pick_place", range(2, 3), max_steps=5)  # cut short: stored as unsuccessful
    env = build_env(EnvConfig(name="pick_place"))
    durations, used, skipped = store_stage_durations(store, env, "pick_place")
    hand = [d for live in lives for d in _hand_count(live)]
    assert (used, skipped) == (2, 1) and len(lives) == 2
    assert [n for _, n in durations] == hand
    assert sum(hand) == sum(len(live) - 1 for live in lives)  # every step until success is in one stage
    got = demo_stall_threshold(store, env, "pick_place", 2.0, 95.0)
    assert got.stall_steps == math.ceil(2.0 * np.percentile(hand, 95)) and got.demo_stages == len(hand)
    assert set(got.by_stage) <= {"grasp", "carry", "place"}
    # only the demos' own steps: the same episodes; only policy steps: none (all 3 skipped)
    assert store_episode_durations(store, env, "pick_place", sources=("demo",))[1] == 1
    with pytest.raises(ConfigError, match=r"no successful episode with a stage advance \(3 skipped\)"):
        store_episode_durations(store, env, "pick_place", sources=("policy",))


def test_no_stage_information_is_one_line_naming_store_and_env(tmp_path: Path, tiny_run) -> None:
    failed = tmp_path / "failed"
    _record_live(failed, "pick_place", range(1), max_steps=3)
    env = build_env(EnvConfig(name="pick_place"))
    with pytest.raises(ConfigError, match=f"demo store {failed} has no stage information for env pick_place"):
        store_stage_durations(failed, env, "pick_place")
    # a Lift store read with a PickPlace env
    with pytest.raises(ConfigError, match=r"for env pick_place: episode \d+ was recorded on rewind/Lift-v0"):
        store_stage_durations(tiny_run["store"], env, "pick_place")


@pytest.mark.parametrize(
    ("recovery", "message"),
    [
        ({"stall_from_demos": 0}, "recovery.stall_from_demos must be null or a factor > 0; got 0"),
        ({"stall_from_demos": -1.5}, "recovery.stall_from_demos must be null or a factor > 0; got -1.5"),
        ({"stall_from_demos": float("nan")}, "recovery.stall_from_demos must be null or a factor > 0"),
        ({"stall_percentile": 101}, r"recovery.stall_percentile must be in \[0, 100\]; got 101"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path: Path, recovery: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        loop_config(tmp_path, recovery=recovery)


def test_monitor_none_accepts_the_demo_stall_as_trigger(tmp_path: Path) -> None:
    node = {"stall_steps": 30, "stall_from_demos": 1.5}
    assert loop_config(tmp_path, monitor={"score": "none"}, recovery=node).recovery.stalls


def test_stall_steps_zero_turns_the_trigger_off_whatever_the_factor(tmp_path: Path, tiny_run) -> None:
    off = {"stall_steps": 0, "stall_from_demos": 1.5}
    with pytest.raises(ConfigError, match="monitor=none leaves nothing to trigger an intervention"):
        loop_config(tmp_path, monitor={"score": "none"}, recovery=off)
    out = tmp_path / "loop"
    summary = run_loop(loop_config(out, tiny_run, rounds=1, recovery=off))
    coll = json.loads((round_dir(out, 1) / RECORD).read_text())["collection"]
    assert coll["stall_steps"] == 0 and coll["stalls"] == 0 and "stall_from_demos" not in coll
    assert not (out / STALL_FILE).exists() and "stall_from_demos" not in summary


def test_a_loop_round_uses_records_and_resumes_the_threshold(
    tmp_path: Path, tiny_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "loop"
    cfg = loop_config(out, tiny_run, rounds=1, recovery={"stall_steps": 30, "stall_from_demos": 1.5})
    summary = run_loop(cfg)
    env = build_env(EnvConfig(name="lift"))
    durations, _, _ = store_stage_durations(tiny_run["store"], env, "lift")
    want = math.ceil(1.5 * np.percentile([n for _, n in durations], 95))
    saved = json.loads((out / STALL_FILE).read_text())
    coll = json.loads((round_dir(out, 1) / RECORD).read_text())["collection"]
    assert saved["stall_steps"] == want and saved["factor"] == 1.5 and saved["percentile"] == 95.0
    assert saved["demo_stages"] == len(durations) and saved["demo_episodes"] == 4
    assert coll["stall_steps"] == want and coll["stall_from_demos"] == saved
    assert summary["stall_from_demos"] == saved
    # the tiny policy never grasps within the threshold: every episode stalls and is taken over
    assert coll["stalls"] >= coll["interventions"] == cfg.episodes_per_round
    # resumed (everything done), the loop reads stall.json instead of computing it again
    monkeypatch.setattr(stall, "demo_stall_threshold", lambda *a, **k: pytest.fail("recomputed"))
    assert run_loop(cfg)["stall_from_demos"] == saved
