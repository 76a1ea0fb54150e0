"""rewind-eval: deterministic records for a seed, perturbations, videos, rollouts into a store, and a
clear error for weights trained on another env layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.train import run_cli

from rewind.config import ConfigError, to_dataclass
from rewind.eval import EvalConfig, run_eval
from rewind.metrics import read_metrics
from rewind.scripts.eval import main as eval_main
from rewind.store import ReplayStore
from rewind.train.policy_api import resolve_weights


@pytest.fixture()
def run_dir(tiny_run: dict[str, Path]) -> Path:
    """The session's tiny diffusion policy (4 Lift demos, 30 steps, weights saved at 10, 20 and 30); the
    tests only read it."""
    return tiny_run["train"]


def _eval_config(out: Path, policy_path: Path, **overrides: object) -> EvalConfig:
    node = {
        "out_dir": str(out),
        "policy_path": str(policy_path),
        "env": {"name": "lift", "max_steps": 20},
        "episodes": 5,
        "num_envs": 2,
        "device": "cpu",
        "num_threads": 1,
        "wandb": {"mode": "disabled"},
        "progress": False,
        **overrides,
    }
    return to_dataclass(node, EvalConfig)


def test_same_seed_gives_identical_records(tmp_path: Path, run_dir: Path) -> None:
    nudge = {"nudge_prob": 1.0, "nudge_window": [2, 10]}
    first = run_eval(_eval_config(tmp_path / "a", run_dir, perturb=nudge))
    second = run_eval(_eval_config(tmp_path / "b", run_dir, perturb=nudge))
    assert first["records"] == second["records"]
    assert [r["seed"] for r in first["records"]] == [0, 1, 2, 3, 4]
    assert all(r["perturbations"] == ["object_nudge"] for r in first["records"])
    assert first["perturb"]["nudge_prob"] == 1.0
    other = run_eval(_eval_config(tmp_path / "c", run_dir, seed=100))
    assert [r["seed"] for r in other["records"]] == [100, 101, 102, 103, 104]


def test_videos_and_rollouts_into_a_store(tmp_path: Path, run_dir: Path) -> None:
    store_path = tmp_path / "rollouts"
    cfg = _eval_config(tmp_path / "ev", run_dir, episodes=3, video={"episodes": 1}, store_out=str(store_path))
    summary = run_eval(cfg)
    (video,) = summary["videos"]
    assert Path(video).name == "episode_000000.mp4" and Path(video).stat().st_size > 1000
    assert summary["records"][0]["video"] == video and summary["records"][1]["video"] is None
    assert [r["name"] for r in read_metrics(tmp_path / "ev", kind="video")] == ["eval/video/episode_000000"]
    with ReplayStore.open(store_path) as store:
        episodes = store.episodes()
        assert [e.seed for e in episodes] == [0, 1, 2]
        assert {e.policy_version for e in episodes} == {summary["policy_version"]}
        assert summary["policy_version"].startswith("diffusion/")
        assert [e.length for e in episodes] == [r["length"] for r in summary["records"]]
        assert all(e.source_counts == {"policy": e.length} for e in episodes)


def test_weights_for_another_env_layout_fail_clearly(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    args = [f"policy_path={run_dir}", "env=stack3", "episodes=2", f"out_dir={tmp_path / 'x'}"]
    assert run_cli(eval_main, [*args, "device=cpu", "wandb.mode=disabled"]) == 2
    err = capsys.readouterr().err
    assert "(trained on rewind/Lift-v0) do not fit env=stack3 (rewind/Stack3-v0)" in err
    assert "cube_pos" in err and "Traceback" not in err


def test_policy_path_forms_and_bad_profiles(tmp_path: Path, run_dir: Path) -> None:
    newest = run_dir / "weights" / "step_000030"
    assert resolve_weights(str(run_dir)) == newest
    assert resolve_weights(str(run_dir / "weights")) == newest
    assert resolve_weights(str(run_dir / "weights" / "step_000010")) == run_dir / "weights" / "step_000010"
    with pytest.raises(ConfigError, match="^policy_path does not exist: .*nope$"):
        resolve_weights(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="^init.from_weights does not exist"):
        resolve_weights(tmp_path / "nope", key="init.from_weights")
    with pytest.raises(ConfigError, match="perturb.nudge_prb: unknown key"):
        _eval_config(tmp_path, run_dir, perturb={"nudge_prb": 1.0})
    with pytest.raises(ConfigError, match="perturb: nudge_prob must be in"):
        _eval_config(tmp_path, run_dir, perturb={"nudge_prob": 2.0})


def test_execution_horizon_override(tmp_path: Path, run_dir: Path) -> None:
    """``n_action_steps`` at eval changes how often the policy replans; out of range is a user error."""
    summary = run_eval(_eval_config(tmp_path / "a", run_dir, n_action_steps=1))
    assert summary["n_action_steps"] == 1
    trained = run_eval(_eval_config(tmp_path / "b", run_dir))
    assert trained["n_action_steps"] == 4  # the tiny policy's trained value
    with pytest.raises(ConfigError, match="n_action_steps must be in"):
        run_eval(_eval_config(tmp_path / "c", run_dir, n_action_steps=99))


def test_sampler_override(tmp_path: Path, run_dir: Path) -> None:
    """``sampler`` / ``inference_steps`` at eval switch how chunks are sampled, not the weights."""
    trained = run_eval(_eval_config(tmp_path / "a", run_dir, episodes=2))
    ddpm = run_eval(_eval_config(tmp_path / "b", run_dir, episodes=2, sampler="ddpm"))
    ddim = run_eval(_eval_config(tmp_path / "c", run_dir, episodes=2, sampler="ddim", inference_steps=2))
    assert trained["sampler"] == "policy" and ddpm["sampler"] == "ddpm"
    assert ddpm["denoising_steps"] == 10 != trained["denoising_steps"]  # every one of 10 training steps
    assert ddim["denoising_steps"] == 2
    assert ddpm["policy_version"] == trained["policy_version"]
    with pytest.raises(ConfigError, match=r"sampler must be one of \[policy, ddim, ddpm\]; got 'euler'"):
        _eval_config(tmp_path / "d", run_dir, sampler="euler")
    with pytest.raises(ConfigError, match="sampler=ddpm, inference_steps=5: .*num_train_timesteps"):
        run_eval(_eval_config(tmp_path / "e", run_dir, sampler="ddpm", inference_steps=5))
    with pytest.raises(ConfigError, match="ddim_eta=0.5: ddim_eta applies to scheduler ddim"):
        run_eval(_eval_config(tmp_path / "f", run_dir, sampler="ddpm", ddim_eta=0.5))


def test_ddim_eta_adds_noise_per_step(tiny_run: dict[str, Path]) -> None:
    """eta 0: a chunk is a function of the initial noise; eta 1: the same initial noise, other step
    noise, another chunk; the same generator state gives the same chunk either way."""
    import torch

    from rewind.envs.registry import make_env
    from rewind.train.policy_api import denoising_steps, load_policy, set_sampler

    env = make_env("lift", max_steps=20)
    obs, _ = env.reset(seed=0)
    chunks = {}
    for eta in (0.0, 1.0):
        policy = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"), ddim_eta=eta).policy
        assert policy.config.ddim_eta == eta
        to = policy.n_obs_steps
        batch = {k: torch.as_tensor(v).float().expand(1, to, *v.shape).clone() for k, v in obs.items()}
        draw = [policy.predict_chunk(batch, generator=torch.Generator().manual_seed(s)) for s in (1, 1)]
        assert torch.equal(draw[0], draw[1])
        chunks[eta] = draw[0]
    assert not torch.allclose(chunks[0.0], chunks[1.0])
    policy = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"), inference_steps=3).policy
    set_sampler(policy, "policy", None, eta=1.0)  # only eta changes: the steps stay the policy's
    assert denoising_steps(policy) == 3 and policy.config.ddim_eta == 1.0
    env.close()
