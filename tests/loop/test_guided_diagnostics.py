"""Issue 13 §2 instruments: the guided round's diagnostics (gating, action change under the same noise,
drift AUROC), the sampler switch, and the sweep's grid and collection, on the tiny Lift policy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rewind.config import ConfigError
from rewind.envs.config import EnvConfig
from rewind.envs.registry import make_env
from rewind.loop.config import RecoveryConfig
from rewind.loop.episodes import CollectRules, collect_episodes
from rewind.loop.guided import GuidedConfig
from rewind.loop.guided_diagnostics import action_change, drift_auroc, use_sampler
from rewind.loop.guided_source import GuidedSource
from rewind.loop.guided_sweep import SweepSetting, collect_guided, prep_key, sweep_grid
from rewind.loop.sources import SourceContext
from rewind.monitor import MonitoredEpisode, RewindConfig
from rewind.train.policy_api import denoising_steps, load_policy

SMALL = {"rollouts": 2, "dynamics_steps": 20}


def _window(policy, seed: int = 3) -> dict[str, torch.Tensor]:
    """An observation window ``[1, To, ...]`` of a Lift reset."""
    env = make_env("lift", max_steps=40)
    obs, _ = env.reset(seed=seed)
    env.close()
    keys = policy.used_obs_keys
    return {k: torch.as_tensor(np.stack([obs[k]] * policy.n_obs_steps))[None].float() for k in keys}


@pytest.mark.parametrize("sampler", ["ddim", "ddpm"])
def test_same_generator_state_without_guidance_changes_nothing(tiny_run, sampler: str) -> None:
    """The twin sampling reproduces an unguided chunk exactly (DDPM draws step noise too)."""
    env = make_env("lift", max_steps=40)
    policy = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu")).policy
    env.close()
    assert use_sampler(policy, sampler, None) == 10  # DDIM's default 10; DDPM: every training step (10)
    window, gen = _window(policy), torch.Generator().manual_seed(11)
    state = gen.get_state()
    chunk = policy.predict_chunk(window, 1, gen)[:, 0]
    assert action_change(policy, chunk, window, state, gen.device) == (0.0, 0.0)
    other = policy.predict_chunk(window, 1, gen)[:, 0]  # the generator moved on: a different sample
    assert action_change(policy, other, window, state, gen.device)[0] > 0


def _collect(tiny_run, tmp_path: Path, scale: float, wide: bool, models=None) -> tuple[dict, object]:
    """Two guided Lift episodes; ``wide``: every drift inside the band (the gate always on)."""
    env = make_env("lift", max_steps=40)
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    cfg = RecoveryConfig(name="guided", keep="all", guided=GuidedConfig(scale=scale, **SMALL))
    source = GuidedSource(cfg, "lift", models=models)
    source.prepare(SourceContext(env, loaded, str(tiny_run["store"]), tmp_path, 1))
    if wide:
        source.guide.low = torch.full_like(source.guide.low, -1e9)
        source.guide.high = torch.full_like(source.guide.high, 1e9)

    def make() -> MonitoredEpisode:
        return MonitoredEpisode(env, loaded.policy, None, None, RewindConfig(auto_rewind=False))

    collect_episodes(make, source, [5, 6], None, CollectRules("all"), loaded.version, 1)
    env.close()
    return source.report()["diagnostics"], source.models


def test_diagnostics_gate_and_action_change(tiny_run, tmp_path: Path) -> None:
    """Scale 0: never gated, no action change, drift still recorded; a band containing every drift
    and a large scale: gated at every inference and the executed actions move."""
    off, models = _collect(tiny_run, tmp_path, 0.0, wide=True)
    assert off["inferences"] == 2 * 10 and off["gated_fraction"] == 0.0  # 40 steps / Ta 4, 2 episodes
    assert off["action_change_mean"] == 0.0 and off["in_band_fraction"] == 1.0
    assert off["drift_mean"] is not None and len(off["per_episode"]) == 2
    on, _ = _collect(tiny_run, tmp_path, 5.0, wide=True, models=models)
    assert on["gated_fraction"] == 1.0 and on["action_change_gated_mean"] > 1e-3
    assert on["guidance_term_gated_mean"] > 0
    band, _ = _collect(tiny_run, tmp_path, 5.0, wide=False, models=models)
    assert 0.0 <= band["gated_fraction"] <= 1.0 and 0.0 <= band["in_band_fraction"] <= 1.0


def test_drift_auroc() -> None:
    assert drift_auroc([3.0, 2.0, 1.0, 0.0], [True, True, False, False]) == 1.0
    assert drift_auroc([0.0, 1.0, 2.0, 3.0], [True, True, False, False]) == 0.0
    assert drift_auroc([1.0, 1.0], [True, False]) == 0.5
    assert drift_auroc([1.0, 2.0], [False, False]) is None  # one class only


def test_sampler_and_guided_config_errors(tiny_run, tmp_path: Path) -> None:
    env = make_env("lift", max_steps=40)
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    with pytest.raises(
        ConfigError, match="recovery.guided.sampler=ddpm, inference_steps=5: .*num_train_timesteps"
    ):
        use_sampler(loaded.policy, "ddpm", 5)
    assert use_sampler(loaded.policy, "ddim", 2) == 2 == denoising_steps(loaded.policy)
    cfg = RecoveryConfig(
        name="guided", guided=GuidedConfig(last_k=4, sampler="ddim", inference_steps=3, **SMALL)
    )
    with pytest.raises(ConfigError, match="last_k must be <= the sampler's 3 denoising steps; got 4"):
        GuidedSource(cfg, "lift").prepare(SourceContext(env, loaded, str(tiny_run["store"]), tmp_path, 1))
    env.close()
    for bad, match in (
        ({"scale": -0.1}, "recovery.guided.scale must be >= 0"),
        ({"sampler": "euler"}, r"recovery.guided.sampler must be one of \[policy, ddim, ddpm\]; got 'euler'"),
        ({"dynamics_data": "all"}, "recovery.guided.dynamics_data must be one of"),
        ({"inference_steps": 0}, "recovery.guided.inference_steps must be >= 1; got 0"),
    ):
        with pytest.raises(ConfigError, match=match):
            GuidedConfig(**bad)


def test_sweep_grid_and_errors() -> None:
    grid = sweep_grid([0.1, 0, 1], last_ks=[3, 5])
    assert [(s.scale, s.last_k) for s in grid] == [(0, 3), (0.1, 3), (1, 3), (0.1, 5), (1, 5)]
    assert len({prep_key(s) for s in grid}) == 1
    assert grid[1].name == "policy_k3_m4_both_c0.1"
    lat = sweep_grid([0, 0.3], latents=["pca", "learned"])
    assert [s.name for s in lat] == [
        "policy_k3_m4_both_c0",
        "policy_k3_m4_both_c0.3",
        "policy_k3_m4_both_learned_c0.3",
    ]
    assert len({prep_key(s) for s in lat}) == 2 and lat[2].guided(GuidedConfig()).latent == "learned"
    for args, match in (
        (([0.1, 1],), "must include 0"),
        (([0, -1],), "scales must be >= 0"),
        (([0, 1, 1],), "scales has duplicates"),
        (([0], []), "samplers must not be empty"),
        (([0], ["dpm"]), r"sweep samplers must be one of \[policy, ddim, ddpm\]; got 'dpm'"),
        (([0], ["ddim"], [0]), "recovery.guided.last_k must be >= 1; got 0"),
        (([0], ["ddim"], [3], [0]), "recovery.guided.prototypes must be >= 1; got 0"),
        (([0], ["ddim"], [3], [4], ["both", "x"]), "sweep dynamics_data must be one of"),
        (([0], ["ddim"], [3], [4], ["both"], None, ["ae"]), "sweep latents must be one of"),
    ):
        with pytest.raises(ConfigError, match=match):
            sweep_grid(*args)


def test_collect_guided_writes_summary_and_shares_models(tiny_run, tmp_path: Path) -> None:
    """Two settings of a sweep: the second reuses the first's models; the summary is a round's."""
    env = EnvConfig(name="lift", max_steps=30)
    runs = {}
    models = None
    for s in (SweepSetting(0.0, "policy", 2), SweepSetting(1.0, "policy", 2)):
        runs[s.scale], m = collect_guided(
            env,
            str(tiny_run["train"]),
            str(tiny_run["store"]),
            s.guided(GuidedConfig(**SMALL)),
            [1, 2],
            tmp_path / s.name,
            models=models,
            ddim_eta=0.5,
        )
        assert models is None or m is models
        models = m
        assert (tmp_path / s.name / "summary.json").exists()
    zero, one = runs[0.0], runs[1.0]
    assert zero["episodes"] == 2 and zero["seeds"] == [1, 2] and zero["guided"]["scale"] == 0.0
    assert zero["ddim_eta"] == one["ddim_eta"] == 0.5  # every rollout sampled with the eta asked for
    assert zero["source"]["d_low"] == one["source"]["d_low"]  # same prepared models
    assert zero["source"]["diagnostics"]["gated_fraction"] == 0.0
    for run in (zero, one):  # every executed chunk but each episode's last is paired with its reached latent
        diag = run["source"]["diagnostics"]
        with_inferences = sum(e["inferences"] > 0 for e in diag["per_episode"])
        assert diag["realized_pairs"] == diag["inferences"] - with_inferences > 0
        assert np.isfinite(diag["realized_drift_mean"]) and diag["latent_error_mean"] > 0
    assert zero["source"]["denoising_steps"] == 3 and zero["kept"] == sum(
        e["success"] for e in zero["per_episode"]
    )
