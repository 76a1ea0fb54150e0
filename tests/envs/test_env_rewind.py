"""Exact rewind: snapshot/restore and set_physics_state reproduce observations bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers.envs import make, make_operator, obs_equal

from rewind.envs.core.base import ACT_DIM
from rewind.envs.operators.base import OperatorNoise

N_STATES = 30
K_STEPS = 8


def _drive(env, op, rng: np.random.Generator, n: int) -> None:
    """n steps of a mix of operator and random actions, so states include grasps and contacts."""
    for _ in range(n):
        a = op.act(env) if op is not None and rng.random() < 0.7 else rng.uniform(-1, 1, ACT_DIM)
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            return


def _operator_or_none(task: str):
    try:
        op = make_operator(task, noise=OperatorNoise(action_std=0.3))
    except pytest.skip.Exception:
        return None
    return op


def _run(env, actions: np.ndarray, friction_at: int, scale: float) -> list[dict]:
    out = []
    for t, a in enumerate(actions):
        if t == friction_at:
            env.set_finger_friction(scale)
        out.append(env.step(a)[0])
    return out


def test_exact_rewind_random_states(task: str) -> None:
    """Over many random states: snapshot, run k steps, restore, replay -> bit-identical obs. Friction
    perturbations before the snapshot, inside the recorded segment and after it are covered."""
    env = make(task, max_steps=1000)
    op = _operator_or_none(task)
    rng = np.random.default_rng(1234)
    for i in range(N_STATES):
        env.reset(seed=int(rng.integers(1 << 30)))
        if op is not None:
            op.reset(rng)
        _drive(env, op, rng, int(rng.integers(0, 70)))
        if rng.random() < 0.3:
            env.set_finger_friction(float(rng.uniform(0.1, 1.0)))
        snap = env.snapshot()
        actions = rng.uniform(-1, 1, (K_STEPS, ACT_DIM))
        friction_at = int(rng.integers(0, 2 * K_STEPS))  # >= K_STEPS: no change inside the segment
        scale = float(rng.uniform(0.0, 0.5))
        first = _run(env, actions, friction_at, scale)
        env.set_finger_friction(float(rng.uniform(0.0, 2.0)))  # a perturbation after the segment
        _drive(env, op, rng, 3)
        env.restore(snap)
        second = _run(env, actions, friction_at, scale)
        for t, (a, b) in enumerate(zip(first, second, strict=True)):
            assert obs_equal(a, b), f"state {i}: obs differ {t + 1} steps after restore"


def test_restore_brings_back_friction(task: str) -> None:
    env = make(task)
    env.reset(seed=5)
    snap = env.snapshot()
    assert snap.finger_friction_scale == 1.0
    env.set_finger_friction(0.05)
    env.step(np.zeros(ACT_DIM))
    env.restore(snap)
    assert env.snapshot().finger_friction_scale == 1.0
    m = env.model
    ids = [m.geom(n).id for n in ("finger_left", "finger_right")]
    fresh = make(task)
    assert np.array_equal(m.geom_friction[ids], fresh.model.geom_friction[ids])


def test_set_physics_state_reproduces_obs(task: str) -> None:
    env = make(task, max_steps=1000)
    rng = np.random.default_rng(7)
    env.reset(seed=21)
    states, obs_log, actions = [], [], rng.uniform(-1, 1, (40, ACT_DIM))
    for a in actions:
        states.append(env.physics_state())
        obs_log.append(env._obs())
        env.step(a)
    for t in (0, 13, 39):
        env.set_physics_state(states[t])
        assert obs_equal(env._obs(), obs_log[t]), f"obs differ after set_physics_state({t})"
        for j in range(t, min(t + 5, len(actions) - 1)):
            obs = env.step(actions[j])[0]
            assert obs_equal(obs, obs_log[j + 1]), f"replay from stored state {t} diverged at step {j + 1}"
    with pytest.raises(ValueError, match="shape"):
        env.set_physics_state(np.zeros(3))


def test_snapshot_is_immutable(task: str) -> None:
    env = make(task)
    env.reset(seed=2)
    env.step(np.full(ACT_DIM, 0.5))
    snap = env.snapshot()
    physics = snap.physics.copy()
    with pytest.raises(ValueError):
        snap.physics[0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.step_count = 0  # type: ignore[misc]
    actions = np.random.default_rng(3).uniform(-1, 1, (5, ACT_DIM))
    first = [env.step(a)[0] for a in actions]
    env.restore(snap)
    second = [env.step(a)[0] for a in actions]
    env.restore(snap)  # restoring twice: the live state never aliases the snapshot
    third = [env.step(a)[0] for a in actions]
    assert np.array_equal(snap.physics, physics)
    assert all(obs_equal(a, b) and obs_equal(a, c) for a, b, c in zip(first, second, third, strict=True))


def test_restore_also_restores_env_rng(task: str) -> None:
    env = make(task)
    env.reset(seed=9)
    snap = env.snapshot()
    env.reset()  # draws from the env's generator
    first, _ = env.reset()
    env.restore(snap)
    env.reset()
    second, _ = env.reset()
    assert obs_equal(first, second)
