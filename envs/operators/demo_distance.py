"""The demos' distance: how far an observation is from the nearest demo state, relative to how far
held-out demos are from the others (:class:`DemoDistance`).

:class:`~rewind.envs.operators.human_like.HumanLikeOperator` turns the ratio into its unfamiliarity
(the farther from the demos, the slower, noisier and more fallible); ``bench/operator_distance.py``
measures it at new demo states, takeovers and first corrections. Every dim is divided by its demos'
span (per key or per dim, :data:`DISTANCE_SCALES`); the search is brute force in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rewind.config import check_choice
from rewind.store import ReplayStore

#: ``recovery.operator_model.distance_scale`` values (see :class:`DemoDistance`).
DISTANCE_SCALES = ("per_key", "per_dim")


class DemoDistance:
    """Nearest-demo-state distance in a min/max-normalised observation space (brute force, numpy).

    Args:
        states: ``[N, D]`` demo observations (the ``keys`` concatenated in order).
        episode: ``[N]`` episode index of every row (the reference holds whole episodes out).
        keys: the observation keys, in the order of ``states``' columns.
        widths: ``[len(keys)]`` number of columns of each key (default: every column its own key).
        scale: ``per_key`` divides every dim by its key's widest demo span, so the dims of a key keep
            their physical proportions (a can's tilt, near-constant in demos, does not outweigh its
            position); ``per_dim`` divides every dim by its own span (the original model, where a
            dimension that barely varies in the demos dominates every distance).
        min_scale: no dim is divided by less than this (observation units, e.g. 0.05 m or rad).
        quantile: the reference distance is this quantile of held-out demo states' distances (0.5).
        folds: episode folds for the reference; max_queries: held-out states sampled for it.
        seed: seeds the sampling of those states.
    """

    def __init__(
        self,
        states: np.ndarray,
        episode: np.ndarray,
        keys: Sequence[str],
        quantile: float = 0.5,
        folds: int = 5,
        max_queries: int = 2000,
        seed: int = 0,
        widths: Sequence[int] | None = None,
        scale: str = "per_key",
        min_scale: float = 0.0,
    ) -> None:
        states = np.asarray(states, dtype=np.float64)
        episode = np.asarray(episode)
        n_eps = len(np.unique(episode))
        if states.ndim != 2 or len(states) != len(episode) or n_eps < 2:
            raise ValueError(
                f"DemoDistance needs [N, D] states from >= 2 episodes; got {states.shape}, {n_eps}"
            )
        self.keys = list(keys)
        self.lo = states.min(0)
        self.scale = _dim_scale(states.max(0) - self.lo, widths or [1] * states.shape[1], scale, min_scale)
        self.x = (states - self.lo) / self.scale
        self._sq = np.einsum("ij,ij->i", self.x, self.x)
        self.reference = self._reference(episode, quantile, folds, max_queries, np.random.default_rng(seed))

    @classmethod
    def from_store(
        cls,
        path: str,
        keys: Sequence[str] | None = None,
        quantile: float = 0.5,
        seed: int = 0,
        scale: str = "per_key",
        min_scale: float = 0.0,
    ) -> DemoDistance:
        """Every step of every episode of the store at ``path`` (``keys``: default all non-image keys)."""
        with ReplayStore.open(path) as store:
            keys = list(keys) if keys else [k for k in store.spec.obs if not store.spec.is_image(k)]
            rows, eps = [], []
            for i, info in enumerate(store.episodes()):
                ep = store.load(info.id, obs_keys=keys)
                rows.append(np.concatenate([ep.obs[k].reshape(info.length, -1) for k in keys], axis=1))
                eps.append(np.full(info.length, i))
            widths = [int(np.prod(store.spec.obs[k][0])) for k in keys] if rows else []
        if not rows:
            raise ValueError(f"the demo store {path} has no episodes")
        return cls(
            np.concatenate(rows),
            np.concatenate(eps),
            keys,
            quantile,
            seed=seed,
            widths=widths,
            scale=scale,
            min_scale=min_scale,
        )

    def _nearest(self, q: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Euclidean distance of each row of normalised ``q`` ``[M, D]`` to its nearest demo state
        (among ``rows`` if given), in chunks."""
        x = self.x if rows is None else self.x[rows]
        sq = self._sq if rows is None else self._sq[rows]
        out = np.empty(len(q))
        for s in range(0, len(q), 256):
            c = q[s : s + 256].astype(np.float64)
            d2 = sq[None, :] - 2.0 * (c @ x.T) + np.einsum("ij,ij->i", c, c)[:, None]
            out[s : s + 256] = np.sqrt(np.maximum(d2.min(1), 0.0))
        return out

    def _reference(
        self, episode: np.ndarray, quantile: float, folds: int, max_queries: int, rng: np.random.Generator
    ) -> float:
        """The ``quantile`` of held-out episodes' nearest distances to the other episodes."""
        ids = rng.permutation(np.unique(episode))
        dists = []
        per_fold = max(1, max_queries // min(folds, len(ids)))
        for part in np.array_split(ids, min(folds, len(ids))):
            held = np.isin(episode, part)
            q = np.flatnonzero(held)
            q = rng.choice(q, size=min(per_fold, len(q)), replace=False)
            dists.append(self._nearest(self.x[q], np.flatnonzero(~held)))
        ref = float(np.quantile(np.concatenate(dists), quantile))
        return ref if ref > 1e-9 else 1e-9

    def vector(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The normalised ``[D]`` vector of one observation."""
        v = np.concatenate([np.asarray(obs[k], dtype=np.float64).ravel() for k in self.keys])
        return (v - self.lo) / self.scale

    def distance(self, obs: dict[str, np.ndarray]) -> float:
        """Nearest-demo-state distance of ``obs`` (normalised units)."""
        return float(self._nearest(self.vector(obs)[None])[0])

    def ratio(self, obs: dict[str, np.ndarray]) -> float:
        """:meth:`distance` over the reference distance (``<= 1``: as close as a held-out demo)."""
        return self.distance(obs) / self.reference

    def describe(self) -> dict[str, Any]:
        """What the distance was built from (recorded with the round)."""
        return {
            "states": len(self.x),
            "dims": int(self.x.shape[1]),
            "keys": self.keys,
            "reference": round(self.reference, 6),
        }


def _dim_scale(span: np.ndarray, widths: Sequence[int], scale: str, min_scale: float) -> np.ndarray:
    """``[D]`` divisor of every dim: its own span (``per_dim``) or its key's widest (``per_key``),
    at least ``min_scale`` (and never 0)."""
    check_choice("recovery.operator_model.distance_scale", scale, DISTANCE_SCALES)
    if sum(widths) != len(span):
        raise ValueError(f"DemoDistance: key widths {list(widths)} do not add up to {len(span)} dims")
    if scale == "per_key":
        bounds = np.cumsum([0, *widths])
        span = np.concatenate(
            [np.full(w, span[a : a + w].max()) for a, w in zip(bounds[:-1], widths, strict=True)]
        )
    out = np.maximum(span, min_scale)
    return np.where(out > 1e-6, out, 1.0)
