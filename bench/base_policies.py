"""Issue-3 results: the default low-dim diffusion policy per task, trained from scripted demos on CPU.

For every (task, demos) pair of the plan it runs the three committed commands, exactly as a user
would, each into its own run folder under ``--root``:

    rewind-collect env=TASK episodes=DEMOS seed=0 out=ROOT/TASK_dDEMOS_sSTEPS/store
    rewind-train   env=TASK policy=diffusion data.path=... train.steps=STEPS out_dir=ROOT/.../train
    rewind-eval    policy_path=ROOT/.../train env=TASK episodes=50 seed=10000 out_dir=ROOT/.../eval

and collects training wall time, final losses and success with its 95% Wilson interval into
``--out`` (JSON) and a Markdown table (``--table``). Evaluation seeds (10000+) never overlap the
demo seeds (0..DEMOS-1). Runs that already have a ``summary.json`` are reused, so an interrupted
sweep resumes where it stopped.

    MUJOCO_GL=osmesa .venv/bin/python bench/base_policies.py --root runs/base_policies
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from _commands import rewind_bin, run_once  # noqa: E402  (bench/ is on sys.path)

from rewind.utils.io import atomic_write_text

log = logging.getLogger("base_policies")

#: task:demos[:steps] items: two demo counts on the long tasks, 100 on the short ones.
DEFAULT_PLAN = ["lift:100", "pick_place:100", "stack3:25", "stack3:100", "nut_peg:25", "nut_peg:100"]


_bin = rewind_bin


def _run(cmd: list[str], folder: Path) -> dict[str, Any]:
    """:func:`run_once`, plus the run's wall time from its ``run.json``."""
    result = run_once(cmd, folder)
    assert result is not None
    result["duration_s"] = json.loads((folder / "run.json").read_text()).get("duration_s")
    return result


def run_pair(root: Path, task: str, demos: int, steps: int, episodes: int, threads: int) -> dict[str, Any]:
    """Collect, train and evaluate one (task, demos) pair; return its result row."""
    base = root / f"{task}_d{demos}_s{steps}"
    store = base / "store"
    col = _run(
        [
            _bin("rewind-collect"),
            f"env={task}",
            f"episodes={demos}",
            "seed=0",
            f"out={store}",
            f"out_dir={base / 'collect'}",
            "progress=false",
        ],
        base / "collect",
    )
    tr = _run(
        [
            _bin("rewind-train"),
            f"env={task}",
            "policy=diffusion",
            f"data.path={store}",
            f"train.steps={steps}",
            f"train.save_every={steps}",
            f"train.val_every={max(steps // 5, 1)}",
            f"num_threads={threads}",
            "wandb.mode=offline",
            f"out_dir={base / 'train'}",
        ],
        base / "train",
    )
    ev = _run(
        [
            _bin("rewind-eval"),
            f"policy_path={base / 'train'}",
            f"env={task}",
            f"episodes={episodes}",
            "seed=10000",
            "num_threads=1",
            f"out_dir={base / 'eval'}",
        ],
        base / "eval",
    )
    return {
        "task": task,
        "demos_requested": demos,
        "demos_stored": col["succeeded"],
        "demo_steps": col["store_info"]["steps"],
        "train_steps": steps,
        "train_wall_time_s": tr["duration_s"],
        "train_summary": tr,
        "success_rate": ev["success_rate"],
        "success_ci95": ev.get("success_ci95"),
        "episodes": ev["episodes"],
        "stage_histogram": ev.get("stage_histogram"),
        "eval_wall_time_s": ev["duration_s"],
    }


def markdown_table(rows: list[dict[str, Any]], episodes: int = 50) -> str:
    """The results as a Markdown table (``episodes`` evaluation episodes per run)."""
    out = [
        f"| task | demos (steps) | train steps | train wall time | success ({episodes} eps) | 95% Wilson CI |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["success_ci95"] or (float("nan"), float("nan"))
        wall = r["train_wall_time_s"]
        wall_txt = f"{wall / 60:.1f} min" if wall else "?"
        out.append(
            f"| {r['task']} | {r['demos_stored']} ({r['demo_steps']}) | {r['train_steps']} | {wall_txt} "
            f"| {r['success_rate']:.0%} | [{lo:.2f}, {hi:.2f}] |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """Run the plan; write the JSON and the Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/base_policies")
    ap.add_argument("--plan", nargs="*", default=DEFAULT_PLAN, help="task:demos[:steps] items")
    ap.add_argument("--steps", type=int, default=2500, help="training steps of items without their own")
    ap.add_argument("--episodes", type=int, default=50, help="evaluation episodes per run")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for training")
    ap.add_argument("--out", default="bench/results/base_policies.json")
    ap.add_argument("--table", default="bench/results/base_policies.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    rows = []
    for item in args.plan:
        task, demos, *steps = item.split(":")
        n_steps = int(steps[0]) if steps else args.steps
        rows.append(run_pair(Path(args.root), task, int(demos), n_steps, args.episodes, args.threads))
        log.info("%s d%s: success %.0f%%", task, demos, 100 * rows[-1]["success_rate"])
        atomic_write_text(args.out, json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=2))
        atomic_write_text(args.table, markdown_table(rows, args.episodes) + "\n")
    print(markdown_table(rows, args.episodes))


if __name__ == "__main__":
    main()
