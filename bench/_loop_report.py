"""The issue-5 experiment's report (``bench/loop_experiment.py``): the points as JSON, a Markdown table
and a success-vs-operator-steps plot per task.

A point is one (method, seed, round) of a loop, or one demo count of (a), with ``operator_steps``,
``success``, ``ci95``, ``episodes`` and optionally ``success_with_rewind`` and ``control_success``.
``methods`` maps each loop method to its label (``loop_experiment.METHODS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rewind.utils.io import atomic_save_figure, atomic_write_text
from rewind.utils.stats import wilson_interval


def plot(points: list[dict[str, Any]], task: str, path: Path, methods: dict[str, str]) -> None:
    """Success vs operator steps per method: per round, the mean over seeds of the operator steps and the
    success, with the Wilson interval of the episodes pooled over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = {"demos": "(a) more demos", **methods}
    for method, label in labels.items():
        rows = seed_means([p for p in points if p["method"] == method])
        if not rows:
            continue
        x, y = [p["operator_steps"] for p in rows], [p["success"] for p in rows]
        err = [
            [v - p["ci95"][0] for v, p in zip(y, rows, strict=True)],
            [p["ci95"][1] - v for v, p in zip(y, rows, strict=True)],
        ]
        n_seeds = max(p["n_seeds"] for p in rows)
        line = ax.errorbar(
            x, y, yerr=err, marker="o", capsize=3, label=label + (f" ({n_seeds} seeds)" * (n_seeds > 1))
        )
        rw = [
            (xi, p["success_with_rewind"])
            for xi, p in zip(x, rows, strict=True)
            if p["success_with_rewind"] is not None
        ]
        if rw:
            ax.plot(*zip(*rw, strict=True), ls=":", marker="x", color=line[0].get_color())
    ax.set(
        xlabel="operator steps (demos + interventions)",
        ylabel="success (95% Wilson)",
        ylim=(0, 1.02),
        title=f"{task}: success vs operator steps (x: + test-time rewind)",
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    atomic_save_figure(path, fig)
    plt.close(fig)


def seed_means(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (round, demos) of ``points``: means over seeds; Wilson interval of the pooled episodes."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((p["round"], p.get("demos", 0)), []).append(p)
    rows = []
    for grp in groups.values():
        n_eps = sum(p.get("episodes", 100) for p in grp)
        wins = sum(round(p["success"] * p.get("episodes", 100)) for p in grp)
        rw = [p["success_with_rewind"] for p in grp if p["success_with_rewind"] is not None]
        rows.append(
            {
                "operator_steps": float(np.mean([p["operator_steps"] for p in grp])),
                "success": wins / n_eps,
                "ci95": list(wilson_interval(wins, n_eps)),
                "n_seeds": len(grp),
                "success_with_rewind": float(np.mean(rw)) if rw else None,
            }
        )
    return sorted(rows, key=lambda r: r["operator_steps"])


def with_control(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill every loop point's ``control_success`` from the loop (same task, seed, round) that trained it."""
    ctrl = {
        (p["seed"], p["round"]): p["control_success"] for p in points if p.get("control_success") is not None
    }
    for p in points:
        if p["method"] != "demos" and p.get("control_success") is None:
            p["control_success"] = ctrl.get((p["seed"], p["round"]))
    return points


def table(points: list[dict[str, Any]], methods: dict[str, str]) -> str:
    """The points as a Markdown table (one row per method, seed and round; the base once per seed)."""
    names = {"demos": "(a) more demos", **methods}
    rows = [
        "| method | seed | round | operator steps | success (95% Wilson) | + test-time rewind | control |",
        "|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for p in sorted(
        points, key=lambda p: (list(names).index(p["method"]), p["seed"], p["round"], p["operator_steps"])
    ):
        if p["method"] != "demos" and p["round"] == 0:
            if p["seed"] in seen:
                continue
            seen.add(p["seed"])
            label = "base (round 0 of every loop)"
        else:
            label = f"(a) {p['demos']} demos" if p["method"] == "demos" else names[p["method"]]
        lo, hi = p["ci95"]
        rw = "" if p.get("success_with_rewind") is None else f"{p['success_with_rewind']:.0%}"
        ctrl = "" if p.get("control_success") is None else f"{p['control_success']:.0%}"
        rows.append(
            f"| {label} | {p['seed']} | {p['round']} | {p['operator_steps']:,} | "
            f"{p['success']:.0%} [{lo:.2f}, {hi:.2f}] | {rw} | {ctrl} |"
        )
    return "\n".join(rows) + "\n"


def task_file(out: Path, task: str, suffix: str) -> Path:
    """``out`` with ``suffix`` when its name already ends with ``task``, else
    ``<out stem>_<task><suffix>``."""
    return out.with_suffix(suffix) if out.stem.endswith(task) else out.with_name(f"{out.stem}_{task}{suffix}")


def save(
    results: dict[str, Any], out: Path, task: str, points: list[dict[str, Any]], methods: dict[str, str]
) -> None:
    """Write ``results`` to ``out`` and ``task``'s table and plot next to it (:func:`task_file`)."""
    atomic_write_text(out, json.dumps(results, indent=2))
    atomic_write_text(task_file(out, task, ".md"), table(points, methods))
    plot(points, task, task_file(out, task, ".png"), methods)
