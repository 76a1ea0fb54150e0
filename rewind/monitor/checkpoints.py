"""The checkpoint library: where in a task it is safe to come back to, and online tracking of it.

A *rewind checkpoint* is an episode state known to be good (a :class:`ReachedCheckpoint` holds the
simulator snapshot of the step it was reached). It is never the same thing as *policy weights*.

Offline (:func:`build_library`), a :class:`Labeler` marks checkpoint steps in demos:

* ``stage``: the step right after each of the env's stage predicates turns true (a sub-goal is
  done). In simulation this stands in for Rewind-IL's vision-language model.
* ``gripper``: the moments the fingers settle after closing (grasp) or opening (release), read from
  the recorded gripper opening and grip command only: no privileged information, usable on a robot.

A labeler is any object with ``name`` and ``label(episode, env) -> list[(step, checkpoint name)]``
(:class:`Labeler`): a VLM labeler for real robots implements the same method on the episode's
camera frames. The frozen policy encoder embeds the labelled windows; each checkpoint's template is
the embedding of highest kernel density in a PCA projection of its examples (as Rewind-IL).

Online (:class:`CheckpointTracker`), the features of each control step are compared by cosine
similarity (after removing the mean feature of the demos) with the template of the next checkpoint in
task order; the checkpoint counts as reached once the similarity has exceeded ``min_similarity`` and
has not improved for ``patience`` steps; the snapshot kept is the one of the peak step.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from rewind.envs.core.base import TaskEnv
from rewind.policies.base import ActionChunkPolicy
from rewind.store import Episode
from rewind.utils.io import atomic_write_text

log = logging.getLogger(__name__)

LIBRARY_JSON = "checkpoint_library.json"
LIBRARY_TENSORS = "checkpoint_library.safetensors"


class Labeler(Protocol):
    """Marks rewind checkpoints in a recorded episode."""

    name: str

    def label(self, episode: Episode, env: TaskEnv) -> list[tuple[int, str]]:
        """``(step, checkpoint name)`` pairs; names must mean the same moment across demos."""


class StageLabeler:
    """A checkpoint ``after_<stage>`` ``offset`` steps after each stage completes (privileged, sim only)."""

    name = "stage"

    def __init__(self, offset: int = 2) -> None:
        self.offset = int(offset)

    def label(self, episode: Episode, env: TaskEnv) -> list[tuple[int, str]]:
        """Replay the stored physics states through the env's stage predicates."""
        stages = []
        for state in episode.states:
            env.set_physics_state(state)
            stages.append(env.stage())
        out, names, t_max = [], env.stage_names, len(stages) - 1
        for t in range(1, len(stages)):
            if stages[t] > stages[t - 1] and stages[t] < env.num_stages:
                out.append((min(t + self.offset, t_max), f"after_{names[stages[t - 1]]}"))
        return out


class GripperLabeler:
    """Grasp and release checkpoints from the gripper opening and grip command (no privileged state).

    A grasp is a switch of the grip command to closed (``< 0``) followed by the opening staying within
    ``settle_tol`` for ``settle`` steps; a release the same with an open command. Names are
    ``grasp_<i>`` / ``release_<i>`` counted from the start of the episode.
    """

    name = "gripper"

    def __init__(self, settle: int = 3, settle_tol: float = 1e-3) -> None:
        self.settle, self.settle_tol = int(settle), float(settle_tol)

    def label(self, episode: Episode, env: TaskEnv | None = None) -> list[tuple[int, str]]:
        """Events from ``obs['gripper']`` and ``actions[:, 4]``."""
        grip_cmd = episode.actions[:, 4] < 0
        opening = episode.obs["gripper"][:, 0]
        out, counts = [], {"grasp": 0, "release": 0}
        for t in range(1, len(grip_cmd)):
            if grip_cmd[t] == grip_cmd[t - 1]:
                continue
            kind = "grasp" if grip_cmd[t] else "release"
            for u in range(t + 1, len(opening) - self.settle):
                if grip_cmd[u] != grip_cmd[t]:
                    break
                if np.ptp(opening[u : u + self.settle]) < self.settle_tol:
                    out.append((u + self.settle - 1, f"{kind}_{counts[kind]}"))
                    counts[kind] += 1
                    break
        return out


LABELERS: dict[str, Callable[[], Labeler]] = {"stage": StageLabeler, "gripper": GripperLabeler}


def make_labeler(name: str) -> Labeler:
    """A labeler by name; an unknown name lists the valid ones."""
    if name not in LABELERS:
        raise KeyError(f"unknown checkpoint labeler '{name}'; valid: {', '.join(LABELERS)}")
    return LABELERS[name]()


def kde_mode(x: np.ndarray, max_dims: int = 4) -> int:
    """Index of the row of ``x`` ``[N, F]`` with the highest Gaussian kernel density in its top PCA
    dimensions (Scott's bandwidth)."""
    if len(x) < 3:
        return 0
    xc = x - x.mean(0)
    _, s, vt = np.linalg.svd(xc, full_matrices=False)
    k = max(1, min(max_dims, int((s > 1e-8 * s[0]).sum())))
    z = xc @ vt[:k].T
    z = z / np.maximum(z.std(0), 1e-12)
    h = len(z) ** (-1.0 / (k + 4))
    d2 = ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1)
    return int(np.exp(-0.5 * d2 / h**2).sum(1).argmax())


@dataclass
class CheckpointLibrary:
    """Templates of the rewind checkpoints of one task, in task order.

    Attributes:
        names: checkpoint names ``[K]``, ordered by their mean step in the demos.
        templates: float32 ``[K, F]`` encoder features (mean-centred).
        mean: float32 ``[F]`` the mean feature of the demos, removed before cosine similarity.
        labeler: the labeler's name; weights_hash: the policy weights whose encoder made them.
        support: demos in which each checkpoint was found.
        examples: float32 ``[M, F]`` every labelled window's features (mean-centred);
        owner: int64 ``[M]`` the checkpoint index of each example (``nearest`` matching).
    """

    names: list[str]
    templates: np.ndarray
    mean: np.ndarray
    labeler: str
    weights_hash: str
    support: list[int]
    examples: np.ndarray | None = None
    owner: np.ndarray | None = None

    def save(self, folder: str | Path) -> None:
        """``checkpoint_library.safetensors`` (templates, mean) + ``checkpoint_library.json`` (the rest)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (LIBRARY_TENSORS + ".tmp")
        arrays = {"templates": self.templates.astype(np.float32), "mean": self.mean.astype(np.float32)}
        if self.examples is not None and self.owner is not None:
            arrays.update(examples=self.examples.astype(np.float32), owner=self.owner.astype(np.int64))
        save_file(arrays, str(tmp))
        tmp.replace(folder / LIBRARY_TENSORS)
        meta = {
            "names": self.names,
            "labeler": self.labeler,
            "weights_hash": self.weights_hash,
            "support": self.support,
        }
        atomic_write_text(folder / LIBRARY_JSON, json.dumps(meta, indent=1))

    @classmethod
    def load(cls, folder: str | Path) -> CheckpointLibrary:
        """Read a library saved by :meth:`save` (no code is executed: JSON + safetensors)."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / LIBRARY_JSON).read_text())
            arrays = load_file(str(folder / LIBRARY_TENSORS))
            lib = cls(
                meta["names"],
                arrays["templates"],
                arrays["mean"],
                meta["labeler"],
                meta["weights_hash"],
                meta["support"],
                arrays.get("examples"),
                arrays.get("owner"),
            )
        except Exception as exc:  # safetensors raises its own error type on a corrupted header
            raise ValueError(f"{folder}: not a readable checkpoint library ({exc})") from exc
        if lib.templates.shape[0] != len(lib.names):
            raise ValueError(f"{folder}: {lib.templates.shape[0]} templates for {len(lib.names)} names")
        return lib


def _window(episode: Episode, t: int, n_obs_steps: int, keys: list[str]) -> dict[str, torch.Tensor]:
    idx = [max(0, t - n_obs_steps + 1 + i) for i in range(n_obs_steps)]
    return {k: torch.as_tensor(episode.obs[k][idx]).float()[None] for k in keys}


def build_library(
    policy: ActionChunkPolicy,
    episodes: list[Episode],
    env: TaskEnv,
    labeler: Labeler,
    weights_hash: str,
    min_support: float = 0.5,
) -> CheckpointLibrary:
    """Label ``episodes``, embed the labelled windows and make one template per checkpoint found in at
    least ``min_support`` of them."""
    keys = list(getattr(policy, "used_obs_keys", None) or episodes[0].obs)
    found: dict[str, list[tuple[int, np.ndarray]]] = {}
    with torch.no_grad():
        for ep in episodes:
            for t, name in labeler.label(ep, env):
                f = policy.encode(_window(ep, t, policy.n_obs_steps, keys))[0].float().numpy()
                found.setdefault(name, []).append((t, f))
    names = [n for n, v in found.items() if len(v) >= min_support * len(episodes)]
    if not names:
        raise ValueError(
            f"labeler '{labeler.name}' found no checkpoint in >= {min_support:.0%} of {len(episodes)} demos"
        )
    names.sort(key=lambda n: np.mean([t for t, _ in found[n]]))
    with torch.no_grad():  # centre on the whole demo distribution, not only the labelled steps
        mean = np.mean(
            [
                policy.encode(_window(ep, t, policy.n_obs_steps, keys))[0].float().numpy()
                for ep in episodes
                for t in range(0, ep.info.length, 4)
            ],
            axis=0,
        )
    templates, examples, owner = [], [], []
    for i, n in enumerate(names):
        x = np.stack([f for _, f in found[n]]) - mean
        templates.append(x[kde_mode(x)])
        examples.append(x)
        owner += [i] * len(x)
    return CheckpointLibrary(
        names,
        np.stack(templates).astype(np.float32),
        mean.astype(np.float32),
        labeler.name,
        weights_hash,
        [len(found[n]) for n in names],
        np.concatenate(examples).astype(np.float32),
        np.asarray(owner, dtype=np.int64),
    )


@dataclass
class ReachedCheckpoint:
    """A rewind checkpoint reached in this episode: where a rewind goes back to.

    Attributes:
        index: position in the library (``-1``: the episode start).
        name: checkpoint name (``start`` for the episode start).
        step: control step at which it was reached (its peak).
        similarity: cosine similarity at the peak.
        snapshot: the exact simulator state of that step (``restore`` mode).
        obs: the observation of that step (gripper pose for ``drive`` mode).
    """

    index: int
    name: str
    step: int
    similarity: float
    snapshot: Any
    obs: dict[str, np.ndarray]


#: How the current features are compared with a checkpoint: its single KDE ``template`` (Rewind-IL)
#: or the ``nearest`` of its labelled examples (default; see docs/monitor.md for the measurement).
MATCH_MODES = ("nearest", "template")


class CheckpointTracker:
    """Online cosine-similarity tracking with peak detection over a :class:`CheckpointLibrary`."""

    def __init__(
        self,
        library: CheckpointLibrary,
        min_similarity: float = 0.7,
        patience: int = 3,
        match: str = "nearest",
    ) -> None:
        if match not in MATCH_MODES:
            raise ValueError(f"checkpoint match must be one of [{', '.join(MATCH_MODES)}]; got '{match}'")
        self.library, self.min_similarity, self.patience = library, float(min_similarity), int(patience)
        use_examples = match == "nearest" and library.examples is not None and library.owner is not None
        if match == "nearest" and not use_examples:
            log.warning("checkpoint library has no labelled examples (older file): matching its templates")
        t = np.asarray(library.examples if use_examples else library.templates, dtype=np.float32)
        self._owner = np.asarray(library.owner) if use_examples else np.arange(len(library.names))
        self._templates = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
        self._rows = [self._templates[self._owner == k] for k in range(len(library.names))]
        self._mean = np.asarray(library.mean, dtype=np.float32)
        self.reached: list[ReachedCheckpoint] = []
        self._best: tuple[float, int, Any, dict[str, np.ndarray]] | None = None
        self._since = 0

    def for_episode(self) -> CheckpointTracker:
        """A copy with its own tracking state (the library is shared); :meth:`reset` starts it."""
        tracker = copy.copy(self)
        tracker.reached, tracker._best, tracker._since = [], None, 0
        return tracker

    def reset(self, start: ReachedCheckpoint) -> None:
        """New episode: only the episode start is reached."""
        self.reached, self._best, self._since = [start], None, 0

    def truncate(self, checkpoint: ReachedCheckpoint) -> None:
        """After a rewind to ``checkpoint``: forget the checkpoints reached after it."""
        self.reached = self.reached[: self.reached.index(checkpoint) + 1]
        self._best, self._since = None, 0

    @property
    def next_index(self) -> int:
        """Library index of the checkpoint being tracked (``K`` when all are reached)."""
        return self.reached[-1].index + 1 if self.reached else 0

    def update(
        self, features: torch.Tensor, step: int, env: Any, obs: dict[str, np.ndarray]
    ) -> ReachedCheckpoint | None:
        """Feed the features ``[F]`` (or ``[1, F]``) of the current step (``env``: what to snapshot);
        returns a newly reached checkpoint."""
        k = self.next_index
        if k >= len(self.library.names):
            return None
        f = np.asarray(features, dtype=np.float32).reshape(-1) - self._mean
        sim = float((self._rows[k] @ f).max()) / max(float(np.sqrt(f @ f)), 1e-12)
        if sim >= self.min_similarity and (self._best is None or sim > self._best[0]):
            self._best, self._since = (sim, step, env.snapshot(), obs), 0
            return None
        if self._best is None:
            return None
        self._since += 1
        if self._since < self.patience:
            return None
        sim, peak, snap, peak_obs = self._best
        hit = ReachedCheckpoint(k, self.library.names[k], peak, sim, snap, peak_obs)
        self.reached.append(hit)
        self._best, self._since = None, 0
        return hit

    def latest(self) -> ReachedCheckpoint:
        """The latest reached checkpoint (the episode start when none)."""
        return self.reached[-1]

    def as_dict(self) -> list[dict[str, Any]]:
        """The reached checkpoints without their snapshots (for event logs)."""
        return [
            {"index": c.index, "name": c.name, "step": c.step, "similarity": round(c.similarity, 4)}
            for c in self.reached
        ]
