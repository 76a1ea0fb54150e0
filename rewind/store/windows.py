"""Training windows over store episodes (numpy core, vectorised; cf. diffusion_policy's
ReplayBuffer + SequenceSampler).

A window is anchored at step ``t`` of an episode of length ``L``. With ``To = n_obs_steps`` and
``H = horizon`` it covers steps ``s .. s+H-1`` where ``s = t - To + 1``:

* ``obs[key]``: steps ``s .. t`` -> ``[To, ...]``
* ``action`` / ``source``: steps ``s .. s+H-1`` -> ``[H, Da]`` / ``[H]``

Indices outside ``[0, L-1]`` are clamped (the edge value is repeated) and flagged in
``action_mask``. Anchors are all ``t`` with ``-pad_before <= s`` and ``s + H - 1 <= L - 1 + pad_after``;
the defaults ``pad_before = To - 1`` and ``pad_after = H - To`` give exactly one window per step.

**Segments, not episodes, bound windows.** An episode recorded with ``restore`` rewinds holds runs of
steps that are not continuous in time (:mod:`rewind.monitor.recording`); ``extra["segment_starts"]``
cuts it into segments, and :meth:`ReplayBuffer.from_store` loads each segment as a unit of its own
(``episode_ends`` are segment ends), so no window contains both sides of a rewind. Undone segments
are left out unless ``undone="keep"``.

**Source boundaries** (``source_boundaries="respect"``; off by default until measured on the loop). A
window anchored on an intervention step (``recovery``, ``correction``, ``human``) supervises only
the actions of that intervention: the steps before and after its run of
intervention sources (the policy's steps around the takeover, the policy acting after the hand-back)
are masked out of ``action_mask``. A window anchored on any other source may cross into an
intervention: the operator's actions are what should have followed. ``"ignore"`` (the default):
every in-unit step is a target.

**Dropped steps** (``drop_steps``, e.g. the corrections the loop's label-conflict filter rejects):
named per episode, they get a per-step weight of 0 in ``data["step_weight"]``: a dropped step is
never a window's anchor (its window weighs 0) nor a target of any window (``action_mask`` False).
The stored episodes are not changed. The file that names them: :func:`write_drop_steps`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rewind.store.schema import SOURCES, EpisodeInfo, StoreError, source_code
from rewind.store.store import ReplayStore
from rewind.utils.io import atomic_write_text

#: Sources whose windows stop at the edges of their run of steps (see the module docstring).
INTERVENTION_SOURCES: tuple[str, ...] = ("recovery", "correction", "human")
UNDONE_MODES = ("drop", "keep")
SOURCE_BOUNDARY_MODES = ("respect", "ignore")


def write_drop_steps(path: str | Path, store: str | Path, dropped: Mapping[int, Sequence[int]]) -> Path:
    """Write the steps of ``store`` to leave out of training, ``{episode id: [step, ...]}`` (indices into
    the stored episode), as ``{"store": ..., "episodes": {...}}`` JSON at ``path``."""
    episodes = {str(int(e)): sorted(int(t) for t in steps) for e, steps in dropped.items() if len(steps)}
    return atomic_write_text(path, json.dumps({"store": str(store), "episodes": episodes}))


def read_drop_steps(path: str | Path) -> dict[int, list[int]]:
    """The ``{episode id: [step, ...]}`` of a file written by :func:`write_drop_steps`."""
    try:
        node = json.loads(Path(path).read_text())
        return {int(e): [int(t) for t in steps] for e, steps in node["episodes"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"drop_steps: {path} is not a file of dropped steps ({exc})") from exc


def episode_segments(
    length: int, extra: Mapping[str, Any], episode_id: int = -1
) -> list[tuple[int, int, bool]]:
    """``(begin, end, undone)`` of each segment of an episode of ``length`` steps, from its ``extra``
    (one segment ``(0, length, False)`` when the episode has no ``segment_starts``)."""
    starts = extra.get("segment_starts") or [0]
    undone = set(extra.get("undone_segments") or [])
    ok = (
        isinstance(starts, list)
        and all(isinstance(b, int) for b in starts)
        and starts[0] == 0
        and all(a < b for a, b in zip(starts, starts[1:], strict=False))
        and starts[-1] < max(length, 1)
        and all(isinstance(i, int) and 0 <= i < len(starts) for i in undone)
    )
    if not ok:
        raise StoreError(
            f"episode {episode_id}: extra.segment_starts/undone_segments are malformed for {length} steps: "
            f"{extra.get('segment_starts')!r} / {extra.get('undone_segments')!r}"
        )
    ends = [*starts[1:], length]
    return [(b, e, i in undone) for i, (b, e) in enumerate(zip(starts, ends, strict=True))]


class ReplayBuffer:
    """Episodes concatenated in memory: ``data[name]`` is ``[N, ...]`` with ``N = episode_ends[-1]``.

    Names are ``obs/<key>``, ``action`` (``[N, Da]``), ``source`` (``[N]`` uint8 codes),
    ``reward`` (``[N]``). ``episode_ends[i]`` is the exclusive end index of unit ``i``: an episode, or
    a segment of one (``episode_ids[i]`` then repeats the episode's id for each of its segments).
    """

    def __init__(self, data: Mapping[str, np.ndarray], episode_ends: np.ndarray, episode_ids: Sequence[int]):
        """Check that every array has ``episode_ends[-1]`` rows and that ends strictly increase."""
        ends = np.asarray(episode_ends, dtype=np.int64)
        if ends.ndim != 1 or len(ends) == 0 or ends[0] <= 0 or np.any(np.diff(ends) <= 0):
            raise StoreError(f"episode_ends: must be non-empty and strictly increasing from > 0, got {ends}")
        for name in ("action", "source"):
            if name not in data:
                raise StoreError(f"data: missing required array {name!r}")
        for name, arr in data.items():
            if arr.shape[0] != ends[-1]:
                raise StoreError(f"data[{name!r}]: has {arr.shape[0]} rows, episode_ends says {ends[-1]}")
        if len(episode_ids) != len(ends):
            raise StoreError(f"episode_ids: {len(episode_ids)} ids for {len(ends)} episodes")
        self.data = dict(data)
        self.episode_ends = ends
        self.episode_ids = list(episode_ids)

    @property
    def obs_keys(self) -> list[str]:
        """Observation keys held (without the ``obs/`` prefix)."""
        return [k[4:] for k in self.data if k.startswith("obs/")]

    @property
    def n_steps(self) -> int:
        """Total number of steps ``N``."""
        return int(self.episode_ends[-1])

    @classmethod
    def from_store(
        cls,
        store: ReplayStore,
        episodes: Iterable[int | EpisodeInfo] | None = None,
        obs_keys: Sequence[str] | None = None,
        undone: Literal["drop", "keep"] = "drop",
        drop_steps: Mapping[int, Sequence[int]] | None = None,
    ) -> ReplayBuffer:
        """Load ``episodes`` (ids or infos; default: all committed) restricted to ``obs_keys``, one unit
        per segment; segments undone by a ``restore`` rewind are dropped unless ``undone="keep"``.

        ``drop_steps`` (``{episode id: [step, ...]}``, may be empty): also hold ``data["step_weight"]``,
        0 on those steps and 1 elsewhere (the module docstring)."""
        if undone not in UNDONE_MODES:
            raise StoreError(f"undone: must be one of {list(UNDONE_MODES)}; got {undone!r}")
        chosen = store.episodes() if episodes is None else list(episodes)
        ids = [e.id if isinstance(e, EpisodeInfo) else int(e) for e in chosen]
        if not ids:
            raise StoreError("episodes: no episodes selected")
        keys = list(store.spec.obs) if obs_keys is None else list(obs_keys)
        names = [f"obs/{k}" for k in keys] + ["action", "source", "reward"]
        names += [] if drop_steps is None else ["step_weight"]
        parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
        lengths, unit_ids = [], []
        for eid in ids:
            ep = store.load(eid, obs_keys=keys)
            columns = [*(ep.obs[k] for k in keys), ep.actions, ep.sources, ep.rewards]
            if drop_steps is not None:
                columns.append(_step_weight(len(ep.actions), drop_steps.get(eid, ()), eid))
            arrays = dict(zip(names, columns, strict=True))
            for b, e, is_undone in episode_segments(len(ep.actions), ep.info.extra, eid):
                if is_undone and undone == "drop":
                    continue
                for name in names:
                    parts[name].append(arrays[name][b:e])
                lengths.append(e - b)
                unit_ids.append(eid)
        if not lengths:
            raise StoreError("episodes: every selected step lies in an undone segment; nothing to train on")
        data = {name: np.concatenate(chunks) for name, chunks in parts.items()}
        return cls(data, np.cumsum(lengths), unit_ids)


def _step_weight(length: int, dropped: Sequence[int], episode_id: int) -> np.ndarray:
    """``[length]`` float32: 0 on the ``dropped`` steps, 1 elsewhere."""
    idx = np.asarray(list(dropped), np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= length):
        raise StoreError(f"drop_steps: episode {episode_id} has {length} steps; got step {idx.max()}")
    weight = np.ones(length, np.float32)
    weight[idx] = 0.0
    return weight


class WindowSampler:
    """Samples fixed-size training windows from a :class:`ReplayBuffer` with fancy indexing.

    Args:
        buffer: the in-memory episodes.
        n_obs_steps: ``To``, observation history length (>= 1).
        horizon: ``H``, action chunk length (>= ``n_obs_steps``).
        pad_before: max steps of padding before an episode start (default ``To - 1``).
        pad_after: max steps of padding after an episode end (default ``H - To``).
        sample_weights: source label -> sample weight; missing sources weigh 1. The weight of a window is
            that of the source of its anchor step ``t`` (the first action to execute).
        sample_weight_mode: ``"loss"``: sample uniformly, return the weights in ``batch["sample_weight"]``;
            ``"sample"``: sample windows with probability proportional to weight, return weight 1.
        seed: seed of the sampler's own ``np.random.Generator``.
        mask_zero_sample_weight: also mark the actions of steps whose source weighs 0 as not valid in
            ``action_mask`` (as padding is): a window anchored on a correction then supervises only
            the correction's actions, not the policy's own actions just before or after it.
        source_boundaries: ``"respect"``: a window anchored on an intervention source supervises
            only its run of intervention steps (module docstring); ``"ignore"`` (default): every
            step of the window is a target.

    A buffer holding ``step_weight`` (dropped steps, module docstring) multiplies each window's
    weight by its anchor's and masks the dropped steps' actions out of ``action_mask``.
    """

    def __init__(
        self,
        buffer: ReplayBuffer,
        n_obs_steps: int = 2,
        horizon: int = 16,
        pad_before: int | None = None,
        pad_after: int | None = None,
        sample_weights: Mapping[str, float] | None = None,
        sample_weight_mode: Literal["loss", "sample"] = "loss",
        seed: int | None = 0,
        mask_zero_sample_weight: bool = False,
        source_boundaries: Literal["respect", "ignore"] = "ignore",
    ) -> None:
        if n_obs_steps < 1 or horizon < n_obs_steps:
            raise StoreError(f"horizon: need 1 <= n_obs_steps <= horizon, got {n_obs_steps}, {horizon}")
        if sample_weight_mode not in ("loss", "sample"):
            raise StoreError(f"sample_weight_mode: must be 'loss' or 'sample', got {sample_weight_mode!r}")
        self.buffer = buffer
        self.n_obs_steps, self.horizon = n_obs_steps, horizon
        self.pad_before = n_obs_steps - 1 if pad_before is None else pad_before
        self.pad_after = horizon - n_obs_steps if pad_after is None else pad_after
        if self.pad_before < 0 or self.pad_after < 0:
            raise StoreError(f"pad_before/pad_after: must be >= 0, got {self.pad_before}, {self.pad_after}")
        self.sample_weight_mode = sample_weight_mode
        self.mask_zero_sample_weight = bool(mask_zero_sample_weight)
        if source_boundaries not in SOURCE_BOUNDARY_MODES:
            raise StoreError(
                f"source_boundaries: must be one of {list(SOURCE_BOUNDARY_MODES)}; got {source_boundaries!r}"
            )
        self.source_boundaries = source_boundaries
        self._is_intervention = np.zeros(len(SOURCES), bool)
        self._is_intervention[[source_code(s) for s in INTERVENTION_SOURCES]] = True
        self.rng = np.random.default_rng(seed)
        step_weight = buffer.data.get("step_weight")
        self._step_kept = None if step_weight is None else step_weight > 0
        self._build_index()
        self._build_sample_weights(sample_weights or {})

    def _build_index(self) -> None:
        """Per window: global start ``s`` (may lie outside its episode) and its episode bounds."""
        ends = self.buffer.episode_ends
        begins = np.concatenate([[0], ends[:-1]])
        lo = begins - self.pad_before
        hi = ends - self.horizon + self.pad_after  # last allowed start, inclusive
        counts = np.maximum(hi - lo + 1, 0)
        if counts.sum() == 0:
            raise StoreError("horizon: no episode is long enough for one window with this padding")
        ep = np.repeat(np.arange(len(ends)), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        self.starts = (lo[ep] + offsets).astype(np.int64)
        self.ep_begin = begins[ep]
        self.ep_last = ends[ep] - 1
        self.anchors = np.clip(self.starts + self.n_obs_steps - 1, self.ep_begin, self.ep_last)
        self.window_episode_ids = np.asarray(self.buffer.episode_ids, np.int64)[ep]

    def _build_sample_weights(self, sample_weights: Mapping[str, float]) -> None:
        table = np.ones(len(SOURCES), np.float64)
        for label, w in sample_weights.items():
            if not np.isfinite(w) or w < 0:
                raise StoreError(f"sample_weights[{label!r}]: must be finite and >= 0, got {w!r}")
            table[source_code(label, f"sample_weights[{label!r}]")] = w
        self.sample_weight_table = table.astype(np.float32)
        self.window_sample_weights = table[self.buffer.data["source"][self.anchors]]
        if self._step_kept is not None:
            self.window_sample_weights = self.window_sample_weights * self._step_kept[self.anchors]
        total = self.window_sample_weights.sum()
        if self.sample_weight_mode == "sample" and total <= 0:
            raise StoreError("sample_weights: every window has weight 0; nothing to sample")
        self._cdf = np.cumsum(self.window_sample_weights) / total if total > 0 else None

    def __len__(self) -> int:
        """Number of distinct windows."""
        return len(self.starts)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Draw ``batch_size`` windows (with replacement) and return :meth:`get` of them."""
        if self.sample_weight_mode == "sample":
            ids = np.searchsorted(self._cdf, self.rng.random(batch_size) * self._cdf[-1], side="right")
            ids = np.minimum(ids, len(self) - 1)
        else:
            ids = self.rng.integers(0, len(self), size=batch_size)
        return self.get(ids)

    def get(self, window_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Gather windows by index (vectorised).

        Returns:
            ``obs``: dict key -> ``[B, To, ...]``, ``action``
            ``[B, H, Da]``, ``source`` ``[B, H]`` uint8 codes, ``action_mask`` ``[B, H]`` bool (False on
            padded steps), ``sample_weight`` ``[B]`` float32, ``episode_id`` ``[B]``, ``t`` ``[B]`` anchor
            step within its episode.
        """
        w = np.asarray(window_ids, dtype=np.int64)
        s, b, last = self.starts[w, None], self.ep_begin[w, None], self.ep_last[w, None]
        obs_idx = s + np.arange(self.n_obs_steps)
        act_idx = s + np.arange(self.horizon)
        obs_idx_c = np.clip(obs_idx, b, last)
        act_idx_c = np.clip(act_idx, b, last)
        data = self.buffer.data
        obs = {k: data[f"obs/{k}"][obs_idx_c] for k in self.buffer.obs_keys}
        if self.sample_weight_mode == "sample":
            weight = np.ones(len(w), np.float32)
        else:
            weight = self.window_sample_weights[w].astype(np.float32)
        source = data["source"][act_idx_c]
        mask = (act_idx >= b) & (act_idx <= last)
        if self.mask_zero_sample_weight:
            mask &= self.sample_weight_table[source] > 0
        if self._step_kept is not None:
            mask &= self._step_kept[act_idx_c]
        if self.source_boundaries == "respect":
            mask &= self._intervention_run(source)
        return {
            "obs": obs,
            "action": data["action"][act_idx_c],
            "source": source,
            "action_mask": mask,
            "sample_weight": weight,
            "episode_id": self.window_episode_ids[w],
            "t": self.anchors[w] - self.ep_begin[w],
        }

    def _intervention_run(self, source: np.ndarray) -> np.ndarray:
        """``[B, H]`` bool: False on the steps outside the run of intervention sources around the
        anchor (column ``To - 1``) of windows anchored on an intervention; True elsewhere."""
        inter = self._is_intervention[source]
        a = self.n_obs_steps - 1
        run = np.zeros_like(inter)
        run[:, a:] = np.logical_and.accumulate(inter[:, a:], axis=1)
        run[:, : a + 1] = np.logical_and.accumulate(inter[:, a::-1], axis=1)[:, ::-1]
        return run | ~inter[:, a : a + 1]
