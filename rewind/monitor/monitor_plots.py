"""Plots of the monitor: ROC curves per detector and condition, score traces with threshold and alarms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rewind.monitor.conformal import held
from rewind.monitor.detection import ScoredEpisode, auroc, first_alarm, roc_curve
from rewind.utils.io import atomic_save_figure


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_roc(path: Path, episodes: Mapping[str, Sequence[ScoredEpisode]], detectors: Sequence[str]) -> Path:
    """One panel per condition: each detector's ROC of the per-episode maximum score."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(episodes), figsize=(4.2 * len(episodes), 4), squeeze=False)
    for ax, (cond, eps) in zip(axes[0], episodes.items(), strict=True):
        for d in detectors:
            mx = {e.seed: float(held(e.traces[d]).max()) if e.length else 0.0 for e in eps}
            pos = [mx[e.seed] for e in eps if not e.success]
            neg = [mx[e.seed] for e in eps if e.success]
            fpr, tpr = roc_curve(pos, neg)
            ax.plot(fpr, tpr, label=f"{d} (AUROC {auroc(pos, neg):.2f})")
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        ax.set(title=f"{cond}", xlabel="false positive rate", ylabel="true positive rate")
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    atomic_save_figure(path, fig)
    plt.close(fig)
    return path


def plot_traces(
    path: Path, episodes: Sequence[ScoredEpisode], score: str, thresholds: Mapping[str, Any], limit: int = 12
) -> Path:
    """Score traces (blue: success, red: failure) with the threshold and each episode's first alarm."""
    plt = _plt()
    th = thresholds[score]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for e in list(episodes)[:limit]:
        tr = held(e.traces[score])
        color = "tab:blue" if e.success else "tab:red"
        ax.plot(tr, color=color, alpha=0.6, lw=0.9)
        a = first_alarm(e.traces[score], th)
        if a is not None:
            ax.plot([a], [tr[a]], "x", color=color, ms=7)
    if np.isscalar(th):
        ax.axhline(th, color="k", lw=1.4, label="threshold")
    else:
        ax.plot(th, color="k", lw=1.4, label="band")
    ax.set(xlabel="control step", ylabel=score, title=f"{score} traces (x: first alarm)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    atomic_save_figure(path, fig)
    plt.close(fig)
    return path


def plot_rewind_traces(
    path: Path, scores: Sequence[float | None], threshold: Any, events: Sequence[dict[str, Any]], title: str
) -> Path:
    """One monitored episode over its executed steps: score, threshold, alarms (x) and the rewinds
    they triggered (dashed lines; the first ``max_rewinds`` alarms rewind)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    tr = held(scores)
    ax.plot(tr, lw=1.0, label="score")
    if np.isscalar(threshold):
        ax.axhline(threshold, color="k", lw=1.2, label="threshold")
    alarms = [t for t, v in enumerate(scores) if v is not None and v > threshold]
    ax.plot(alarms, tr[alarms], "rx", label="alarm")
    n_rewinds = sum(ev["kind"] == "rewind" for ev in events)
    for t in [t for t in alarms][:n_rewinds]:
        ax.axvline(t, color="tab:orange", lw=1, ls="--")
    ax.set(xlabel="executed step", title=title)
    ax.legend(loc="upper right")
    fig.tight_layout()
    atomic_save_figure(path, fig)
    plt.close(fig)
    return path
