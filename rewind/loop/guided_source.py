"""``recovery=guided``: the recovery source that prepares and applies ReGuide guidance
(:mod:`rewind.loop.guided` has the models and the method)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from rewind.config import ConfigError
from rewind.loop.config import RecoveryConfig
from rewind.loop.guided import (
    DriftGuide,
    GuidedConfig,
    LatentDynamics,
    PhaseModel,
    train_dynamics,
    train_projection,
)
from rewind.loop.guided_diagnostics import GuidanceDiagnostics, use_sampler
from rewind.loop.sources import CONTINUE, RecoverySource, SourceContext
from rewind.monitor.episode import MonitoredEpisode, RewindConfig, StepResult
from rewind.policies.base import ActionChunkPolicy, to_torch_obs
from rewind.policies.obs_conditioned import GuidedChunkPolicy
from rewind.store import ReplayStore
from rewind.utils.io import atomic_write_json
from rewind.utils.seeding import torch_generator

log = logging.getLogger(__name__)

Trajectory = tuple[dict[str, np.ndarray], np.ndarray]


def episode_latents(policy: ActionChunkPolicy, obs: dict[str, np.ndarray]) -> torch.Tensor:
    """Encoder features ``[T, F]`` of every step's window (the first observation repeated at the start)."""
    keys = list(getattr(policy, "used_obs_keys", None) or obs)
    n, to = len(next(iter(obs.values()))), policy.n_obs_steps
    idx = np.clip(np.arange(n)[:, None] + np.arange(-to + 1, 1)[None], 0, None)
    with torch.no_grad():
        return policy.encode({k: torch.as_tensor(obs[k][idx]).float() for k in keys}).float()


def rollouts(ctx: SourceContext, n: int, seed0: int) -> tuple[list[Trajectory], float]:
    """``n`` plain rollouts of the current policy (no monitor): ``(obs arrays, actions)`` and success rate."""
    ep = MonitoredEpisode(ctx.env, ctx.loaded.policy, None, None, RewindConfig(auto_rewind=False))
    out, ok = [], 0
    for i in range(n):
        steps: list[StepResult] = []
        ep.generator = torch_generator(seed0 + i)
        ep.reset(seed0 + i)
        ep.on_step = steps.append
        while not ep.done:
            ep.policy_step()
        ok += int(ep.success)
        out.append(
            (
                {k: np.stack([s.obs[k] for s in steps]) for k in steps[0].obs},
                np.stack([s.action for s in steps]),
            )
        )
    return out, ok / max(n, 1)


def _transitions(
    policy: ActionChunkPolicy, phases: PhaseModel | None, trajs: list[Trajectory], h: int, stride: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Latents (projected by ``phases``; ``None``: the raw encoder features), the next ``h``
    normalised actions and the latent ``h`` steps later."""
    ps, acts, nexts = [], [], []
    for obs, actions in trajs:
        if len(actions) <= h:
            continue
        with torch.no_grad():
            z = episode_latents(policy, obs)
            p = z if phases is None else phases.project(z)
            a = policy.normalizer.normalize("action", torch.as_tensor(actions).float())
        t = np.arange(0, len(actions) - h, stride)
        ps.append(p[t])
        acts.append(torch.stack([a[i : i + h] for i in t]))
        nexts.append(p[t + h])
    return torch.cat(ps).numpy(), torch.cat(acts).numpy(), torch.cat(nexts).numpy()


@dataclass
class GuideModels:
    """What guidance needs from a round's preparation: prototypes, dynamics, per-phase drift bands."""

    phases: PhaseModel
    dynamics: LatentDynamics
    low: torch.Tensor
    high: torch.Tensor
    info: dict[str, Any]


def drift_bands(d: np.ndarray, phase: np.ndarray, n: int, g: GuidedConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per-phase ``low_pct`` / ``high_pct`` drift percentiles (all phases pooled where one has < 5)."""
    pooled = np.percentile(d, [g.low_pct, g.high_pct])
    bands = [
        np.percentile(d[phase == k], [g.low_pct, g.high_pct]) if (phase == k).sum() >= 5 else pooled
        for k in range(n)
    ]
    return np.array([b[0] for b in bands], np.float32), np.array([b[1] for b in bands], np.float32)


def build_guide_models(ctx: SourceContext, g: GuidedConfig) -> GuideModels:
    """Phase prototypes from the demos, latent dynamics and drift bands from plain rollouts of the
    policy as it samples now (:func:`~rewind.loop.guided_diagnostics.use_sampler` first)."""
    policy = ctx.loaded.policy
    with ReplayStore.open(ctx.demos_path) as store:
        demos = [(ep.obs, ep.actions) for ep in (store.load(i.id) for i in store.episodes(success=True))]
    lat = [episode_latents(policy, obs).numpy() for obs, _ in demos]
    times = np.concatenate([np.linspace(0, 1, len(z)) for z in lat])
    seed = ctx.seed + ctx.round
    phases = PhaseModel.fit(np.concatenate(lat), times, g, seed)
    plain, base_success = rollouts(ctx, g.rollouts, g.rollout_seed + 1000 * ctx.round)
    h = policy.n_action_steps
    data = {"both": demos + plain, "rollouts": plain, "demos": demos}[g.dynamics_data]
    if g.latent == "learned":
        basis, dyn, mse = train_projection(
            *_transitions(policy, None, data, h),
            phases.mean.numpy(),
            phases.basis.numpy(),
            g.dynamics_steps,
            seed,
            g.projection_cov_weight,
        )
        phases = PhaseModel.fit(np.concatenate(lat), times, g, seed, basis=basis)
    else:
        dyn, mse = train_dynamics(*_transitions(policy, phases, data, h), g.dynamics_steps, seed)
    p, a, _ = _transitions(policy, phases, plain, h, stride=h)
    with torch.no_grad():
        pt = torch.as_tensor(p)
        ph = phases.phase(pt)
        d = phases.drift(dyn(pt, torch.as_tensor(a)), ph, g.temperature).numpy()
    low, high = drift_bands(d, ph.numpy(), phases.n_phases, g)
    info = {
        "base_rollouts": g.rollouts,
        "base_rollout_success": base_success,
        "dynamics_data": g.dynamics_data,
        "latent": g.latent,
        "dynamics_mse": mse,
        "transitions": int(len(p)),
        "d_low": low.tolist(),
        "d_high": high.tolist(),
    }
    return GuideModels(phases, dyn, torch.as_tensor(low), torch.as_tensor(high), info)


class GuidedSource(RecoverySource):
    """ReGuide: guided rollouts of the current policy, labelled ``guided``; no alarms, no operator.

    ``models``: prepared :class:`GuideModels` to reuse (a sweep over settings that do not change them:
    ``scale``, ``last_k``); ``None``: :meth:`prepare` builds them.
    """

    name = "guided"
    counted: ClassVar[frozenset[str]] = frozenset()
    reacts_to_alarms = False
    policy_source = "guided"
    train_sample_weights: ClassVar[dict[str, float]] = {}

    def __init__(self, cfg: RecoveryConfig, env_name: str, models: GuideModels | None = None) -> None:
        super().__init__(cfg, env_name)
        self.models = models

    def prepare(self, ctx: SourceContext) -> dict[str, Any]:
        """Switch the sampler, build (or reuse) the models, install the guide and its diagnostics."""
        policy, g = ctx.loaded.policy, self.cfg.guided
        if not isinstance(policy, GuidedChunkPolicy):
            raise ConfigError(
                f"recovery=guided needs a diffusion or flow policy; got {type(policy).__name__}"
            )
        steps = use_sampler(policy, g.sampler, g.inference_steps)
        if g.last_k > steps:
            raise ConfigError(
                f"recovery.guided.last_k must be <= the sampler's {steps} denoising steps; got {g.last_k}"
            )
        if self.models is None:
            self.models = build_guide_models(ctx, g)
        m, first = self.models, policy.n_obs_steps - 1
        self.guide = DriftGuide(m.phases, m.dynamics, m.low, m.high, g, first)
        self.diagnostics = GuidanceDiagnostics(self.guide, g.measure_change)
        info = {
            **m.info,
            "sampler": g.sampler,
            "denoising_steps": steps,
            "scale": g.scale,
            "last_k": g.last_k,
        }
        atomic_write_json(ctx.folder / "guided.json", info)
        return info

    def begin(self, ep: MonitoredEpisode, seed: int) -> None:
        """Install the guidance on the policy for this episode (none at ``scale = 0``)."""
        super().begin(ep, seed)
        self._last_k = ep.policy.config.guidance_last_k
        ep.policy.config.guidance_last_k = self.cfg.guided.last_k
        ep.policy.guidance = self.guide if self.cfg.guided.scale > 0 else None
        self.guide.set_latent(None)
        self.diagnostics.begin_episode()

    def before_step(self, ep: MonitoredEpisode) -> None:
        """Record the last inference; when the policy is about to sample a chunk, give the guide the
        window's latent and start recording the new inference."""
        policy = ep.policy
        self.diagnostics.finish_inference(policy)
        state = policy.get_state()
        if state.action_queue:
            return
        now = to_torch_obs({k: ep.obs[k][None] for k in ep.keys}, ep.device)
        hist = [*state.obs_history, now][-policy.n_obs_steps :]
        hist = [hist[0]] * (policy.n_obs_steps - len(hist)) + hist
        window = {k: torch.stack([x[k] for x in hist], 1) for k in now}
        with torch.no_grad():
            self.guide.set_latent(policy.encode(window))
        self.diagnostics.start_inference(policy, window, ep.generator)

    def on_trigger(self, ep: MonitoredEpisode, res: StepResult, recording: Any) -> str:
        """Guided rollouts do not react to alarms."""
        return CONTINUE

    def finish(self, ep: MonitoredEpisode) -> None:
        """Record the episode's diagnostics; remove the guidance from the policy."""
        self.diagnostics.end_episode(ep.policy, ep.success)
        ep.policy.guidance = None
        ep.policy.config.guidance_last_k = self._last_k

    def report(self) -> dict[str, Any]:
        """Chunk inferences seen and changed (denoising-step calls) and the round's diagnostics."""
        return {
            "guidance_calls": self.guide.calls,
            "guided_calls": self.guide.guided,
            "diagnostics": self.diagnostics.summary(),
        }
