"""What guided collection did to the policy (issue 13 §2), so that a null result has a cause.

Per chunk inference of a guided round (:class:`GuidanceDiagnostics`, driven by
:class:`~rewind.loop.guided_source.GuidedSource`):

* **gated**: guidance changed the clean-action estimate in at least one of the last ``K`` denoising
  steps (its drift was inside the phase's band and ``scale > 0``);
* **drift** of the chunk that was executed (the predicted latent's softmin distance to the phase
  prototypes, :meth:`~rewind.loop.guided.DriftGuide.drift`) and whether it lies inside the band;
* **realized drift**: the same distance for the latent the episode actually reached when the chunk's
  actions were done (the next inference's window, same phase), and the **latent error**, the L2
  distance between that latent and the predicted one (whitened latent units). Guidance lowers the
  predicted drift by construction; whether the realized drift falls with it says if the states
  moved toward the prototypes or guidance only exploited the dynamics model's error. The last
  inference of an episode has no realized latent;
* **action change**: the same chunk sampled again *without* guidance from the same generator state
  (same initial noise, same DDPM step noise), compared on the executed actions: the mean L2 norm of
  the difference per action (env units) and the mean absolute difference per dimension (normalised
  units, where the action range is ``[-1, 1]``). An inference where the gate stayed off counts as 0
  (the hook returned the estimate unchanged). ``guidance_term`` is the summed norm of the
  corrections ``scale * grad`` themselves (normalised units, row 0).

Per episode: the max and the mean drift; over the round, the AUROC of each for failure
(:func:`drift_auroc`: 0.5 = drift says nothing about failure, 1 = every failed episode drifted more
than every successful one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rewind.loop.guided import DriftGuide
from rewind.monitor.detection import auroc
from rewind.policies.base import Obs
from rewind.policies.obs_conditioned import GuidedChunkPolicy
from rewind.train.policy_api import set_sampler


def use_sampler(policy: GuidedChunkPolicy, sampler: str, steps: int | None) -> int:
    """Switch ``policy`` (the round's collection copy) to ``sampler`` (``policy``, ``ddim``, ``ddpm``)
    with ``steps`` denoising steps (``None``: the sampler's default); returns the steps now used
    (:func:`rewind.train.policy_api.set_sampler`, errors named ``recovery.guided.*``)."""
    return set_sampler(policy, sampler, steps, key="recovery.guided.")


def drift_auroc(scores: list[float], failed: list[bool]) -> float | None:
    """AUROC of ``scores`` for failure (failed episodes positive); ``None`` without both classes."""
    pos = [s for s, f in zip(scores, failed, strict=True) if f]
    neg = [s for s, f in zip(scores, failed, strict=True) if not f]
    return auroc(pos, neg) if pos and neg else None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def action_change(
    policy: GuidedChunkPolicy,
    chunk: torch.Tensor,
    window: Obs,
    gen_state: torch.Tensor,
    gen_device: torch.device | None,
    num_samples: int = 1,
) -> tuple[float, float]:
    """How far the executed actions of ``chunk`` ``[1, H, Da]`` (env units) are from the chunk the
    policy samples for ``window`` *without* guidance from the generator state ``gen_state`` (the one
    ``chunk`` was sampled from, ``num_samples`` per inference as then): the mean L2 norm of the
    difference per action (env units) and the mean absolute difference (normalised units)."""
    gen = torch.Generator(device=gen_device or "cpu")
    gen.set_state(gen_state)
    saved, policy.guidance = policy.guidance, None
    try:
        plain = policy.predict_chunk(window, num_samples, gen)[:, 0]
    finally:
        policy.guidance = saved
    first = policy.n_obs_steps - 1
    sl = slice(first, first + policy.n_action_steps)
    diff = (chunk[0, sl] - plain[0, sl]).float()
    unit = policy.normalizer.normalize("action", chunk) - policy.normalizer.normalize("action", plain)
    return float(diff.norm(dim=-1).mean()), float(unit[0, sl].abs().mean())


@dataclass
class _Pending:
    """An inference whose chunk is being sampled: its window, generator state and the chunk before it."""

    window: Obs
    gen_state: torch.Tensor | None
    gen_device: torch.device | None
    previous: Any


@dataclass
class _Prediction:
    """An executed chunk's predicted latent ``[d]``, its window's phase and predicted drift; gated or not."""

    latent: torch.Tensor
    phase: torch.Tensor
    drift: float
    gated: bool


@dataclass
class EpisodeDiagnostics:
    """One guided episode: per-inference drift, band, gate and action change; its outcome."""

    drift: list[float] = field(default_factory=list)
    in_band: list[bool] = field(default_factory=list)
    gated: list[bool] = field(default_factory=list)
    change: list[float] = field(default_factory=list)
    change_norm: list[float] = field(default_factory=list)
    term: list[float] = field(default_factory=list)
    #: (predicted drift, realized drift, latent error, gated) of each inference with a realized latent
    realized: list[tuple[float, float, float, bool]] = field(default_factory=list)
    success: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Per-episode summary (no per-inference lists)."""
        return {
            "success": self.success,
            "inferences": len(self.drift),
            "gated": int(sum(self.gated)),
            "in_band": int(sum(self.in_band)),
            "max_drift": max(self.drift) if self.drift else None,
            "mean_drift": _mean(self.drift),
            "mean_action_change": _mean(self.change),
        }


class GuidanceDiagnostics:
    """Collects the diagnostics of a guided round (see the module docstring).

    Args:
        guide: the round's :class:`DriftGuide`; measure_change: sample gated chunks again without
            guidance to measure the action change (``recovery.guided.measure_change``).
    """

    def __init__(self, guide: DriftGuide, measure_change: bool) -> None:
        self.guide, self.measure_change = guide, measure_change
        self.episodes: list[EpisodeDiagnostics] = []
        self._ep: EpisodeDiagnostics | None = None
        self._pending: _Pending | None = None
        self._predicted: _Prediction | None = None

    def begin_episode(self) -> None:
        """A new episode starts."""
        self._ep, self._pending, self._predicted = EpisodeDiagnostics(), None, None

    def _realize(self) -> None:
        """Pair the last executed chunk's prediction with the latent the guide holds now (reached)."""
        pred, self._predicted = self._predicted, None
        if pred is None or self._ep is None or self.guide.p is None:
            return
        with torch.no_grad():
            real = self.guide.p[0]
            d = self.guide.phases.drift(real[None], pred.phase[None], self.guide.temperature)
        error = float((real - pred.latent).norm())
        self._ep.realized.append((pred.drift, float(d[0]), error, pred.gated))

    def start_inference(self, policy: GuidedChunkPolicy, window: Obs, gen: torch.Generator | None) -> None:
        """The policy is about to sample a chunk for ``window`` with ``gen`` (after ``set_latent``)."""
        self._realize()
        chunks = policy.last_chunks
        self._pending = _Pending(
            window,
            None if gen is None else gen.get_state(),
            None if gen is None else gen.device,
            chunks[-1] if chunks else None,
        )

    def finish_inference(self, policy: GuidedChunkPolicy) -> None:
        """Record the inference started last, once its chunk exists (no-op otherwise)."""
        pending, self._pending = self._pending, None
        chunks = policy.last_chunks
        if pending is None or self._ep is None or not chunks or chunks[-1] is pending.previous:
            return
        record = chunks[-1]
        chunk = record.actions[:1]  # [1, H, Da] env units, sample 0 (the executed one)
        x = policy.normalizer.normalize("action", chunk)
        with torch.no_grad():
            predicted = self.guide.predict(x)  # the dynamics model runs once per recorded chunk
            d, on = self.guide.latent_drift(predicted)
        ep, gated = self._ep, self.guide.inference_gated
        assert self.guide.ph is not None
        self._predicted = _Prediction(predicted[0], self.guide.ph[0], float(d[0]), gated)
        ep.drift.append(float(d[0]))
        ep.in_band.append(bool(on[0]))
        ep.gated.append(gated)
        ep.term.append(self.guide.inference_term)
        if not self.measure_change:
            return
        change, change_norm = 0.0, 0.0
        if gated and pending.gen_state is not None:
            ns = 1 if record.samples is None else record.samples.shape[1]
            change, change_norm = action_change(
                policy, chunk, pending.window, pending.gen_state, pending.gen_device, ns
            )
        ep.change.append(change)
        ep.change_norm.append(change_norm)

    def end_episode(self, policy: GuidedChunkPolicy, success: bool) -> None:
        """The episode is over (records its last inference and its outcome)."""
        self.finish_inference(policy)
        if self._ep is not None:
            self._ep.success = bool(success)
            self.episodes.append(self._ep)
        self._ep = None

    def summary(self) -> dict[str, Any]:
        """Round totals (fractions over inferences, AUROCs over episodes) and the per-episode rows."""
        eps = self.episodes
        gated = [g for e in eps for g in e.gated]
        changes = [c for e in eps for c in e.change]
        gated_changes = [c for e in eps for c, g in zip(e.change, e.gated, strict=False) if g]
        failed = [not e.success for e in eps]
        drifted = [e for e in eps if e.drift]
        return {
            **self._realized_summary(),
            "inferences": len(gated),
            "gated_fraction": float(np.mean(gated)) if gated else 0.0,
            "in_band_fraction": _mean([float(b) for e in eps for b in e.in_band]),
            "action_change_mean": _mean(changes) if self.measure_change else None,
            "action_change_gated_mean": _mean(gated_changes) if self.measure_change else None,
            "action_change_norm_mean": _mean([c for e in eps for c in e.change_norm])
            if self.measure_change
            else None,
            "guidance_term_gated_mean": _mean(
                [t for e in eps for t, g in zip(e.term, e.gated, strict=True) if g]
            ),
            "drift_mean": _mean([d for e in eps for d in e.drift]),
            "drift_auroc_max": drift_auroc([max(e.drift) for e in drifted], [not e.success for e in drifted]),
            "drift_auroc_mean": drift_auroc(
                [float(np.mean(e.drift)) for e in drifted], [not e.success for e in drifted]
            ),
            "episodes_failed": int(sum(failed)),
            "per_episode": [e.as_dict() for e in eps],
        }

    def _realized_summary(self) -> dict[str, Any]:
        """Predicted vs realized drift and the latent error, over all and over gated inferences."""
        pairs = [r for e in self.episodes for r in e.realized]
        gated = [r for r in pairs if r[3]]
        return {
            "realized_pairs": len(pairs),
            "predicted_drift_paired_mean": _mean([r[0] for r in pairs]),
            "realized_drift_mean": _mean([r[1] for r in pairs]),
            "latent_error_mean": _mean([r[2] for r in pairs]),
            "predicted_drift_gated_mean": _mean([r[0] for r in gated]),
            "realized_drift_gated_mean": _mean([r[1] for r in gated]),
        }
