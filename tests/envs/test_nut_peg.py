"""NutPeg: stage logic on constructed states, operator success and recovery."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from rewind.envs.core.base import yaw_quat
from rewind.envs.operators.base import OperatorNoise
from rewind.envs.operators.nut_peg import NutPegOperator, handle_blocked, handle_grasp_yaw
from rewind.envs.tasks.nut_peg import (
    GRASP_DZ,
    HANDLE_X,
    NUT_HALF_H,
    PEG_HEIGHT,
    PEG_POS,
    NutPegEnv,
    nut_lowest_z,
    nut_tilt,
    yaw_error_mod,
)


def _place_nut(env: NutPegEnv, pos, quat) -> None:
    a = env._obj_qadr["nut"]
    env.data.qpos[a : a + 3] = pos
    env.data.qpos[a + 3 : a + 7] = quat
    env.data.qvel[env._obj_dofadr["nut"] : env._obj_dofadr["nut"] + 6] = 0.0
    mujoco.mj_forward(env.model, env.data)


def _grip_handle(env: NutPegEnv, nut_pos, nut_yaw: float, steps: int = 15) -> None:
    """Put the nut at ``nut_pos``/``nut_yaw`` and close the fingers on its handle."""
    handle = np.asarray(nut_pos) + HANDLE_X * np.array([math.cos(nut_yaw), math.sin(nut_yaw), 0.0])
    grip = handle + [0.0, 0.0, GRASP_DZ]
    a = env._grip_qadr
    env.data.qpos[a : a + 3] = grip
    env.data.qpos[a + 3 : a + 7] = yaw_quat(nut_yaw)
    env.data.mocap_pos[0] = grip
    env.data.mocap_quat[0] = yaw_quat(nut_yaw)
    env._target_yaw = nut_yaw
    _place_nut(env, nut_pos, yaw_quat(nut_yaw))
    for _ in range(steps):
        env.step(np.array([0, 0, 0, 0, -1.0], dtype=np.float32))


def _run(env: NutPegEnv, op: NutPegOperator, steps: int) -> dict:
    info: dict = {}
    for _ in range(steps):
        _, _, term, _, info = env.step(op.act(env))
        assert "sim_error" not in info, info
        if term:
            break
    return info


@pytest.fixture
def env():
    e = NutPegEnv()
    e.reset(seed=0)
    yield e
    e.close()


def test_pure_helpers():
    assert yaw_error_mod(0.05, 0.0) == pytest.approx(-0.05)
    assert yaw_error_mod(math.pi / 2 - 0.05, 0.0) == pytest.approx(0.05)
    assert nut_tilt(yaw_quat(1.0)) == pytest.approx(0.0, abs=1e-9)
    flipped = np.array([0.0, 1.0, 0.0, 0.0])  # upside down: the hole axis is still vertical
    assert nut_tilt(flipped) == pytest.approx(0.0, abs=1e-9)
    assert nut_lowest_z(np.array([0, 0, NUT_HALF_H]), yaw_quat(0.3)) == pytest.approx(0.0, abs=1e-9)
    # The handle grasp is 2-fold and kept inside +-(pi/2 + 0.3).
    assert abs(handle_grasp_yaw(3.0, 3.0)) <= math.pi / 2 + 0.3
    assert handle_blocked(np.array([PEG_POS[0], PEG_POS[1] - 0.03, 0.01]), 0.0)
    assert not handle_blocked(np.array([-0.1, 0.0, 0.01]), 0.0)


def test_reset_is_seeded_and_in_stage_grasp(env):
    _, info = env.reset(seed=7)
    p = env.object_pos("nut").copy()
    assert info["stage"] == 0 and info["stage_name"] == "grasp"
    env.reset(seed=7)
    np.testing.assert_array_equal(p, env.object_pos("nut"))
    env.reset(seed=8)
    assert not np.allclose(p, env.object_pos("nut"))


def test_stage_align_when_held_away_from_peg(env):
    _grip_handle(env, [-0.1, 0.0, NUT_HALF_H], 0.4)
    assert env.nut_held()
    assert env.stage() == 1


def test_stage_insert_when_held_over_peg_with_matched_yaw(env):
    above = [PEG_POS[0], PEG_POS[1], PEG_HEIGHT + NUT_HALF_H + 0.02]
    _grip_handle(env, above, math.pi / 2, steps=3)  # 90 degrees is a match: the hole is square
    assert env.stage() == 2
    _grip_handle(env, above, math.pi / 2 + 0.3, steps=3)  # yaw off by 0.3 rad
    assert env.stage() == 1


def test_stage_done_when_released_low_on_peg_and_backwards_when_lifted(env):
    _place_nut(env, [PEG_POS[0], PEG_POS[1], NUT_HALF_H], yaw_quat(0.0))
    for _ in range(5):
        _, _, term, _, info = env.step(np.array([0, 0, 0, 0, 1.0], dtype=np.float32))
    assert info["success"] and term
    # Sitting on top of the peg is not inserted.
    _place_nut(env, [PEG_POS[0], PEG_POS[1], PEG_HEIGHT + NUT_HALF_H], yaw_quat(0.5))
    assert env.stage() == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_operator_from_reset(seed):
    env = NutPegEnv()
    env.reset(seed=seed)
    op = NutPegOperator(noise=OperatorNoise())
    op.reset(np.random.default_rng(seed))
    info = _run(env, op, env.max_steps)
    assert info["success"], info


def test_operator_recovers_after_nudge_during_approach(env):
    op = NutPegOperator(noise=OperatorNoise())
    op.reset(np.random.default_rng(1))
    for _ in range(6):
        env.step(op.act(env))
    env.nudge_object("nut", np.array([0.04, -0.03]))
    info = _run(env, op, env.max_steps)
    assert info["success"], info


def test_operator_recovers_after_drop_during_carry(env):
    op = NutPegOperator()
    op.reset(np.random.default_rng(2))
    while env.stage() < 1:
        env.step(op.act(env))
    for _ in range(8):
        env.step(op.act(env))
    env.set_finger_friction(0.0)
    stages = []
    for _ in range(10):
        _, _, _, _, info = env.step(op.act(env))
        stages.append(info["stage"])
    env.set_finger_friction(1.0)
    assert 0 in stages, "the nut should have slipped out of the grasp"
    info = _run(env, op, 150)
    assert info["success"], info


def test_operator_topples_a_nut_standing_on_edge(env):
    q = yaw_quat(0.7)
    roll = np.array([math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 0.0])
    w1, x1, y1, z1 = q
    w2, x2, y2, z2 = roll
    quat = [
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ]
    _place_nut(env, [-0.08, 0.05, 0.031], quat)
    assert nut_tilt(env.object_quat("nut")) > 1.0
    op = NutPegOperator()
    info = _run(env, op, 150)
    assert info["success"], info


def test_operator_drags_nut_whose_handle_touches_the_peg(env):
    # The handle lies alongside the peg: an open finger cannot come down between them.
    _place_nut(env, [PEG_POS[0] - 0.066, PEG_POS[1] + 0.027, NUT_HALF_H], yaw_quat(0.0))
    assert handle_blocked(env.handle_pos(), env.nut_yaw())
    op = NutPegOperator()
    info = _run(env, op, 150)
    assert info["success"], info


def test_snapshot_restore_mid_insert_is_exact(env):
    op = NutPegOperator()
    while env.stage() < 2:
        env.step(op.act(env))
    snap = env.snapshot()
    first = [env.step(op.act(env))[0]["nut_pos"].copy() for _ in range(5)]
    env.restore(snap)
    second = [env.step(op.act(env))[0]["nut_pos"].copy() for _ in range(5)]
    np.testing.assert_array_equal(np.array(first), np.array(second))
