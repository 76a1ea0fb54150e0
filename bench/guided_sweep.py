"""Issue 13 §2: guided collection (ReGuide) swept over what the paper tunes, from one base policy.

Every setting is one guided collection (``recovery=guided``'s source, episodes and summary, no store,
no fine-tuning) of ``--episodes`` episodes on the same env seeds (``--seed0`` ..), into
``ROOT/TASK/<setting>/summary.json``; a setting whose summary exists is read, not rerun (so an
interrupted sweep resumes). Scale 0 is the control: plain rollouts with the same diagnostics.
Settings that share the sampler, prototypes, dynamics data and latent share the plain rollouts and models
(``rewind.loop.guided_sweep.prep_key``). Per setting it reports collection success (95% Wilson),
success / control, the fraction of chunk inferences where guidance was gated on, the mean change of
the executed actions guidance caused (same generator state, sampled again without guidance), the mean
drift and the AUROC of each episode's max / mean drift for failure (docs/loop.md, "The guided sweep").

    MUJOCO_GL=osmesa .venv/bin/python bench/guided_sweep.py --task pick_place \\
        --base-weights runs/loop_experiment/pick_place/demos_20/train \\
        --demos runs/loop_experiment/pick_place/demos_20/store --episodes 50 \\
        --scales 0 0.01 0.1 0.3 1 3

Writes ``--out`` (default ``bench/results/guided_sweep_TASK.json``), the Markdown table and the plot
(success and drift vs scale) next to it (``.md``, ``.png``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from _commands import write_result  # bench/ is on sys.path when a script there runs

from rewind.config import ConfigError
from rewind.envs.config import EnvConfig
from rewind.loop.guided import DYNAMICS_DATA, LATENTS, SAMPLERS, GuidedConfig
from rewind.loop.guided_sweep import (
    PrepKey,
    SweepSetting,
    check_paths,
    collect_guided,
    prep_key,
    sweep_grid,
)
from rewind.utils.io import atomic_save_figure
from rewind.utils.stats import wilson_interval

log = logging.getLogger("guided_sweep")

#: A log grid with 0 (the control); ReGuide's 0.01 is for 100 DDPM steps.
DEFAULT_SCALES = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]


def run_setting(
    s: SweepSetting, a: argparse.Namespace, folder: Path, cache: dict[PrepKey, Any]
) -> dict[str, Any]:
    """The setting's summary: read when its ``summary.json`` exists (same seeds and weights), else run."""
    seeds = list(range(a.seed0, a.seed0 + a.episodes))
    path = folder / "summary.json"
    if path.exists():
        summary = json.loads(path.read_text())
        if summary["seeds"] != [seeds[0], seeds[-1]] or summary["episodes"] != a.episodes:
            raise ConfigError(
                f"{path} was run with seeds {summary['seeds']} ({summary['episodes']} episodes); "
                f"this sweep wants {[seeds[0], seeds[-1]]}: use another --root"
            )
        if a.ddim_eta is not None and summary.get("ddim_eta") != a.ddim_eta:
            raise ConfigError(
                f"{path} was sampled with DDIM eta {summary.get('ddim_eta')}; this sweep wants "
                f"--ddim-eta {a.ddim_eta}: use another --root"
            )
        return summary
    log.info("running %s (%d episodes)", s.name, a.episodes)
    guided = s.guided(GuidedConfig(rollouts=a.rollouts))
    env = EnvConfig(name=a.task, max_steps=a.max_steps)
    summary, models = collect_guided(
        env,
        a.base_weights,
        a.demos,
        guided,
        seeds,
        folder,
        models=cache.get(prep_key(s)),
        ddim_eta=a.ddim_eta,
    )
    cache[prep_key(s)] = models
    return summary


def row(s: SweepSetting, summary: dict[str, Any]) -> dict[str, Any]:
    """One result row: the setting, success with its interval, the guidance diagnostics."""
    n, k = summary["episodes"], sum(e["success"] for e in summary["per_episode"])
    src = summary["source"]
    diag = src["diagnostics"]
    keep = ("gated_fraction", "in_band_fraction", "action_change_mean", "action_change_gated_mean")
    keep += ("action_change_norm_mean", "guidance_term_gated_mean", "drift_mean")
    realized = ("predicted_drift_paired_mean", "realized_drift_mean", "latent_error_mean")
    realized += ("predicted_drift_gated_mean", "realized_drift_gated_mean")
    return {
        **s.__dict__,
        "name": s.name,
        "episodes": n,
        "successes": k,
        "success": k / max(n, 1),
        "ci95": list(wilson_interval(k, n)),
        **{key: diag[key] for key in keep},
        **{key: diag.get(key) for key in realized},  # (absent from summaries written before 2026-12-06)
        "drift_auroc_max": diag["drift_auroc_max"],
        "drift_auroc_mean": diag["drift_auroc_mean"],
        "base_rollout_success": src["base_rollout_success"],
        "denoising_steps": src["denoising_steps"],
        "ddim_eta": summary.get("ddim_eta"),
        "wall_s": summary.get("wall_s"),
    }


def _group(r: dict[str, Any]) -> tuple[str, int, str]:
    """The settings a row's scale-0 control shares (``prep_key`` without the latent: without guidance
    the latent changes no action)."""
    return r["sampler"], r["prototypes"], r["dynamics_data"]


def with_control(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's ``vs_control``: its success over its group's scale-0 success (``None`` if that is 0)."""
    ctrl = {_group(r): r["success"] for r in rows if r["scale"] == 0}
    for r in rows:
        c = ctrl.get(_group(r))
        r["vs_control"] = r["success"] / c if c else None
    return rows


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    out = [
        "| sampler | K | M | dyn. data | latent | scale | success (95% Wilson) | x control | gated | "
        "action change (gated) | drift | drift predicted / realized (gated) | latent error | AUROC max / mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["ci95"]
        out.append(
            f"| {r['sampler']} ({r['denoising_steps']}) | {r['last_k']} | {r['prototypes']} | "
            f"{r['dynamics_data']} | {r.get('latent', 'pca')} | {r['scale']:g} | {r['successes']}/{r['episodes']} = "
            f"{r['success']:.2f} [{lo:.2f}, {hi:.2f}] | {_f(r['vs_control'])} | {r['gated_fraction']:.2f} | "
            f"{_f(r['action_change_mean'], '.4f')} ({_f(r['action_change_gated_mean'], '.4f')}) | "
            f"{_f(r['drift_mean'])} | {_f(r.get('predicted_drift_paired_mean'))} / "
            f"{_f(r.get('realized_drift_mean'))} ({_f(r.get('predicted_drift_gated_mean'))} / "
            f"{_f(r.get('realized_drift_gated_mean'))}) | {_f(r.get('latent_error_mean'))} | "
            f"{_f(r['drift_auroc_max'])} / {_f(r['drift_auroc_mean'])} |"
        )
    return "\n".join(out) + "\n"


def plot(rows: list[dict[str, Any]], task: str, path: Path) -> None:
    """Success (with its interval) and mean drift vs scale (symlog axis: 0 is the control), one line
    per (sampler, K, M, dynamics data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ctrl = {_group(r): r for r in rows if r["scale"] == 0}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["scale"] > 0:
            key = f"{r['sampler']} K={r['last_k']} M={r['prototypes']} {r['dynamics_data']}"
            key += "" if r.get("latent", "pca") == "pca" else f" {r['latent']}"
            groups.setdefault(key, [ctrl[_group(r)]] if _group(r) in ctrl else []).append(r)
    positive = [r["scale"] for r in rows if r["scale"] > 0]
    for key, grp in groups.items():
        x = [r["scale"] for r in grp]
        y = [r["success"] for r in grp]
        err = [[r["success"] - r["ci95"][0] for r in grp], [r["ci95"][1] - r["success"] for r in grp]]
        ax1.errorbar(x, y, yerr=err, marker="o", capsize=3, label=key)
        line = ax2.plot(x, [r["drift_mean"] for r in grp], marker="o", label=f"{key}: predicted")[0]
        if all(r.get("realized_drift_mean") is not None for r in grp):
            real = [r["realized_drift_mean"] for r in grp]
            ax2.plot(x, real, marker="s", ls="--", color=line.get_color(), label=f"{key}: realized")
    for ax, label in (
        (ax1, "collection success (95% Wilson)"),
        (ax2, "mean drift: predicted (solid), realized (dashed)"),
    ):
        if positive:
            ax.set_xscale("symlog", linthresh=min(positive))
        ax.set_xlabel("guidance scale (0 = plain rollouts)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if groups:
        ax1.legend(fontsize=7)
    fig.suptitle(f"{task}: guided collection vs guidance scale ({rows[0]['episodes']} episodes per point)")
    fig.tight_layout()
    atomic_save_figure(path, fig)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="pick_place")
    ap.add_argument("--base-weights", required=True, help="the base policy's run folder (or weights)")
    ap.add_argument("--demos", required=True, help="its demo store")
    ap.add_argument("--scales", nargs="+", type=float, default=DEFAULT_SCALES, help="must include 0")
    ap.add_argument("--samplers", nargs="+", default=["policy"], help=f"of {list(SAMPLERS)}")
    ap.add_argument("--last-k", nargs="+", type=int, default=[3], help="guided denoising steps")
    ap.add_argument("--prototypes", nargs="+", type=int, default=[4], help="prototypes per phase")
    ap.add_argument("--dynamics-data", nargs="+", default=["both"], help=f"of {list(DYNAMICS_DATA)}")
    ap.add_argument("--latents", nargs="+", default=["pca"], help=f"of {list(LATENTS)}")
    ap.add_argument("--episodes", type=int, default=50, help="guided episodes per setting")
    ap.add_argument("--rollouts", type=int, default=20, help="plain rollouts for dynamics and bands")
    ap.add_argument("--seed0", type=int, default=30000, help="env seed of the first episode (all settings)")
    ap.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: the task's)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument(
        "--ddim-eta", type=float, default=None, help="DDIM eta of every rollout (default: the policy's)"
    )
    ap.add_argument("--root", default="runs/guided_sweep")
    ap.add_argument("--out", default=None, help="default bench/results/guided_sweep_TASK.json")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Check the grid, run (or read) every setting, rewrite the JSON, table and plot after each."""
    a = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    try:
        if a.episodes < 1 or a.rollouts < 1:
            raise ConfigError(f"--episodes and --rollouts must be >= 1; got {a.episodes}, {a.rollouts}")
        grid = sweep_grid(a.scales, a.samplers, a.last_k, a.prototypes, a.dynamics_data, latents=a.latents)
        check_paths(a.base_weights, a.demos)
    except ConfigError as exc:
        sys.exit(f"guided_sweep: {exc}")
    import torch

    torch.set_num_threads(a.threads)
    out = Path(a.out or f"bench/results/guided_sweep_{a.task}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    root = Path(a.root) / a.task
    cache: dict[PrepKey, Any] = {}
    rows: list[dict[str, Any]] = []
    for s in grid:
        rows = with_control([*rows, row(s, run_setting(s, a, root / s.name, cache))])
        result = {
            "command": " ".join(sys.argv),
            "task": a.task,
            "base_weights": a.base_weights,
            "demos": a.demos,
            "seeds": [a.seed0, a.seed0 + a.episodes - 1],
            "ddim_eta": a.ddim_eta,
            "rows": rows,
        }
        write_result(out, result, table(rows))
        plot(rows, a.task, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
