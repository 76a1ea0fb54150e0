"""Benchmark the scripted operators: success from reset, and when taking over a disrupted episode.

Usage::

    MUJOCO_GL=osmesa .venv/bin/python bench/bench_operators.py --task all --episodes 200

Episode ``i`` of each protocol uses env seed ``seed0 + i``. The protocols are those of
:mod:`rewind.envs.evaluation` (``run_from_reset``, ``run_takeover`` with the default
``TakeoverConfig`` unless overridden below). Each task's report goes to
``bench/results/operators_<task>.json`` (or ``--out`` for a single task); a Markdown table of all
tasks run is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rewind.envs.evaluation import TakeoverConfig, run_from_reset, run_takeover, summarize
from rewind.envs.registry import TASKS, get_task
from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench_operators")
RESULTS = Path(__file__).resolve().parent / "results"


def bench_task(task: str, episodes: int, seed0: int, cfg: TakeoverConfig) -> dict[str, Any]:
    """Both protocols on seeds ``seed0 .. seed0 + episodes - 1``; the JSON-ready report."""
    seeds = range(seed0, seed0 + episodes)
    t0 = time.perf_counter()
    reset = summarize(run_from_reset(task, seeds))
    log.info("%s from reset: %d/%d", task, reset["successes"], reset["episodes"])
    takeover = summarize(run_takeover(task, seeds, cfg))
    log.info("%s takeover: %d/%d", task, takeover["successes"], takeover["episodes"])
    return {
        "task": task,
        "seed0": seed0,
        "episodes": episodes,
        "takeover_config": asdict(cfg),
        "from_reset": reset,
        "takeover": takeover,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _ci(s: dict[str, Any]) -> str:
    lo, hi = s["wilson95"]
    return f"{s['successes']}/{s['episodes']} = {100 * s['rate']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def table(reports: list[dict[str, Any]]) -> str:
    """Markdown table of the reports: rates with Wilson 95% intervals, lengths, failure causes."""
    rows = [
        "| task | from reset | mean / max len | takeover | mean / max len | done at handover | "
        "takeover failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        a, b = r["from_reset"], r["takeover"]
        causes = ", ".join(f"{k} {v}" for k, v in sorted(b["failure_causes"].items())) or "-"
        rows.append(
            f"| {r['task']} | {_ci(a)} | {a['mean_len']} / {a['max_len']} | {_ci(b)} | "
            f"{b['mean_len']} / {b['max_len']} | {b['done_at_handover']} | {causes} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="task name or Gymnasium id, or 'all'")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed0", type=int, default=0, help="first env seed")
    p.add_argument(
        "--out", type=Path, help="report path (single task; default results/operators_<task>.json)"
    )
    p.add_argument("--max-prefix", type=int, help="longest disruptive prefix (steps)")
    p.add_argument("--perturb-prob", type=float, help="probability of each perturbation wrapper")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    tasks = list(TASKS) if args.task == "all" else [get_task(args.task).name]
    if args.out and len(tasks) > 1:
        p.error("--out needs a single --task")
    cfg = TakeoverConfig()
    if args.max_prefix is not None:
        cfg = replace(cfg, max_prefix=args.max_prefix)
    if args.perturb_prob is not None:
        cfg = replace(cfg, perturb_prob=args.perturb_prob)
    reports = []
    for task in tasks:
        report = bench_task(task, args.episodes, args.seed0, cfg)
        out = args.out or RESULTS / f"operators_{task}.json"
        atomic_write_text(out, json.dumps(report, indent=2) + "\n")
        log.info("wrote %s (%.0f s)", out, report["wall_s"])
        reports.append(report)
    print(table(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
