"""The guided-collection sweep (issue 13 §2, ``bench/guided_sweep.py``): one guided collection per
setting, from one base policy, on the same env seeds, with no fine-tuning.

A setting (:class:`SweepSetting`) is what the sweep varies: the guidance ``scale`` (0 = plain rollouts,
the control), the ``sampler``, the number of guided denoising steps ``last_k``, the ``prototypes`` per
phase, the dynamics model's data and the ``latent`` (PCA or a learned projection). :func:`sweep_grid`
checks a grid and expands it; :func:`collect_guided` runs one setting exactly as a ``recovery=guided``
round collects (the same source, episodes and summary), without a store. Settings that share the
sampler, the prototypes, the dynamics data and the latent share the prepared models (:func:`prep_key`),
so the plain rollouts they need run once.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewind.config import ConfigError, check_choice, require
from rewind.envs.config import EnvConfig, build_env
from rewind.loop.config import RecoveryConfig
from rewind.loop.episodes import CollectRules, collect_episodes, summarize_outcomes
from rewind.loop.guided import DYNAMICS_DATA, LATENTS, SAMPLERS, GuidedConfig
from rewind.loop.guided_source import GuidedSource, GuideModels
from rewind.loop.sources import SourceContext
from rewind.monitor.episode import MonitoredEpisode, RewindConfig
from rewind.train.policy_api import load_policy
from rewind.utils.io import atomic_write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepSetting:
    """One guided collection of the sweep (``recovery.guided`` fields of the same names)."""

    scale: float
    sampler: str = "policy"
    last_k: int = 3
    prototypes: int = 4
    dynamics_data: str = "both"
    latent: str = "pca"

    @property
    def name(self) -> str:
        """The setting's folder name, e.g. ``ddim_k3_m4_both_c0.01`` (``..._learned_c0.3`` for a
        learned latent)."""
        lat = "" if self.latent == "pca" else f"_{self.latent}"
        return f"{self.sampler}_k{self.last_k}_m{self.prototypes}_{self.dynamics_data}{lat}_c{self.scale:g}"

    def guided(self, base: GuidedConfig) -> GuidedConfig:
        """``base`` with this setting's fields (checked by :class:`GuidedConfig`)."""
        return dataclasses.replace(
            base,
            scale=self.scale,
            sampler=self.sampler,
            last_k=self.last_k,
            prototypes=self.prototypes,
            dynamics_data=self.dynamics_data,
            latent=self.latent,
        )


PrepKey = tuple[str, int, str, str]


def prep_key(s: SweepSetting) -> PrepKey:
    """What the prepared models depend on among a setting's fields (not ``scale``, not ``last_k``)."""
    return s.sampler, s.prototypes, s.dynamics_data, s.latent


def sweep_grid(
    scales: Sequence[float],
    samplers: Sequence[str] = ("policy",),
    last_ks: Sequence[int] = (3,),
    prototypes: Sequence[int] = (4,),
    dynamics_data: Sequence[str] = ("both",),
    base: GuidedConfig | None = None,
    latents: Sequence[str] = ("pca",),
) -> list[SweepSetting]:
    """Every combination, scale-major last; the ``scale = 0`` control once per (sampler, prototypes,
    dynamics data), with the first latent (``last_k`` and the latent change nothing without guidance). Raises :class:`ConfigError` naming the
    first invalid value: an empty list, a duplicate, a negative scale, no ``0`` among the scales."""
    axes = {
        "scales": scales,
        "samplers": samplers,
        "last_ks": last_ks,
        "prototypes": prototypes,
        "dynamics_data": dynamics_data,
        "latents": latents,
    }
    for key, values in axes.items():
        require(len(values) > 0, f"sweep {key} must not be empty")
        require(len(set(values)) == len(values), f"sweep {key} has duplicates: {list(values)}")
    require(min(scales) >= 0, f"sweep scales must be >= 0; got {list(scales)}")
    require(0 in scales, f"sweep scales must include 0 (plain rollouts, the control); got {list(scales)}")
    for s in samplers:
        check_choice("sweep samplers", s, SAMPLERS)
    for d in dynamics_data:
        check_choice("sweep dynamics_data", d, DYNAMICS_DATA)
    for lat in latents:
        check_choice("sweep latents", lat, LATENTS)
    base = base or GuidedConfig()
    out: list[SweepSetting] = []
    for sampler, m, data, lat, k, c in itertools.product(
        samplers, prototypes, dynamics_data, latents, last_ks, sorted(scales)
    ):
        setting = SweepSetting(
            float(c), sampler, k if c > 0 else min(last_ks), m, data, lat if c > 0 else latents[0]
        )
        setting.guided(base)  # raises on an invalid value
        if setting not in out:
            out.append(setting)
    return out


def collect_guided(
    env_cfg: EnvConfig,
    weights: str,
    demos: str,
    guided: GuidedConfig,
    seeds: Sequence[int],
    folder: Path,
    models: GuideModels | None = None,
    seed: int = 0,
    round_: int = 1,
    device: str = "cpu",
    ddim_eta: float | None = None,
) -> tuple[dict[str, Any], GuideModels]:
    """One guided collection into ``folder/summary.json`` (a round's collect summary, plus the setting,
    the sampler's DDIM eta and the wall time); returns it and the prepared models (``models``: reuse
    them). ``ddim_eta``: the eta every rollout samples with (``None``: the policy's own)."""
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    env = build_env(env_cfg)
    try:
        loaded = load_policy(weights, env, env_cfg.name, torch.device(device), ddim_eta=ddim_eta)
        cfg = RecoveryConfig(name="guided", keep="success", guided=guided)
        source = GuidedSource(cfg, env_cfg.name, models=models)
        ctx = SourceContext(env, loaded, demos, folder, round_, False, seed)
        prepared = source.prepare(ctx)
        rw = RewindConfig(auto_rewind=False)

        def make() -> MonitoredEpisode:
            return MonitoredEpisode(env, loaded.policy, None, None, rw, device)

        outcomes = collect_episodes(
            make, source, seeds, None, CollectRules("success"), loaded.version, round_
        )
    finally:
        env.close()
    summary = {
        **summarize_outcomes(outcomes),
        "source": {**prepared, **source.report()},
        "guided": dataclasses.asdict(guided),
        "weights": str(loaded.folder),
        "ddim_eta": getattr(getattr(loaded.policy, "config", None), "ddim_eta", None),
        "seeds": [int(seeds[0]), int(seeds[-1])] if len(seeds) else [],
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    atomic_write_json(folder / "summary.json", summary)
    assert source.models is not None
    return summary, source.models


def check_paths(weights: str, demos: str) -> None:
    """One-line errors for a missing policy run folder or demo store."""
    for label, path in (("--base-weights", weights), ("--demos", demos)):
        if not Path(path).exists():
            raise ConfigError(f"{label} {path} does not exist")
