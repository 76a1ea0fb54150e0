"""The human-like operator model on real PickPlace states: delay, noise, speed cap, failure rate vs
distance from the demos, determinism, and ``perfect`` = the plain scripted operator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rewind.collect import CollectConfig, run_collect
from rewind.config import ConfigError
from rewind.envs.config import EnvConfig
from rewind.envs.core.base import MAX_DPOS, MAX_DYAW
from rewind.envs.operators.base import OperatorNoise
from rewind.envs.operators.handback import complete_current_stage
from rewind.envs.operators.human_like import (
    CONTROL_DT,
    DemoDistance,
    HumanLikeOperator,
    HumanLikeStats,
    OperatorModelConfig,
    hold_action,
    operator_time_s,
)
from rewind.envs.registry import make_env, make_operator
from rewind.loop.config import RecoveryConfig
from rewind.loop.sources import make_source
from rewind.store import ReplayStore

#: Perturbations that take a demo state far from the demos (gripper push, can nudge; metres).
FAR = ((np.array([0.2, 0.0, 0.0]), np.zeros(2)), (np.array([0.0, 0.15, 0.1]), np.array([-0.15, 0.1])))


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """20 scripted PickPlace demos (seeds 0..19)."""
    out = tmp_path_factory.mktemp("hl_demos")
    run_collect(
        CollectConfig(
            out_dir=str(out),
            env=EnvConfig(name="pick_place"),
            episodes=20,
            seed=0,
            out=str(out / "store"),
            progress=False,
        )
    )
    return str(out / "store")


@pytest.fixture(scope="module")
def demos(demo_store: str) -> DemoDistance:
    """The demos' :class:`DemoDistance`."""
    return DemoDistance.from_store(demo_store)


@pytest.fixture()
def env():
    e = make_env("pick_place")
    yield e
    e.close()


def _states(env, seeds=(100, 101, 102)) -> tuple[list, list]:
    """Snapshots of new scripted episodes (not in the store) every 8 steps, and the same states pushed far."""
    base, op = env.unwrapped, make_operator("pick_place", noise=OperatorNoise())
    near, far = [], []
    for seed in seeds:
        env.reset(seed=seed)
        op.reset(np.random.default_rng(seed))
        for t in range(120):
            env.step(op.act(env))
            if base.is_success():
                break
            if t % 8 == 3:
                snap = base.snapshot()
                near.append(snap)
                for push, nudge in FAR:
                    base.push_gripper(push)
                    base.nudge_object("can", nudge)
                    far.append(base.snapshot())
                    base.restore(snap)
    return near, far


def _model(**kw) -> OperatorModelConfig:
    return OperatorModelConfig(name="human_like", **kw)


def _human(cfg: OperatorModelConfig, dist: DemoDistance | None = None) -> HumanLikeOperator:
    return HumanLikeOperator(make_operator("pick_place", noise=OperatorNoise(action_std=0.0)), cfg, dist)


def test_reaction_delay_holds_then_acts(env) -> None:
    base = env.unwrapped
    env.reset(seed=3)
    scripted = make_operator("pick_place")
    while base.stage() < 1:  # grasped: the hold must keep the fingers closed
        env.step(scripted.act(env))
    cfg = _model(reaction_s=0.25, give_up_far=0.0, botch_rate_far=0.0)
    op = _human(cfg)
    op.reset(np.random.default_rng(0))
    n = cfg.steps(cfg.reaction_s)
    assert n == 5 == round(0.25 / CONTROL_DT)
    actions = []
    for _ in range(n + 3):
        a = op.act(env)
        actions.append(a)
        env.step(a)
    hold = actions[0]
    assert np.all(hold[:4] == 0) and hold[4] < -0.9  # fingers kept closed on the can
    assert all(np.array_equal(a, hold_action(base)) or np.array_equal(a, hold) for a in actions[:n])
    assert not np.allclose(actions[n][:4], 0) and op.stats.delay_steps == n and base.stage() >= 1
    op.reset(np.random.default_rng(1))  # every takeover waits again
    assert np.all(op.act(env)[:4] == 0) and op.stats.delay_steps == n + 1 and op.stats.takeovers == 2


@pytest.mark.parametrize("where", ["near", "far"])
def test_noise_std_matches_the_parameter_near_and_far(env, demos, where) -> None:
    near, far = _states(env, seeds=(100,))
    cfg = _model(
        reaction_s=0.0,
        noise_near=0.05,
        noise_far=0.2,
        speed_near=100.0,
        speed_far=100.0,
        yaw_rate_near=100.0,
        yaw_rate_far=100.0,
        give_up_far=0.0,
        botch_rate_far=0.0,
    )
    op, base, residuals = _human(cfg, demos), env.unwrapped, []
    op.reset(np.random.default_rng(7))
    for snap in near if where == "near" else far:
        base.restore(snap)
        u, ratio = op.unfamiliarity(base)
        if (where == "near" and u > 0) or (where == "far" and u < 1):
            continue
        clean = np.clip(op.plan(base, base.stage()), -1, 1)[:4]
        acts = np.stack([op.act(env)[:4] for _ in range(300)])
        ok = np.abs(clean) < 0.2  # far from the clip at +-1
        residuals.append((acts - clean)[:, ok].ravel())
    r = np.concatenate(residuals)
    expected = 0.05 if where == "near" else 0.2
    assert r.size > 1000 and abs(r.mean()) < 0.1 * expected and abs(r.std() - expected) < 0.05 * expected


def test_failures_rise_with_distance_from_the_demos(env, demos) -> None:
    near, far = _states(env)
    cfg = _model()
    base = env.unwrapped

    def failure_rate(states: list) -> tuple[float, float]:
        fails, ratios = [], []
        for i, snap in enumerate(states):
            for k in range(15):
                op = _human(cfg, demos)
                op.reset(np.random.default_rng([i, k]))
                base.restore(snap)
                for _ in range(cfg.steps(cfg.reaction_s) + 20):  # one second of attempt on the frozen state
                    op.act(env)
                fails.append(op.stats.give_ups + op.stats.botches > 0)
                ratios.append(op.stats.ratios[0])
        return float(np.mean(fails)), float(np.median(ratios))

    (p_near, r_near), (p_far, r_far) = failure_rate(near), failure_rate(far)
    assert r_near < 1.5 < 3.0 < r_far
    assert p_near < 0.15 and p_far > 0.35 and p_far > p_near + 0.3


def test_a_give_up_ends_the_drive_and_its_steps_count(env, demos) -> None:
    _, far = _states(env, seeds=(100,))
    cfg = _model(give_up_near=1.0, give_up_far=1.0, give_up_s=0.5)
    op = _human(cfg, demos)
    env.unwrapped.restore(far[0])
    op.reset(np.random.default_rng(0))
    acts = [op.act(env) for _ in range(cfg.steps(cfg.reaction_s) + cfg.steps(cfg.give_up_s))]
    assert op.stopped() and op.stats.give_ups == 1 and all(np.all(a[:4] == 0) for a in acts)
    assert op.stats.steps == 15 and op.stats.delay_steps == 5 and op.stats.give_up_steps == 10


def test_speed_cap_holds_and_tightens_far_from_the_demos(env, demos) -> None:
    near, far = _states(env, seeds=(100, 101))
    cfg = _model(reaction_s=0.0, give_up_far=0.0)
    op, base = _human(cfg, demos), env.unwrapped
    op.reset(np.random.default_rng(3))
    for snap in near + far:
        base.restore(snap)
        u, _ = op.unfamiliarity(base)
        cap = (cfg.speed_near + u * (cfg.speed_far - cfg.speed_near)) * CONTROL_DT / MAX_DPOS
        yaw_cap = (cfg.yaw_rate_near + u * (cfg.yaw_rate_far - cfg.yaw_rate_near)) * CONTROL_DT / MAX_DYAW
        for _ in range(20):
            a = op.act(env)
            assert np.linalg.norm(a[:3]) <= cap + 1e-5 and abs(a[3]) <= yaw_cap + 1e-6
            if u >= 1:
                assert np.linalg.norm(a[:3]) * MAX_DPOS / CONTROL_DT <= cfg.speed_far + 1e-4
    base.restore(far[0])  # the cap binds: the plan wants more than the far cap
    assert np.linalg.norm(op.plan(base, base.stage())[:3]) > cfg.speed_far * CONTROL_DT / MAX_DPOS


def _drive(env, op, seed: int) -> list[np.ndarray]:
    env.reset(seed=5)
    op.reset(np.random.default_rng(seed))
    actions: list[np.ndarray] = []
    obs = env.unwrapped.observation()
    complete_current_stage(env, op, obs, 60, on_step=lambda o, a, i: actions.append(a.copy()))
    return actions


def test_same_seed_same_actions(env, demos) -> None:
    cfg = _model(give_up_far=0.5, botch_rate_far=2.0)
    a1, a2, b = (
        _drive(env, _human(cfg, demos), 11),
        _drive(env, _human(cfg, demos), 11),
        _drive(env, _human(cfg, demos), 12),
    )
    assert len(a1) == len(a2) and all(np.array_equal(x, y) for x, y in zip(a1, a2, strict=True))
    assert len(a1) != len(b) or not all(np.array_equal(x, y) for x, y in zip(a1, b, strict=False))


def test_perfect_is_the_plain_scripted_operator(env) -> None:
    rc = RecoveryConfig(name="dagger")
    assert rc.operator_model.name == "perfect"
    source = make_source(rc, "pick_place")
    plain = make_operator("pick_place", noise=OperatorNoise(action_std=rc.operator_noise))
    assert type(source.operator) is type(plain) and source.operator.noise == plain.noise
    ours, theirs = _drive(env, source.operator, 4), _drive(env, plain, 4)
    assert len(ours) > 5 and all(np.array_equal(x, y) for x, y in zip(ours, theirs, strict=True))
    human = make_source(RecoveryConfig(name="dagger", operator_model=_model()), "pick_place")
    assert isinstance(human.operator, HumanLikeOperator) and human.operator.inner.noise.action_std == 0.0


def test_demo_distance_and_config_checks(demos, demo_store: str) -> None:
    assert demos.reference > 0 and demos.describe()["states"] == len(demos.x)
    with ReplayStore.open(demo_store) as store:
        ep = store.load(store.episodes()[3].id)
    assert demos.distance({k: v[7] for k, v in ep.obs.items()}) < 1e-5  # a demo state itself
    with pytest.raises(ValueError, match=">= 2 episodes"):
        DemoDistance(np.zeros((5, 3)), np.zeros(5), ["a"])
    with pytest.raises(ConfigError, match=r"must be one of \[perfect, human_like\]; got 'sloppy'"):
        OperatorModelConfig(name="sloppy")
    with pytest.raises(ConfigError, match="give_up_far must be in"):
        _model(give_up_far=1.5)
    assert operator_time_s(20, 2, 1.0) == pytest.approx(20 * 0.05 + 2.0)


def test_demo_store_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="store"):
        DemoDistance.from_store(str(tmp_path / "nope"))


def test_per_key_scale_keeps_a_near_constant_channel_from_ruling_the_distance() -> None:
    # two keys: a 2-D position that varies by 1 in the demos, and a 2-D "quaternion" whose first dim
    # varies by 1 and second by only 0.001 (a tilt never seen in the demos)
    rng = np.random.default_rng(0)
    n = 400
    pos = rng.uniform(0, 1, size=(n, 2))
    quat = np.stack([rng.uniform(0, 1, n), rng.uniform(0, 0.001, n)], axis=1)
    states, episode = np.concatenate([pos, quat], axis=1), np.repeat(np.arange(8), n // 8)
    tilted = {"pos": pos[5], "quat": quat[5] + np.array([0.0, 0.1])}  # tilt 0.1: 100x the demo span
    moved = {"pos": pos[5] + np.array([0.3, 0.0]), "quat": quat[5]}
    per_dim = DemoDistance(states, episode, ["pos", "quat"], widths=[2, 2], scale="per_dim")
    per_key = DemoDistance(states, episode, ["pos", "quat"], widths=[2, 2], scale="per_key")
    assert per_dim.distance(tilted) > 50 * per_dim.distance(moved)  # the flaw: a small tilt rules
    assert per_key.distance(tilted) < per_key.distance(moved)  # 0.1 of tilt < 0.3 of motion
    floored = DemoDistance(states, episode, ["pos", "quat"], widths=[2, 2], scale="per_dim", min_scale=0.5)
    assert floored.distance(tilted) < floored.distance(moved)
    with pytest.raises(ValueError, match="do not add up"):
        DemoDistance(states, episode, ["pos", "quat"], widths=[2, 1])
    with pytest.raises(ConfigError, match="distance_scale must be one of"):
        _model(distance_scale="per_axis")


def test_stats_report_ratio_percentiles() -> None:
    stats = HumanLikeStats(ratios=[1.0, 2.0, 3.0, 4.0, 100.0])
    d = stats.as_dict()
    assert d["ratio_p50"] == 3.0 and d["ratio_mean"] == 22.0 and d["ratio_p10"] < d["ratio_p90"] < 100
    assert HumanLikeStats().as_dict()["ratio_p50"] is None
