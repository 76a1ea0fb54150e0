"""Stack3: stage logic on constructed states, seeded resets, and the scripted operator's recoveries."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from rewind.envs.core.base import yaw_quat
from rewind.envs.operators.base import OperatorNoise
from rewind.envs.operators.stack3 import Stack3Operator, free_spot, grasp_yaw_away, sym_wrap
from rewind.envs.tasks.stack3 import (
    BLUE,
    CUBE_HALF,
    CUBES,
    GREEN,
    MIN_SPACING,
    RED,
    Stack3Env,
    cube_yaw,
    stage_from_flags,
)

H = CUBE_HALF


@pytest.fixture
def env() -> Stack3Env:
    e = Stack3Env()
    e.reset(seed=0)
    yield e
    e.close()


def put(env: Stack3Env, name: str, x: float, y: float, z: float, yaw: float = 0.0) -> None:
    """Place cube ``name`` at rest."""
    env.object_pos(name)[:] = (x, y, z)
    env.object_quat(name)[:] = yaw_quat(yaw)
    d = env.model.joint(name).dofadr[0]
    env.data.qvel[d : d + 6] = 0.0
    mujoco.mj_forward(env.model, env.data)


def put_gripper(env: Stack3Env, pos: tuple[float, float, float], opening: float) -> None:
    """Move the gripper (and its target) to ``pos`` with the pads ``opening`` apart."""
    env.gripper_pos()[:] = pos
    env.data.mocap_pos[0] = pos
    for j in ("finger_left", "finger_right"):
        env.data.qpos[env.model.joint(j).qposadr[0]] = opening / 2
    mujoco.mj_forward(env.model, env.data)


def tower(env: Stack3Env, n: int, x: float = 0.05, y: float = 0.0) -> None:
    """Stack the first ``n`` cubes of red, green, blue at (x, y); the rest go out of the way."""
    spare = [(-0.15, 0.15), (-0.15, -0.15), (0.15, 0.15)]
    for i, name in enumerate(CUBES):
        if i < n:
            put(env, name, x, y, H + 2 * H * i)
        else:
            put(env, name, *spare[i], H)


def run_operator(env: Stack3Env, op: Stack3Operator, steps: int) -> dict:
    info: dict = {}
    for _ in range(steps):
        _, _, terminated, _, info = env.step(op.act(env))
        if terminated:
            break
    return info


# ---------------------------------------------------------------------------- pure stage logic
@pytest.mark.parametrize(
    ("flags", "stage"),
    [
        ((False, False, False, False, True), 0),
        ((False, False, True, False, True), 1),
        ((True, False, True, False, True), 1),  # on red but not yet released
        ((True, False, False, False, True), 2),
        ((True, False, False, True, True), 3),
        ((True, True, False, True, True), 3),  # blue on green, not yet released
        ((True, True, False, False, False), 3),  # released, still moving
        ((True, True, False, False, True), 4),
        ((False, True, False, False, True), 0),  # blue on green but green fell off red
    ],
)
def test_stage_from_flags(flags: tuple[bool, ...], stage: int) -> None:
    assert stage_from_flags(*flags) == stage


# ---------------------------------------------------------------------------- constructed states
def test_reset_is_stage_zero_and_seeded(env: Stack3Env) -> None:
    env.reset(seed=3)
    a = {n: env.object_pos(n).copy() for n in CUBES}
    qpos_a = env.data.qpos.copy()
    assert env.stage() == 0
    env.reset(seed=3)
    assert all(np.array_equal(a[n], env.object_pos(n)) for n in CUBES)
    for i, p in enumerate(CUBES):
        for q in CUBES[i + 1 :]:
            assert np.hypot(*(a[p][:2] - a[q][:2])) >= MIN_SPACING
    env.reset(seed=4)
    changed = np.flatnonzero(env.data.qpos != qpos_a)
    obj = {env.model.joint(n).qposadr[0] + k for n in CUBES for k in range(7)}
    assert set(changed.tolist()) <= obj


def test_tower_stages(env: Stack3Env) -> None:
    tower(env, 1)
    assert env.stage() == 0
    tower(env, 2)
    assert env.stage() == 2
    tower(env, 3)
    assert env.stage() == 4 and env.is_success()


def test_unsettled_tower_is_not_done(env: Stack3Env) -> None:
    tower(env, 3)
    d = env.model.joint(BLUE).dofadr[0]
    env.data.qvel[d] = 0.2
    assert env.stage() == 3


def test_knocked_tower_goes_back(env: Stack3Env) -> None:
    tower(env, 3)
    put(env, GREEN, 0.12, 0.0, H)  # green knocked off red: blue lands on the table too
    put(env, BLUE, 0.12, 0.1, H)
    assert env.stage() == 0
    tower(env, 3)
    put(env, BLUE, 0.05, 0.06, H)  # only blue fell
    assert env.stage() == 2
    tower(env, 3)
    put(env, GREEN, 0.05 + 2 * H, 0.0, H)  # green slid off, blue resting on red now
    put(env, BLUE, 0.05, 0.0, 3 * H)
    assert env.stage() == 0


def test_green_on_lifted_red_does_not_count(env: Stack3Env) -> None:
    put(env, BLUE, 0.05, 0.0, H)
    put(env, RED, 0.05, 0.0, 3 * H)
    put(env, GREEN, 0.05, 0.0, 5 * H)
    assert not env.green_on_red() and env.stage() == 0


def test_placing_requires_release(env: Stack3Env) -> None:
    tower(env, 2)
    put_gripper(env, (0.05, 0.0, 3 * H + 0.003), 2 * H)
    assert env.held(GREEN) and env.stage() == 1
    put_gripper(env, (0.05, 0.0, 3 * H + 0.003), 0.08)
    assert env.held_cube() is None and env.stage() == 2


def test_holding_blue_above_tower_is_place_blue(env: Stack3Env) -> None:
    """A cube just below the held one also falls in the pads' box; the nearer one is the held one."""
    tower(env, 2)
    put(env, BLUE, 0.05, 0.0, 5 * H + 0.004)
    put_gripper(env, (0.05, 0.0, 5 * H + 0.007), 2 * H)
    assert env.held_cube() == BLUE
    assert env.stage() == 3


def test_cube_yaw_of_rolled_cube() -> None:
    roll = np.array([math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 0.0])  # 90 deg about x
    q = np.empty(4)
    mujoco.mju_mulQuat(q, yaw_quat(0.3), roll)
    assert abs(sym_wrap(cube_yaw(q) - 0.3)) < 1e-9
    assert abs(sym_wrap(cube_yaw(yaw_quat(-0.7)) + 0.7)) < 1e-9


def test_operator_helpers() -> None:
    # A neighbour straight along +x: the fingers (gripper y axis) must not point at it.
    yaw = grasp_yaw_away(0.0, 0.0, [np.array([0.05, 0.0])])
    assert abs(math.sin(yaw)) < 1e-9  # finger axis = (-sin, cos) is along y
    assert abs(grasp_yaw_away(0.0, 3.1, []) - math.pi) > 0.04  # stays inside the yaw range
    spot = free_spot(np.array([0.0, 0.0]), [np.array([0.02, 0.0, H])])
    assert np.hypot(*(spot - [0.02, 0.0])) >= 0.09


# ---------------------------------------------------------------------------- operator
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_operator_from_reset(env: Stack3Env, seed: int) -> None:
    env.reset(seed=seed)
    op = Stack3Operator(noise=OperatorNoise())
    op.reset(np.random.default_rng(seed))
    stages = []
    for _ in range(env.max_steps):
        _, _, terminated, _, info = env.step(op.act(env))
        stages.append(info["stage"])
        if terminated:
            break
    assert info["success"], stages
    assert stages == sorted(stages), "a clean run should not move backwards"


def test_operator_recovers_after_nudging_bottom_cube(env: Stack3Env) -> None:
    env.reset(seed=5)
    op = Stack3Operator(noise=OperatorNoise())
    op.reset(np.random.default_rng(5))
    while env.stage() < 2:
        env.step(op.act(env))
    for _ in range(3):  # let the gripper back off a little
        env.step(op.act(env))
    env.nudge_object(RED, np.array([0.045, 0.0]))
    for _ in range(10):
        _, _, _, _, info = env.step(np.array([0, 0, 0, 0, 1.0], dtype=np.float32))
    assert info["stage"] == 0, "green fell off the displaced red cube"
    assert run_operator(env, op, env.max_steps)["success"]


def test_operator_recovers_after_drop(env: Stack3Env) -> None:
    env.reset(seed=6)
    op = Stack3Operator(noise=OperatorNoise())
    op.reset(np.random.default_rng(6))
    while not (env.stage() == 1 and env.object_pos(GREEN)[2] > 0.08):
        env.step(op.act(env))
    env.set_finger_friction(0.0)
    dropped = False
    for _ in range(15):
        _, _, _, _, info = env.step(op.act(env))
        dropped |= info["stage"] == 0
    env.set_finger_friction(1.0)
    assert dropped
    assert run_operator(env, op, env.max_steps)["success"]


def test_operator_clears_wrong_stack(env: Stack3Env) -> None:
    """Blue on red blocks the first placement: the operator moves blue off, then stacks."""
    put(env, RED, 0.0, 0.0, H, 0.3)
    put(env, BLUE, 0.0, 0.0, 3 * H, 0.3)
    put(env, GREEN, 0.1, 0.08, H, -0.4)
    op = Stack3Operator()
    assert env.stage() == 0
    assert run_operator(env, op, 2 * env.max_steps)["success"]
