"""Detection metrics of failure scores: AUROC, balanced accuracy, TPR/FPR, lead time to the point of
no return, and the score-recording rollouts they are computed from.

An episode is *predicted to fail* when its score crosses the calibrated threshold at some step; it
*failed* when the task was not completed. The *point of no return* of a failed episode is the first
recorded step from which the scripted operator, taking over, can no longer complete the task
(found by bisection over snapshots kept every ``snapshot_every`` steps); the *lead time* is that
step minus the alarm step (positive: the alarm came while recovery was still possible).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from rewind.envs.evaluation import drive
from rewind.envs.operators.base import Operator
from rewind.monitor.batched import DEFAULT_INFERENCE_ROWS, BatchedMonitoredRunner, EpisodeSlot
from rewind.monitor.conformal import held
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig, StepResult, rewindable
from rewind.monitor.scores import FailureScore
from rewind.policies.base import ActionChunkPolicy


class ScoreSet(FailureScore):
    """Several scores updated together from one rollout (the policy samples for the hungriest one);
    records each score's value per step and its update time."""

    name = "set"

    def __init__(self, scores: Sequence[FailureScore]) -> None:
        self.scores = list(scores)
        self.num_samples = max(s.num_samples for s in self.scores)
        self.values: dict[str, list[float | None]] = {s.name: [] for s in self.scores}
        self.seconds = dict.fromkeys(self.values, 0.0)
        self.calls = 0

    def reset(self) -> None:
        for s in self.scores:
            s.reset()
        self.values = {s.name: [] for s in self.scores}

    def for_episode(self, seed: int) -> ScoreSet:
        """Per-episode copies of every score, with their own values and timers (see :meth:`absorb`)."""
        return ScoreSet([s.for_episode(seed) for s in self.scores])

    def absorb(self, other: ScoreSet) -> None:
        """Add ``other``'s update time and calls (an episode's copy) to this set's."""
        for name, sec in other.seconds.items():
            self.seconds[name] += sec
        self.calls += other.calls

    def update(self, policy: ActionChunkPolicy) -> float | None:
        self.calls += 1
        for s in self.scores:
            t0 = time.perf_counter()
            v = s.update(policy)
            self.seconds[s.name] += time.perf_counter() - t0
            self.values[s.name].append(v)
        return None


@dataclass
class ScoredEpisode:
    """One rollout with every score's per-step trace and snapshots for the point-of-no-return search."""

    seed: int
    success: bool
    length: int
    traces: dict[str, list[float | None]]
    snapshots: list[tuple[int, Any]] = field(default_factory=list)
    perturbations: list[str] = field(default_factory=list)


def scored_rollouts(
    envs: Sequence[gym.Env],
    policy: ActionChunkPolicy,
    scores: ScoreSet,
    seeds: Sequence[int],
    gen_seed: int,
    inference_rows: int = DEFAULT_INFERENCE_ROWS,
    snapshot_every: int = 4,
    progress: bool = False,
    desc: str = "rollouts",
) -> list[ScoredEpisode]:
    """Episodes ``seeds`` under the policy with ``scores`` recording (no alarms, no rewinds), batched
    over ``envs`` (:mod:`rewind.monitor.batched`: the same episodes for any number of envs); each keeps
    a snapshot every ``snapshot_every`` steps for the point-of-no-return search. ``scores`` gathers the
    per-episode copies' update times."""
    device = next(policy.parameters()).device
    runner = BatchedMonitoredRunner(
        envs,
        policy,
        Monitor(scores, None),
        None,
        RewindConfig(max_rewinds=0),
        device,
        gen_seed,
        inference_rows,
    )
    out: dict[int, ScoredEpisode] = {}
    bar = tqdm(total=len(seeds), desc=desc, disable=not progress)

    def on_start(slot: EpisodeSlot, seed: int) -> None:
        target = rewindable(slot.ep.env)
        rec = ScoredEpisode(seed, False, 0, {}, [(0, target.snapshot())])

        def on_step(res: StepResult) -> None:
            rec.length += 1
            rec.perturbations.extend(p.get("type", "?") for p in res.info.get("perturbation", ()))
            if not res.done and (res.step + 1) % snapshot_every == 0:
                rec.snapshots.append((res.step + 1, target.snapshot()))

        out[slot.order] = rec
        slot.ep.on_step = on_step

    def on_end(slot: EpisodeSlot) -> None:
        rec, own = out[slot.order], slot.ep.monitor.score  # type: ignore[union-attr]
        rec.success, rec.traces = slot.ep.success, {k: list(v) for k, v in own.values.items()}
        scores.absorb(own)  # type: ignore[arg-type]
        slot.ep.on_step = None
        bar.update(1)

    runner.on_start, runner.on_end = on_start, on_end
    try:
        runner.run(seeds)
    finally:
        bar.close()
    return [out[i] for i in range(len(seeds))]


def operator_can_finish(
    ep: MonitoredEpisode, operator: Operator, snapshot: Any, seed: int, budget: int
) -> bool:
    """Restore ``snapshot`` and let the scripted operator try to complete the task in ``budget`` steps."""
    rewindable(ep.env).restore(snapshot)
    operator.reset(np.random.default_rng(seed))
    terminated, _, info, _ = drive(ep.env, operator.act, budget)
    return bool(info.get("success", False))


def point_of_no_return(
    ep: MonitoredEpisode, operator: Operator, rec: ScoredEpisode, budget: int
) -> int | None:
    """First snapshot step from which the operator fails (bisection, assuming monotonicity);
    ``None`` when it can still finish from the last snapshot."""
    snaps = rec.snapshots
    if operator_can_finish(ep, operator, snaps[-1][1], rec.seed, budget):
        return None
    lo, hi = 0, len(snaps) - 1  # operator finishes from lo (assumed), fails from hi
    if not operator_can_finish(ep, operator, snaps[0][1], rec.seed, budget):
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if operator_can_finish(ep, operator, snaps[mid][1], rec.seed, budget):
            lo = mid
        else:
            hi = mid
    return snaps[hi][0]


def auroc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties counted half."""
    if not len(pos) or not len(neg):
        return float("nan")
    p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float((p > n).mean() + 0.5 * (p == n).mean())


def roc_curve(pos: Sequence[float], neg: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) over all thresholds."""
    th = np.unique(np.concatenate([pos, neg, [np.inf]]))[::-1]
    p, n = np.asarray(pos), np.asarray(neg)
    tpr = np.array([(p >= t).mean() if len(p) else 0.0 for t in th])
    fpr = np.array([(n >= t).mean() if len(n) else 0.0 for t in th])
    return fpr, tpr


def first_alarm(trace: Sequence[float | None], threshold: float | Sequence[float]) -> int | None:
    """Control step of the first score above the threshold (a per-step band or a constant)."""
    for t, v in enumerate(trace):
        step = min(t, len(threshold) - 1) if not np.isscalar(threshold) else 0  # type: ignore[arg-type]
        th = threshold if np.isscalar(threshold) else threshold[step]  # type: ignore[index]
        if v is not None and v > th:
            return t
    return None


def detection_metrics(
    episodes: Sequence[ScoredEpisode],
    score: str,
    threshold: float | Sequence[float],
    ponr: dict[int, int | None],
) -> dict[str, Any]:
    """AUROC (of the per-episode max score), TPR, FPR, balanced accuracy and lead times of ``score``."""
    fails = [e for e in episodes if not e.success]
    oks = [e for e in episodes if e.success]
    mx = {e.seed: float(held(e.traces[score]).max()) if e.length else 0.0 for e in episodes}
    alarm = {e.seed: first_alarm(e.traces[score], threshold) for e in episodes}
    tpr = float(np.mean([alarm[e.seed] is not None for e in fails])) if fails else float("nan")
    fpr = float(np.mean([alarm[e.seed] is not None for e in oks])) if oks else float("nan")
    leads = [
        ponr[e.seed] - alarm[e.seed]
        for e in fails  # type: ignore[operator]
        if alarm[e.seed] is not None and ponr.get(e.seed) is not None
    ]
    return {
        "episodes": len(episodes),
        "failures": len(fails),
        "auroc": auroc([mx[e.seed] for e in fails], [mx[e.seed] for e in oks]),
        "tpr": tpr,
        "fpr": fpr,
        "balanced_accuracy": float(np.nanmean([tpr, 1 - fpr])) if fails or oks else float("nan"),
        "lead_time_median": float(np.median(leads)) if leads else None,
        "lead_time_positive_frac": float(np.mean([x > 0 for x in leads])) if leads else None,
        "lead_times": leads,
    }
