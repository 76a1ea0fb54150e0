"""Do the operator's corrections contradict the demos? Per stage, the share of correction steps whose
action disagrees with what the demos do in the nearest states.

The statistic (features from the policy's own encoder, ``k`` nearest demo steps, a step conflicts
beyond the demos' own leave-one-episode-out ``--quantile``) is :mod:`rewind.loop.label_conflict`'s,
the same the loop's ``finetune.conflict_filter`` uses; this script adds the stage of each step (the
env's predicates on its stored physics state) and writes the per-stage table of docs/loop.md.

    MUJOCO_GL=osmesa .venv/bin/python bench/label_conflict.py --task stack3 \
        --weights runs/loop_experiment/stack3/demos_100/train \
        --demos runs/loop_experiment/stack3/demos_100/store \
        --round-store runs/loop_experiment/stack3/dagger_s0/round_01/collect/store \
        --out bench/results/label_conflict_stack3.json
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _commands import write_result  # bench/ is on sys.path when a script there runs

from rewind.envs.registry import make_env
from rewind.loop.label_conflict import demo_threshold, disagreement, step_table
from rewind.store import SOURCE_CODES
from rewind.train.policy_api import load_policy

LABELS = ("correction", "recovery")


def _stage_rows(stage: np.ndarray, gap: np.ndarray, tau: float, names: list[str]) -> list[dict[str, Any]]:
    """Per stage with correction steps: their count, the share above ``tau``, the median disagreement."""
    rows = []
    for s, name in enumerate(names):
        sel = stage == s
        if sel.any():
            rows.append(
                {
                    "stage": name,
                    "steps": int(sel.sum()),
                    "conflicting": float((gap[sel] > tau).mean()),
                    "median_disagreement": float(np.median(gap[sel])),
                }
            )
    return rows


def _markdown(rows: list[dict[str, Any]], labels: list[str], q: float, tau: float) -> list[str]:
    """The table's Markdown lines, one per row (the stages, then all steps)."""
    lines = [
        f"| stage | {'/'.join(labels)} steps | conflicting (> demos' q{q:.2f} = {tau:.3f}) | median disagreement |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['stage']} | {r['steps']} | {r['conflicting']:.0%} | {r['median_disagreement']:.3f} |"
        for r in rows
    ]
    return lines


def main() -> None:
    """Compute the table; write JSON and Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="stack3")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--demos", required=True)
    ap.add_argument("--round-store", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--quantile", type=float, default=0.95)
    ap.add_argument(
        "--labels",
        nargs="+",
        default=list(LABELS),
        choices=list(SOURCE_CODES),
        help="segment labels to check (default: correction recovery; the loop trains on "
        "'correction' alone unless finetune.sample_weights says otherwise)",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: its default)")
    ap.add_argument("--out", default="bench/results/label_conflict_stack3.json")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    env = make_env(a.task)
    policy = load_policy(a.weights, env, a.task, torch.device("cpu")).policy
    base = env.unwrapped
    demos = step_table(a.demos, policy)
    corr = step_table(a.round_store, policy, tuple(a.labels), base)
    tau = demo_threshold(demos, a.k, a.quantile)
    gap = disagreement(corr, demos, a.k, loo=False)
    rows = _stage_rows(corr.stage, gap, tau, [*base.stage_names, "done"])
    result = {
        "args": vars(a),
        "threshold": tau,
        "all_steps": len(gap),
        "conflicting": float((gap > tau).mean()),
        "rows": rows,
    }
    every = {
        "stage": "all",
        "steps": len(gap),
        "conflicting": result["conflicting"],
        "median_disagreement": float(np.median(gap)),
    }
    lines = _markdown([*rows, every], a.labels, a.quantile, tau)
    write_result(Path(a.out), result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
