"""Perturbation wrappers: validation, seeding, firing, reporting and exact rewind through them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.envs import obs_equal

import rewind.envs as renvs
from rewind.envs.config import perturbation_config
from rewind.envs.core.base import ACT_DIM
from rewind.envs.wrappers import (
    GraspSlip,
    GripperPush,
    ObjectNudge,
    PerturbationConfig,
    PerturbationSnapshot,
    apply_perturbations,
    held_objects,
)

# Early windows, so the perturbations fire within a short operator episode (the slip fires at the first
# step at or after its drawn step with a closed grasp).
ALL_ON = PerturbationConfig(
    nudge_prob=1.0, nudge_window=(1, 4), slip_prob=1.0, slip_window=(0, 30), push_prob=1.0, push_window=(3, 8)
)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"nudge_prob": 1.5}, "nudge_prob"),
        ({"push_prob": -0.1}, "push_prob"),
        ({"slip_window": (10, 5)}, "slip_window"),
        ({"nudge_window": (1, 2, 3)}, "nudge_window"),
        ({"push_magnitude": 0.0}, "push_magnitude"),
        ({"slip_scale": 1.0}, "slip_scale"),
        ({"slip_duration": 0}, "slip_duration"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PerturbationConfig(**kwargs)


def test_wrapper_validation() -> None:
    env = renvs.make_env("lift")
    with pytest.raises(ValueError, match="ObjectNudge.prob"):
        ObjectNudge(env, prob=2.0)
    with pytest.raises(ValueError, match="GraspSlip.duration"):
        GraspSlip(env, prob=1.0, duration=0)


def test_off_by_default() -> None:
    env = renvs.make_env("lift")
    assert not PerturbationConfig().enabled
    assert apply_perturbations(env, PerturbationConfig()) is env
    wrapped = GripperPush(ObjectNudge(GraspSlip(renvs.make_env("lift"))))
    plain = renvs.make_env("lift")
    oa, _ = wrapped.reset(seed=4)
    ob, _ = plain.reset(seed=4)
    assert obs_equal(oa, ob)
    for a in np.random.default_rng(0).uniform(-1, 1, (40, ACT_DIM)):
        ra, rb = wrapped.step(a), plain.step(a)
        assert obs_equal(ra[0], rb[0]) and "perturbation" not in ra[4]


def _run_operator(env, op, steps: int) -> tuple[list[dict], list[dict]]:
    obs_log, reports = [], []
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(op.act(env))
        obs_log.append(obs)
        reports += info.get("perturbation", [])
        if terminated or truncated:
            break
    return obs_log, reports


@pytest.mark.parametrize("task", ["lift", "pick_place"])
def test_all_fire_and_report(task: str) -> None:
    env = apply_perturbations(renvs.make_env(task, max_steps=150), ALL_ON)
    op = renvs.make_operator(task)
    reports = []
    for seed in range(4):
        env.reset(seed=seed)
        op.reset(np.random.default_rng(seed))
        reports += _run_operator(env, op, 150)[1]
    kinds = {r["type"] for r in reports}
    assert kinds == {"object_nudge", "grasp_slip", "gripper_push"}, reports
    for r in reports:
        assert isinstance(r["step"], int)
        if r["type"] == "grasp_slip":
            assert r["objects"] and r["scale"] == ALL_ON.slip_scale


def test_nudge_moves_object_and_push_moves_gripper() -> None:
    env = ObjectNudge(renvs.make_env("lift"), prob=1.0, window=(3, 3), magnitude=0.04)
    env.reset(seed=1)
    for _ in range(3):
        env.step(np.zeros(ACT_DIM))
    before = env.unwrapped.object_pos("cube").copy()
    info = env.step(np.zeros(ACT_DIM))[4]
    (rep,) = info["perturbation"]
    assert rep["type"] == "object_nudge" and rep["step"] == 3 and rep["object"] == "cube"
    moved = np.linalg.norm(env.unwrapped.object_pos("cube")[:2] - before[:2])
    assert 0.015 < moved < 0.05
    push = GripperPush(renvs.make_env("lift"), prob=1.0, window=(0, 0), magnitude=0.03)
    push.reset(seed=1)
    g0 = push.unwrapped.gripper_pos().copy()
    rep = push.step(np.zeros(ACT_DIM))[4]["perturbation"][0]
    assert rep["type"] == "gripper_push"
    assert np.linalg.norm(push.unwrapped.gripper_pos() - g0) > 0.01


def test_grasp_slip_lowers_then_restores_friction() -> None:
    env = GraspSlip(renvs.make_env("lift"), prob=1.0, window=(0, 100), scale=0.1, duration=4)
    op = renvs.make_operator("lift")
    env.reset(seed=2)
    op.reset(np.random.default_rng(0))
    scales = []
    fired_at = None
    for t in range(100):
        info = env.step(op.act(env))[4]
        scales.append(env.unwrapped.snapshot().finger_friction_scale)
        if "perturbation" in info:
            fired_at = t
            assert held_objects(env.unwrapped) == ["cube"]
        if fired_at is not None and t > fired_at + 5:
            break
    assert fired_at is not None
    assert scales[fired_at : fired_at + 4] == [0.1] * 4
    assert scales[fired_at + 4] == 1.0


def test_own_rng_seeded_at_reset_and_env_rng_untouched() -> None:
    def reports(seed: int) -> list:
        env = apply_perturbations(renvs.make_env("pick_place", max_steps=120), ALL_ON)
        op = renvs.make_operator("pick_place")
        env.reset(seed=seed)
        op.reset(np.random.default_rng(0))
        return _run_operator(env, op, 120)[1]

    assert reports(3) == reports(3)
    assert reports(3) != reports(4)
    wrapped = apply_perturbations(renvs.make_env("pick_place"), ALL_ON)
    plain = renvs.make_env("pick_place")
    for seed in (0, 1):
        assert obs_equal(wrapped.reset(seed=seed)[0], plain.reset(seed=seed)[0])
    assert obs_equal(wrapped.reset()[0], plain.reset()[0]), "the env's own generator advanced differently"


@pytest.mark.parametrize("snap_at", [0, 20, 45])
def test_exact_rewind_through_wrappers(snap_at: int) -> None:
    """Snapshot (before, during or after the perturbations), run, restore, replay: identical obs and
    reports."""
    env = apply_perturbations(renvs.make_env("pick_place", max_steps=150), ALL_ON)
    op = renvs.make_operator("pick_place")
    env.reset(seed=6)
    op.reset(np.random.default_rng(1))
    for _ in range(snap_at):
        env.step(op.act(env))
    snap = env.get_wrapper_attr("snapshot")()
    assert isinstance(snap, PerturbationSnapshot)
    rng = np.random.default_rng(2)
    actions: list[np.ndarray] = []
    first_obs, first_rep = [], []
    for _ in range(60):
        a = np.clip(op.act(env) + rng.normal(0, 0.2, ACT_DIM), -1, 1)
        actions.append(a)
        obs, _, term, trunc, info = env.step(a)
        first_obs.append(obs)
        first_rep.append(info.get("perturbation"))
        if term or trunc:
            break
    env.get_wrapper_attr("restore")(snap)
    for t, a in enumerate(actions):
        obs, *_, info = env.step(a)
        assert obs_equal(obs, first_obs[t]), f"obs differ {t + 1} steps after restore"
        assert info.get("perturbation") == first_rep[t]


def test_restore_rejects_foreign_snapshot() -> None:
    env = ObjectNudge(renvs.make_env("lift"), prob=1.0)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="PerturbationSnapshot"):
        env.restore(env.unwrapped.snapshot())


def _nudged_run(on_restore: str) -> tuple[ObjectNudge, PerturbationSnapshot, np.ndarray, list]:
    """Lift with a nudge at step 3: snapshot at step 1, run past the nudge, restore; the env, the
    snapshot, the cube's position just after the nudge, and the reports of steps 1..5."""
    env = ObjectNudge(renvs.make_env("lift"), prob=1.0, window=(3, 3), magnitude=0.04, on_restore=on_restore)
    env.reset(seed=1)
    env.step(np.zeros(ACT_DIM))
    snap = env.snapshot()
    reports = []
    for t in range(1, 6):
        reports.append(env.step(np.zeros(ACT_DIM))[4].get("perturbation"))
        if t == 3:
            nudged = env.unwrapped.object_pos("cube").copy()
    return env, snap, nudged, reports


def test_nudge_refires_after_a_restore_by_default() -> None:
    env, snap, nudged, first = _nudged_run("refire")
    env.restore(snap)
    assert not np.allclose(env.unwrapped.object_pos("cube")[:2], nudged[:2])  # the past came back
    again = [env.step(np.zeros(ACT_DIM))[4].get("perturbation") for _ in range(5)]
    assert again == first and first[2][0]["step"] == 3  # fires again, at the same step


def test_nudge_persists_through_a_restore() -> None:
    env, snap, nudged, first = _nudged_run("persist")
    start = env.unwrapped.object_pos("cube").copy()
    env.restore(snap)
    restored = env.unwrapped.object_pos("cube").copy()
    # the cube is where the nudge left it (the nudge's displacement from its position at the snapshot)
    assert np.linalg.norm(restored[:2] - nudged[:2]) < 2e-3
    assert np.linalg.norm(restored[:2] - start[:2]) < 2e-3
    reports = [env.step(np.zeros(ACT_DIM))[4].get("perturbation") for _ in range(5)]
    (rep,) = reports[0]
    assert rep["persisted"] and rep["object"] == "cube" and rep["delta"] == first[2][0]["delta"]
    assert reports[1:] == [None] * 4  # it does not fire again
    env.restore(snap)  # a second restore: persisted again, still once per restore
    assert np.linalg.norm(env.unwrapped.object_pos("cube")[:2] - nudged[:2]) < 2e-3
    env.reset(seed=1)  # a new episode forgets it: the nudge fires on schedule again
    reports = [env.step(np.zeros(ACT_DIM))[4].get("perturbation") for _ in range(5)]
    assert reports[3] is not None and "persisted" not in reports[3][0]


def test_nudge_on_restore_is_checked() -> None:
    with pytest.raises(ValueError, match="on_restore"):
        ObjectNudge(renvs.make_env("lift"), prob=1.0, on_restore="undo")
    with pytest.raises(ValueError, match="nudge_on_restore"):
        PerturbationConfig(nudge_on_restore="undo")
    cfg = perturbation_config({"nudge_prob": 1.0, "nudge_on_restore": "persist"})
    assert apply_perturbations(renvs.make_env("lift"), cfg).on_restore == "persist"
