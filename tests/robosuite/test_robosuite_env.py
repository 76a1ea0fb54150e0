"""The robosuite envs: Gymnasium's checker, robosuite-identical physics and sensors, stages, and
exact rewind (snapshot/restore bit for bit, as tests/envs/test_env_rewind.py does for native tasks)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from _robosuite_helpers import needs_robosuite, obs_equal

pytestmark = needs_robosuite
TASKS = ["Lift", "Can", "Square"]


@pytest.fixture(scope="module", params=TASKS)
def env(request):
    from rewind.envs.robosuite.env import RobosuiteEnv

    e = RobosuiteEnv(request.param, max_steps=1000)
    yield e
    e.close()


def _operator(task: str):
    from rewind.envs.operators.base import OperatorNoise
    from rewind.envs.robosuite.operators import OPERATORS, make_operator

    return make_operator(task, OperatorNoise(action_std=0.3)) if task in OPERATORS else None


def _drive(env, op, rng: np.random.Generator, n: int) -> None:
    """n steps mixing operator and random actions, so states include grasps and contacts."""
    for _ in range(n):
        a = op.act(env) if op is not None and rng.random() < 0.7 else rng.uniform(-1, 1, 7)
        if env.step(a)[2]:
            return


@pytest.mark.parametrize("task", TASKS)
def test_check_env_passes(task: str) -> None:
    from gymnasium.utils.env_checker import check_env

    import rewind.envs  # noqa: F401

    e = gym.make(f"rewind/robosuite-{task}-v0", image_size=64)
    check_env(e.unwrapped)
    e.reset(seed=0)
    frame = e.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    e.close()


def test_obs_are_robosuites_sensors_and_step_is_robosuites_step(env) -> None:
    """Obs equal robosuite's own (force-updated) observations; physics equals robosuite's env.step."""
    rng = np.random.default_rng(0)
    env.reset(seed=4)
    _drive(env, None, rng, 5)
    env.rs._get_observations(force_update=True)  # fill robosuite's cache, then read current values
    live = env.rs._get_observations(force_update=True)
    obs = env.observation()
    assert np.array_equal(obs["object"], live["object-state"].astype(np.float32))
    for k in ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"):
        assert np.array_equal(obs[k], live[k].astype(np.float32)), k
    snap, actions = env.snapshot(), rng.uniform(-1, 1, (6, 7))
    ours = [env.step(a) and env.physics_state() for a in actions]
    env.restore(snap)
    theirs = [env.rs.step(a) and env.physics_state() for a in actions]
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_exact_rewind_random_states(env) -> None:
    """Snapshot, run k steps, perturb the episode, restore, replay: bit-identical obs and physics."""
    op = _operator(env.task.name)
    rng = np.random.default_rng(1234)
    for i in range(6):
        env.reset(seed=int(rng.integers(1 << 30)))
        if op is not None:
            op.reset(rng)
        _drive(env, op, rng, int(rng.integers(0, 60)))
        snap = env.snapshot()
        actions = rng.uniform(-1, 1, (8, 7))
        first = [(env.step(a)[0], env.physics_state()) for a in actions]
        _drive(env, op, rng, 5)  # the episode goes on elsewhere (grasps, gripper ramp, controller goals)
        env.restore(snap)
        second = [(env.step(a)[0], env.physics_state()) for a in actions]
        for t, ((oa, pa), (ob, pb)) in enumerate(zip(first, second, strict=True)):
            assert obs_equal(oa, ob) and np.array_equal(pa, pb), (
                f"state {i}: differ {t + 1} steps after restore"
            )


def test_snapshot_is_immutable_and_restores_twice(env) -> None:
    env.reset(seed=2)
    env.step(np.full(7, 0.5))
    snap = env.snapshot()
    with pytest.raises(ValueError):
        snap.physics[0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.step_count = 0  # type: ignore[misc]
    actions = np.random.default_rng(3).uniform(-1, 1, (5, 7))
    runs = []
    for _ in range(3):
        runs.append([env.step(a)[0] for a in actions])
        env.restore(snap)
    assert all(obs_equal(a, b) and obs_equal(a, c) for a, b, c in zip(*runs, strict=True))
    assert env.elapsed_steps == 1


def test_restore_also_restores_rng(env) -> None:
    env.reset(seed=9)
    snap = env.snapshot()
    env.reset()
    first, _ = env.reset()
    env.restore(snap)
    env.reset()
    second, _ = env.reset()
    assert obs_equal(first, second)


def test_seeded_reset_is_deterministic_across_instances(env) -> None:
    from rewind.envs.robosuite.env import RobosuiteEnv

    other = RobosuiteEnv(env.task.name)
    a, _ = env.reset(seed=11)
    b, _ = other.reset(seed=11)
    c, _ = other.reset(seed=12)
    assert obs_equal(a, b) and not obs_equal(a, c)


def test_set_physics_state_reproduces_obs(env) -> None:
    rng = np.random.default_rng(7)
    env.reset(seed=21)
    log = []
    for a in rng.uniform(-1, 1, (20, 7)):
        log.append((env.physics_state(), env.robomimic_state(), env.observation()))
        env.step(a)
    for t in (0, 9, 19):
        for state in log[t][:2]:  # the integration state and robomimic's [time, qpos, qvel]
            env.set_physics_state(state)
            assert obs_equal(env.observation(), log[t][2]), f"obs differ after set_physics_state({t})"
    with pytest.raises(ValueError, match="shape"):
        env.set_physics_state(np.zeros(3))


def test_lift_stages_come_from_robosuite() -> None:
    from rewind.envs.robosuite.env import RobosuiteEnv

    env = RobosuiteEnv("Lift")
    op = _operator("Lift")
    op.noise = dataclasses.replace(op.noise, action_std=0.0)
    env.reset(seed=0)
    names, info = [], {}
    for _ in range(env.max_steps):
        _, reward, terminated, _, info = env.step(op.act(env))
        names.append(info["stage_name"])
        if terminated:
            break
    assert names[0] == "grasp" and "lift" in names and info["stage_name"] == "done" and reward == 1.0
    assert info["success"] and env.rs._check_success()
    grasped_at = names.index("lift")
    assert env.rs._check_grasp(env.rs.robots[0].gripper, env.rs.cube), "still holding the lifted cube"
    assert 0 < grasped_at < len(names) - 1


def test_bad_actions_are_refused(env) -> None:
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(5))
    with pytest.raises(ValueError, match="non-finite"):
        env.step(np.full(7, np.nan))
