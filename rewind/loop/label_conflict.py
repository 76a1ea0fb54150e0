"""Label conflict: do a round's corrections contradict the demos? The statistic, and the loop's filter
that leaves conflicting corrections out of fine-tuning (``finetune.conflict_filter``).

For every step, the policy's own encoder gives features of its observation window (what the policy
sees). For a correction (or recovery, human) step of a round's store, the ``k`` nearest demo steps in
that feature space are found, and the step's *disagreement* is the distance from its normalized
action to the nearest of those demo actions. The same statistic for demo steps, with neighbours taken
from the *other* demo episodes only, gives the demos' own spread; a step **conflicts** when its
disagreement exceeds the demos' ``quantile`` (0.95: 5% of demo steps count as conflicting by
construction). Windows stop at the start of a step's segment, and steps undone by a ``restore``
rewind are not scored (training leaves them out too).

The filter scores the rounds' steps with the deployed policy's encoder before each fine-tuning and
writes the conflicting ones to a file of dropped steps per round store (``data.drop_steps_paths``):
they get sample weight 0 and are no training target; the stores are not changed. Used by
``bench/label_conflict.py`` (the per-stage table of docs/loop.md) and :mod:`rewind.loop.runner`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rewind.config import ConfigError, require
from rewind.envs.config import EnvConfig, build_env
from rewind.store import SOURCE_CODES, ReplayStore
from rewind.store.windows import episode_segments, write_drop_steps
from rewind.train.policy_api import load_policy
from rewind.utils.device import resolve_device
from rewind.utils.io import atomic_write_json

log = logging.getLogger(__name__)

#: The intervention sources a filter scores by default (the operator's or a person's actions).
SCORED_SOURCES: tuple[str, ...] = ("correction", "recovery", "human")
_CHUNK = 512


@dataclass
class ConflictFilterConfig:
    """Leave the rounds' steps whose action conflicts with the demos out of fine-tuning
    (``finetune.conflict_filter``; module docstring). Off by default.

    Attributes:
        enabled: score and filter before each round's fine-tuning.
        quantile: a step conflicts when its disagreement exceeds this quantile of the demos' own
            (leave-one-episode-out) disagreement; in (0, 1).
        k: nearest demo steps (in the deployed policy's feature space) whose actions a step is
            compared with; >= 1.
        sources: the step sources scored (and possibly dropped); other steps are kept as they are.
    """

    enabled: bool = False
    quantile: float = 0.95
    k: int = 10
    sources: list[str] = field(default_factory=lambda: list(SCORED_SOURCES))

    def __post_init__(self) -> None:
        key = "finetune.conflict_filter"
        require(0.0 < self.quantile < 1.0, f"{key}.quantile must be in (0, 1); got {self.quantile}")
        require(self.k >= 1, f"{key}.k must be >= 1; got {self.k}")
        unknown = [s for s in self.sources if s not in SOURCE_CODES]
        require(not unknown, f"{key}.sources must be among [{', '.join(SOURCE_CODES)}]; got {unknown}")


@dataclass
class StepTable:
    """Per scored step: features ``feats [N, F]``, normalized actions ``acts [N, Da]``, ``episode`` ids,
    ``step`` indices in the stored episode, ``source`` codes and ``stage`` (-1 when not computed)."""

    feats: np.ndarray
    acts: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    source: np.ndarray
    stage: np.ndarray

    def __len__(self) -> int:
        """Number of steps."""
        return len(self.step)


def _encode(
    policy: Any, obs: Mapping[str, np.ndarray], idx: np.ndarray, actions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Features and normalized actions of the windows ``obs[key][idx]`` (``idx [n, To]``)."""
    keys = list(getattr(policy, "used_obs_keys", None) or obs)
    dev = next(policy.parameters()).device
    window = {}
    for k in keys:
        t = torch.as_tensor(obs[k][idx])
        window[k] = (t.float() if t.is_floating_point() else t).to(dev)
    with torch.no_grad():
        feats = policy.encode(window).float().cpu().numpy()
        acts = policy.normalizer.normalize("action", torch.as_tensor(actions).to(dev)).cpu().numpy()
    return feats, acts


def step_table(
    store_path: str | Path, policy: Any, sources: Sequence[str] | None = None, env: Any = None
) -> StepTable:
    """Every step of the store (only those of ``sources`` when given) outside undone segments (an
    empty table when there is none); with ``env`` (unwrapped, with ``set_physics_state`` and
    ``stage``), each step's task stage too."""
    codes = None if sources is None else [SOURCE_CODES[s] for s in sources]
    to = policy.n_obs_steps
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("feats", "acts", "episode", "step", "source", "stage")
    }
    with ReplayStore.open(store_path) as store:
        for info in store.episodes():
            ep = store.load(info.id)
            for b, e, undone in episode_segments(len(ep.actions), ep.info.extra, info.id):
                steps = np.arange(b, e)
                if codes is not None:
                    steps = steps[np.isin(ep.sources[b:e], codes)]
                if undone or not len(steps):
                    continue
                idx = np.maximum(steps[:, None] + np.arange(1 - to, 1), b)
                feats, acts = _encode(policy, ep.obs, idx, ep.actions[steps])
                stage = np.full(len(steps), -1)
                if env is not None:
                    for i, t in enumerate(steps):
                        env.set_physics_state(ep.states[t])
                        stage[i] = env.stage()
                row = (feats, acts, np.full(len(steps), info.id), steps, ep.sources[steps], stage)
                for k, v in zip(cols, row, strict=True):
                    cols[k].append(v)
    if not cols["step"]:
        return StepTable(np.zeros((0, 0)), np.zeros((0, 0)), *(np.zeros(0, np.int64) for _ in range(4)))
    return StepTable(**{k: np.concatenate(v) for k, v in cols.items()})


def disagreement(query: StepTable, demos: StepTable, k: int, loo: bool) -> np.ndarray:
    """Per query step: distance from its action to the nearest action among its ``k`` nearest demo steps
    (``loo``: never neighbours from the query's own episode)."""
    out = np.empty(len(query))
    kk = min(k, len(demos))
    sq = (demos.feats**2).sum(1)[None]
    for i in range(0, len(out), _CHUNK):
        q = query.feats[i : i + _CHUNK]
        d = (q**2).sum(1)[:, None] + sq - 2.0 * q @ demos.feats.T
        if loo:
            d[query.episode[i : i + _CHUNK, None] == demos.episode[None]] = np.inf
        nn = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        gap = np.linalg.norm(demos.acts[nn] - query.acts[i : i + _CHUNK, None], axis=-1)
        out[i : i + _CHUNK] = gap.min(1)
    return out


def demo_threshold(demos: StepTable, k: int, quantile: float) -> float:
    """The ``quantile`` of the demos' leave-one-episode-out disagreement (needs >= 2 demo episodes)."""
    if len(np.unique(demos.episode)) < 2:
        raise ConfigError(
            "label conflict: the demo store needs >= 2 episodes (neighbours come from the others)"
        )
    return float(np.quantile(disagreement(demos, demos, k, loo=True), quantile))


@dataclass
class FilterOutcome:
    """What the filter decided: per round, the file of dropped steps and their count, and the record
    (threshold, per round kept/dropped in all, per source and per stage) for ``round.json``."""

    drop_files: dict[int, str]
    dropped: dict[int, int]
    record: dict[str, Any]


def _counts(conflict: np.ndarray, keys: np.ndarray, names: Mapping[int, str]) -> dict[str, dict[str, int]]:
    """``{name: {"kept", "dropped"}}`` of the steps grouped by ``keys``."""
    return {
        names[int(v)]: {"kept": int((~conflict[keys == v]).sum()), "dropped": int(conflict[keys == v].sum())}
        for v in np.unique(keys)
    }


def filter_rounds(
    fc: ConflictFilterConfig,
    env_cfg: EnvConfig,
    weights: str | Path,
    demos: str | Path,
    stores: Mapping[int, str | Path],
    folder: Path,
    sample_weights: Mapping[str, float] | None = None,
    device: str = "cpu",
) -> FilterOutcome:
    """Score the ``fc.sources`` steps of each round's store (``{round: store}``; only sources of
    non-zero ``sample_weights``: the others are not trained on anyway) against ``demos`` with the
    encoder of ``weights``; write ``folder/round_QQ.json`` (dropped steps) and ``summary.json``."""
    weights_of = sample_weights or {}
    sources = [s for s in fc.sources if weights_of.get(s, 1.0) > 0]
    env = build_env(env_cfg)
    try:
        policy = load_policy(str(weights), env, env_cfg.name, resolve_device(device)).policy
        base = env.unwrapped
        stage_names = {i: n for i, n in enumerate([*base.stage_names, "done"])} | {-1: "unknown"}
        source_names = {SOURCE_CODES[s]: s for s in SOURCE_CODES}
        demo_table = step_table(demos, policy)
        tau = demo_threshold(demo_table, fc.k, fc.quantile)
        files, dropped, rounds = {}, {}, {}
        for q, path in stores.items():
            table = step_table(path, policy, sources, base)
            conflict = disagreement(table, demo_table, fc.k, loo=False) > tau
            per_ep = {int(e): table.step[conflict & (table.episode == e)] for e in np.unique(table.episode)}
            files[q] = str(write_drop_steps(folder / f"round_{q:02d}.json", path, per_ep))
            dropped[q] = int(conflict.sum())
            rounds[str(q)] = {
                "file": Path(files[q]).name,
                "scored": len(table),
                "kept": len(table) - dropped[q],
                "dropped": dropped[q],
                "by_source": _counts(conflict, table.source, source_names),
                "by_stage": _counts(conflict, table.stage, stage_names),
            }
            log.info("conflict filter: round %d store: %d of %d steps dropped", q, dropped[q], len(table))
    finally:
        env.close()
    record = {
        "threshold": tau,
        "quantile": fc.quantile,
        "k": fc.k,
        "sources": sources,
        "kept": sum(r["kept"] for r in rounds.values()),
        "dropped": sum(dropped.values()),
        "rounds": rounds,
    }
    atomic_write_json(folder / "summary.json", record)
    return FilterOutcome(files, dropped, record)
