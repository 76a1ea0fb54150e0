"""Scripted operators: Lift and PickPlace succeed from reset, after a nudge and after a takeover."""

from __future__ import annotations

import numpy as np
import pytest

import rewind.envs as renvs
from rewind.envs.core.base import ACT_DIM
from rewind.envs.operators.base import OperatorNoise
from rewind.envs.tasks.pick_place import BIN_CENTER
from rewind.envs.wrappers import ObjectNudge

TASKS = ["lift", "pick_place"]


def _run(env, op, seed: int, prefix: int = 0, rng: np.random.Generator | None = None) -> dict:
    env.reset(seed=seed)
    op.reset(np.random.default_rng(seed))
    info: dict = {}
    for t in range(env.unwrapped.max_steps):
        a = rng.uniform(-1, 1, ACT_DIM) if t < prefix else op.act(env)
        _, _, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            break
    return info


@pytest.mark.parametrize("task", TASKS)
def test_operator_succeeds_from_reset(task: str) -> None:
    env = renvs.make_env(task)
    op = renvs.make_operator(task, noise=OperatorNoise())
    results = [_run(env, op, seed)["success"] for seed in range(5)]
    assert all(results), results


@pytest.mark.parametrize("task", TASKS)
def test_operator_succeeds_after_nudge(task: str) -> None:
    env = ObjectNudge(renvs.make_env(task), prob=1.0, window=(4, 12), magnitude=0.04)
    op = renvs.make_operator(task, noise=OperatorNoise())
    infos = [_run(env, op, seed) for seed in range(4)]
    assert all(i["success"] for i in infos), infos


@pytest.mark.parametrize("task", TASKS)
def test_operator_takes_over_after_random_actions(task: str) -> None:
    env = renvs.make_env(task, max_steps=250)
    op = renvs.make_operator(task)
    rng = np.random.default_rng(0)
    infos = [_run(env, op, seed, prefix=int(rng.integers(5, 40)), rng=rng) for seed in range(4)]
    assert all(i["success"] for i in infos), infos


def test_pick_place_stages_progress_in_order_and_fall_back_after_a_drop() -> None:
    env = renvs.make_env("pick_place").unwrapped
    op = renvs.make_operator("pick_place")
    env.reset(seed=3)
    op.reset(np.random.default_rng(0))
    stages = []
    for _ in range(env.max_steps):
        _, _, terminated, _, info = env.step(op.act(env))
        stages.append(info["stage"])
        if info["stage"] == 2 and len(stages) > 1 and stages[-2] == 1:
            snap = env.snapshot()
        if terminated:
            break
    assert info["success"] and stages[-1] == 3
    first = [stages.index(s) for s in (1, 2, 3)]
    assert first == sorted(first), stages
    assert info["stage_name"] == "done"
    # Rewind to the start of `place`, open the fingers high above the bin: the can drops, stage goes back.
    env.restore(snap)
    drop = np.zeros(ACT_DIM)
    drop[4] = 1.0
    for _ in range(3):
        info = env.step(drop)[4]
    assert info["stage"] == 0
    assert np.abs(env.object_pos("can")[:2] - BIN_CENTER).max() < 0.1


def test_pick_place_grasp_survives_violent_shaking() -> None:
    env = renvs.make_env("pick_place", max_steps=1000).unwrapped
    op = renvs.make_operator("pick_place")
    for seed in range(3):
        env.reset(seed=seed)
        op.reset(np.random.default_rng(seed))
        while env.stage() != 1:
            env.step(op.act(env))
        for _ in range(8):
            env.step(np.array([0.0, 0.0, 1.0, 0.0, -1.0]))  # lift clear of the table
        rng = np.random.default_rng(seed)
        for t in range(100):
            a = rng.uniform(-1, 1, ACT_DIM)
            a[4] = -1.0
            if env.gripper_pos()[2] < 0.12:
                a[2] = max(a[2], -0.2)  # shake, but do not slam the can into the table
            env.step(a)
            assert env.can_held(), f"seed {seed}: the can slipped out after {t + 1} shaking steps"
