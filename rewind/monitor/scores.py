"""Failure scores: one number per inference step that rises when the policy is failing.

Every score implements :class:`FailureScore`: the monitored episode calls :meth:`FailureScore.update`
after each control step with the policy's rollout state; the score returns a new value when the policy
computed a new chunk (every ``n_action_steps`` steps) and ``None`` otherwise, so a score costs nothing
between inferences. Scores are per env: a monitored episode drives one env per policy state (``B = 1``).

Names (``monitor.score=``):

* ``tide``: Rewind-IL's Temporal Inter-chunk Discrepancy Estimate, the mean squared difference of
  two consecutive chunks over the steps both predict (no extra inference).
* ``stac``: STAC/Sentinel's baseline: MMD (RBF kernel, median-heuristic bandwidth) between the
  ``num_samples`` sampled chunks of consecutive inferences over their overlap, summed over the
  episode (cumulative, as in STAC).
* ``embedding_ood``: mean distance of the frozen encoder features to their ``k`` nearest training
  features (policy-agnostic baseline; needs reference features, see :func:`encode_store`).
* ``random``: uniform noise, a control.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch

from rewind.policies.base import ActionChunkPolicy, ChunkRecord


class FailureScore(ABC):
    """A failure score of one rollout.

    Attributes:
        name: registry name.
        num_samples: chunks the policy must sample per inference (``S``; 1 for all but ``stac``).
        cumulative: the score accumulates over the episode (its last value is its maximum).
    """

    name: str = ""
    num_samples: int = 1
    cumulative: bool = False

    def reset(self) -> None:  # noqa: B027 (optional hook)
        """Start of an episode (and after a rewind: the previous chunk no longer applies)."""

    def for_episode(self, seed: int) -> FailureScore:
        """A copy with its own episode state, for the episode with env seed ``seed`` (batched rollouts
        keep one per episode; settings and reference data are shared, :meth:`reset` makes the state)."""
        score = copy.copy(self)
        score.reset()
        return score

    @abstractmethod
    def update(self, policy: ActionChunkPolicy) -> float | None:
        """The score after the policy's latest control step, or ``None`` when no new chunk was made."""

    def params(self) -> dict[str, Any]:
        """The constructor arguments to save with a calibration (JSON-able; reference data excluded)."""
        return {}


class _ChunkScore(FailureScore):
    """Scores that compare the two latest chunks; fires once per new chunk."""

    def __init__(self) -> None:
        self._last_id: int | None = None

    def reset(self) -> None:
        self._last_id = None

    def update(self, policy: ActionChunkPolicy) -> float | None:
        chunks = policy.last_chunks
        if not chunks or id(chunks[-1]) == self._last_id:
            return None
        self._last_id = id(chunks[-1])
        return self.on_chunk(policy, chunks)

    def on_chunk(self, policy: ActionChunkPolicy, chunks: list[ChunkRecord]) -> float | None:
        """The score when ``chunks[-1]`` is new (default: :meth:`compare` with its predecessor)."""
        if len(chunks) < 2:
            return self.first_value()
        return self.compare(chunks[-2], chunks[-1], policy.n_obs_steps)

    def first_value(self) -> float | None:
        """Value at the first chunk of an episode (no predecessor: no score)."""
        return None

    def compare(self, prev: ChunkRecord, new: ChunkRecord, n_obs_steps: int) -> float:
        """Score of ``new`` given ``prev``."""
        raise NotImplementedError


def overlap(prev: ChunkRecord, new: ChunkRecord, n_obs_steps: int) -> tuple[slice, slice]:
    """Index ranges of ``prev`` and ``new`` that predict the same control steps from the current one
    on (``T = H - Ta - To + 1`` steps in a normal rollout; empty when the chunks do not overlap)."""
    horizon = new.actions.shape[-2]
    s0, s1 = int(prev.start_step[0]), int(new.start_step[0])
    lo, hi = s1 + n_obs_steps - 1, s0 + horizon  # control steps [lo, hi)
    if hi <= lo:
        return slice(0, 0), slice(0, 0)
    return slice(lo - s0, hi - s0), slice(lo - s1, hi - s1)


def _dims(dims: list[int] | None) -> list[int] | None:
    if dims is not None and (not dims or any(int(d) < 0 for d in dims)):
        raise ValueError(f"action dims must be a non-empty list of indices >= 0 (or null: all); got {dims}")
    return None if dims is None else [int(d) for d in dims]


class TideScore(_ChunkScore):
    """TIDE: ``1/(B D T) sum (A_prev - A_new)^2`` over the overlap of consecutive chunks.

    ``dims`` selects the action dimensions compared (``None``: all). The default monitor compares the
    continuous motion dimensions only: the binary grip command's timing jitter between consecutive
    chunks dominates the score otherwise. ``window`` averages the last ``window`` discrepancies
    (1: Rewind-IL's per-step score; the default monitor uses 2, see docs/monitor.md). ``samples`` > 1
    compares the mean of that many chunks sampled per inference (``[B, S, H, Da]`` averaged over ``S``;
    the executed chunk is still sample 0): a stochastic sampler's per-chunk noise then counts less
    than a change of the policy's intent (1: Rewind-IL's executed chunks, no extra inference).
    """

    name = "tide"

    def __init__(self, dims: list[int] | None = None, window: int = 1, samples: int = 1) -> None:
        super().__init__()
        if window < 1:
            raise ValueError(f"tide window must be >= 1; got {window}")
        if samples < 1:
            raise ValueError(f"tide samples must be >= 1; got {samples}")
        self.dims, self.window, self.num_samples = _dims(dims), int(window), int(samples)
        self._recent: list[float] = []

    def _chunk(self, rec: ChunkRecord) -> torch.Tensor:
        """``[B, H, Da]``: the executed chunk, or the mean of the ``samples`` drawn."""
        if self.num_samples == 1:
            return rec.actions
        if rec.samples is None or rec.samples.shape[1] < self.num_samples:
            raise ValueError(f"tide with samples={self.num_samples} needs that many chunks per inference")
        return rec.samples[:, : self.num_samples].mean(dim=1)

    def reset(self) -> None:
        super().reset()
        self._recent = []

    def compare(self, prev: ChunkRecord, new: ChunkRecord, n_obs_steps: int) -> float:
        a, b = overlap(prev, new, n_obs_steps)
        if a.stop == a.start:
            return 0.0
        d = self._chunk(prev)[:, a] - self._chunk(new)[:, b]
        if self.dims is not None:
            d = d[..., self.dims]
        self._recent = (
            [*self._recent[-(self.window - 1) :], float(d.square().mean())]
            if self.window > 1
            else [float(d.square().mean())]
        )
        return sum(self._recent) / len(self._recent)

    def params(self) -> dict[str, Any]:
        return {"dims": self.dims, "window": self.window, "samples": self.num_samples}


def mmd_rbf(x: torch.Tensor, y: torch.Tensor) -> float:
    """Biased MMD^2 between samples ``x`` ``[n, d]`` and ``y`` ``[m, d]``, RBF kernel with the median
    pairwise distance as bandwidth."""
    z = torch.cat([x, y]).double()
    d2 = torch.cdist(z, z).square()
    med = d2[d2 > 0].median() if bool((d2 > 0).any()) else torch.tensor(1.0, dtype=z.dtype)
    k = torch.exp(-d2 / med.clamp_min(1e-12))
    n = x.shape[0]
    return float(k[:n, :n].mean() + k[n:, n:].mean() - 2 * k[:n, n:].mean())


class StacScore(_ChunkScore):
    """STAC: cumulative MMD between the sampled chunks of consecutive inferences (over the overlap)."""

    name = "stac"
    cumulative = True

    def __init__(self, num_samples: int = 32, dims: list[int] | None = None) -> None:
        super().__init__()
        if num_samples < 2:
            raise ValueError(f"stac needs num_samples >= 2; got {num_samples}")
        self.num_samples, self.dims = int(num_samples), _dims(dims)
        self._total = 0.0

    def params(self) -> dict[str, Any]:
        return {"num_samples": self.num_samples, "dims": self.dims}

    def reset(self) -> None:
        super().reset()
        self._total = 0.0

    def compare(self, prev: ChunkRecord, new: ChunkRecord, n_obs_steps: int) -> float:
        if prev.samples is None or new.samples is None:
            raise ValueError("stac needs the policy to sample num_samples > 1 chunks per inference")
        a, b = overlap(prev, new, n_obs_steps)
        if a.stop > a.start:
            x, y = prev.samples[0, :, a], new.samples[0, :, b]
            if self.dims is not None:
                x, y = x[..., self.dims], y[..., self.dims]
            self._total += mmd_rbf(x.flatten(1), y.flatten(1))
        return self._total


class EmbeddingOODScore(_ChunkScore):
    """Mean distance of the current encoder features to their ``k`` nearest reference features."""

    name = "embedding_ood"

    def __init__(self, reference: np.ndarray | torch.Tensor, k: int = 5) -> None:
        super().__init__()
        ref = torch.as_tensor(np.asarray(reference), dtype=torch.float32)
        if ref.ndim != 2 or ref.shape[0] < k:
            raise ValueError(f"embedding_ood needs reference features [N >= k={k}, F]; got {list(ref.shape)}")
        self.reference, self.k = ref, int(k)

    def on_chunk(self, policy: ActionChunkPolicy, chunks: list[ChunkRecord]) -> float:
        d = torch.cdist(policy_features(policy)[:1], self.reference)[0]
        return float(d.topk(self.k, largest=False).values.mean())

    def params(self) -> dict[str, Any]:
        return {"k": self.k}


class RandomScore(_ChunkScore):
    """Uniform noise in [0, 1) at every inference: the control every detector must beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)

    def for_episode(self, seed: int) -> RandomScore:
        """A copy drawing from its own stream, seeded by ``(seed, episode seed)``."""
        score = copy.copy(self)
        score.reset()
        score._rng = np.random.default_rng([self.seed, int(seed)])
        return score

    def first_value(self) -> float:
        return float(self._rng.random())

    def compare(self, prev: ChunkRecord, new: ChunkRecord, n_obs_steps: int) -> float:
        return float(self._rng.random())

    def params(self) -> dict[str, Any]:
        return {"seed": self.seed}


def policy_features(policy: ActionChunkPolicy) -> torch.Tensor:
    """Encoder features ``[B, F]`` of the policy's current observation window (its history)."""
    hist = policy.get_state().obs_history
    if not hist:
        raise ValueError("the policy has no observation history yet")
    hist = [hist[0]] * (policy.n_obs_steps - len(hist)) + hist
    window = {k: torch.stack([h[k] for h in hist], dim=1) for k in hist[0]}
    with torch.no_grad():
        return policy.encode(window).float()


SCORES: dict[str, type[FailureScore]] = {
    "tide": TideScore,
    "stac": StacScore,
    "embedding_ood": EmbeddingOODScore,
    "random": RandomScore,
}


def make_score(name: str, **kwargs: Any) -> FailureScore:
    """A score by name; an unknown name lists the valid ones."""
    if name not in SCORES:
        raise KeyError(f"unknown failure score '{name}'; valid: {', '.join(SCORES)}")
    return SCORES[name](**kwargs)
