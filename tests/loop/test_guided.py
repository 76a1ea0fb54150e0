"""ReGuide pieces: time-ordered phase prototypes, drift, the gated guidance step, the guided source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rewind.config import ConfigError
from rewind.envs.registry import make_env
from rewind.loop.config import RecoveryConfig
from rewind.loop.episodes import run_episode
from rewind.loop.guided import (
    DriftGuide,
    GuidedConfig,
    LatentDynamics,
    PhaseModel,
    kmeans,
    train_dynamics,
    train_projection,
)
from rewind.loop.sources import LoopRecording, SourceContext, make_source
from rewind.monitor import MonitoredEpisode, RewindConfig
from rewind.train.policy_api import load_policy


def _phases() -> tuple[PhaseModel, np.ndarray]:
    """Latents moving along a line with time: early steps near -x, late ones near +x."""
    rng = np.random.default_rng(0)
    t = np.tile(np.linspace(0, 1, 60), 5)
    z = np.stack([10 * t, np.zeros_like(t), np.zeros_like(t)], 1) + rng.normal(0, 0.1, (len(t), 3))
    return PhaseModel.fit(z, t, GuidedConfig(phases=3, prototypes=2, pca_dim=2), seed=0), z


def test_kmeans_and_phases_follow_time() -> None:
    c, labels = kmeans(np.array([[0.0], [0.1], [10.0], [10.1]]), 2, np.random.default_rng(0))
    assert sorted(np.round(c[:, 0], 2).tolist()) == [0.05, 10.05] and labels[0] != labels[2]
    phases, z = _phases()
    p = phases.project(torch.as_tensor(z[[0, 30, 59]], dtype=torch.float32))
    assert phases.phase(p).tolist() == [0, 1, 2] and phases.phase_of.tolist() == [0, 0, 1, 1, 2, 2]


def test_drift_gate_and_guidance_step() -> None:
    phases, z = _phases()
    dyn = LatentDynamics(phases.centres.shape[1], h=2, action_dim=1)
    guide = DriftGuide(
        phases, dyn, torch.tensor([-1.0] * 3), torch.tensor([1e6] * 3), GuidedConfig(scale=0.5), first=1
    )
    x0 = torch.zeros(2, 4, 1)
    assert torch.equal(guide(x0, 5), x0)  # no latent set: off
    guide.set_latent(torch.as_tensor(z[[25]], dtype=torch.float32))
    d0, on = guide.drift(x0)
    x1 = guide(x0, 5)
    assert on.all() and not torch.equal(x1, x0)
    assert torch.equal(x1[:, [0, 3]], x0[:, [0, 3]])  # only the h executed actions move
    assert (guide.drift(x1)[0] < d0).all() and guide.guided == 1
    guide.high = torch.tensor([-0.5] * 3)  # band excludes every drift: unchanged
    assert torch.equal(guide(x0, 5), x0) and guide.calls == 2 and guide.guided == 1


def _noise_and_signal(n: int = 2000) -> tuple[np.ndarray, ...]:
    """Features with a loud unpredictable channel (std 10, redrawn every step) and a quiet one (std 1)
    that the action moves: ``z_next[1] = z[1] + a``."""
    rng = np.random.default_rng(0)
    z = np.stack([rng.normal(0, 10, n), rng.normal(0, 1, n)], 1)
    a = rng.normal(0, 1, (n, 1, 1))
    z_next = np.stack([rng.normal(0, 10, n), z[:, 1] + a[:, 0, 0]], 1)
    return z, a, z_next


def test_learned_projection_finds_the_predictable_direction_and_stays_whitened() -> None:
    z, a, z_next = _noise_and_signal()
    phases = PhaseModel.fit(z, np.linspace(0, 1, len(z)), GuidedConfig(pca_dim=1, phases=1, prototypes=2), 0)
    pca = phases.basis.numpy()
    assert abs(pca[0, 0]) > 10 * abs(pca[1, 0])  # PCA keeps the loud, unpredictable channel
    p = lambda x, w: (x - phases.mean.numpy()) @ w  # noqa: E731
    _, pca_mse = train_dynamics(p(z, pca), a, p(z_next, pca), 400, 0)
    w, dyn, mse = train_projection(z, a, z_next, phases.mean.numpy(), pca, 400, 0)
    assert abs(w[1, 0]) > 5 * abs(w[0, 0])  # the learned one turns to the channel the action moves
    assert mse < 0.5 * pca_mse
    assert 0.7 < p(z, w).std() < 1.3  # whitened, not shrunk to make prediction trivial
    refit = PhaseModel.fit(z, np.linspace(0, 1, len(z)), GuidedConfig(phases=1, prototypes=2), 0, basis=w)
    assert np.allclose(refit.basis.numpy(), w) and dyn.h == 1


def test_guided_source_labels_guided_and_uses_no_operator(tiny_run, tmp_path: Path) -> None:
    env = make_env("lift", max_steps=40)
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    cfg = RecoveryConfig(name="guided", keep="all", guided=GuidedConfig(rollouts=2, dynamics_steps=20))
    source = make_source(cfg, "lift")
    info = source.prepare(SourceContext(env, loaded, str(tiny_run["store"]), tmp_path, 1))
    assert len(info["d_low"]) == 3 and all(
        lo <= hi for lo, hi in zip(info["d_low"], info["d_high"], strict=True)
    )
    ep = MonitoredEpisode(env, loaded.policy, None, None, RewindConfig(auto_rewind=False))
    rec = LoopRecording(15, source.counted)
    out = run_episode(ep, source, 7, rec, 1)
    assert set(rec.sources) == {"guided"} and out.operator_steps == 0 and out.interventions == 0
    assert source.report()["guidance_calls"] >= 10 * cfg.guided.last_k // 3
    assert loaded.policy.guidance is None and loaded.policy.config.guidance_last_k == 10  # restored
    env.close()


def test_guided_source_with_a_learned_latent(tiny_run, tmp_path: Path) -> None:
    env = make_env("lift", max_steps=30)
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    g = GuidedConfig(rollouts=2, dynamics_steps=20, latent="learned", pca_dim=4)
    source = make_source(RecoveryConfig(name="guided", keep="all", guided=g), "lift")
    info = source.prepare(SourceContext(env, loaded, str(tiny_run["store"]), tmp_path, 1))
    assert info["latent"] == "learned" and np.isfinite(info["dynamics_mse"])
    pca = make_source(
        RecoveryConfig(name="guided", keep="all", guided=GuidedConfig(**{**g.__dict__, "latent": "pca"})),
        "lift",
    )
    pca_info = pca.prepare(SourceContext(env, loaded, str(tiny_run["store"]), tmp_path / "pca", 1))
    assert not torch.equal(source.models.phases.basis, pca.models.phases.basis)  # trained, not PCA
    assert pca_info["latent"] == "pca"
    env.close()


def test_guided_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"recovery.guided.latent must be one of \[pca, learned\]"):
        GuidedConfig(latent="vae")
    with pytest.raises(ConfigError, match="low_pct < high_pct"):
        GuidedConfig(low_pct=90, high_pct=30)
    with pytest.raises(ConfigError, match="recovery.guided.phases must be >= 1"):
        GuidedConfig(phases=0)
