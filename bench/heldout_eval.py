"""Evaluate policies on held-out seeds that no loop, tuning or selection step uses.

Each ``NAME=WEIGHTS`` runs ``rewind-eval policy_path=WEIGHTS env=ENV episodes=N seed=SEED`` into
``ROOT/ENV_SEED/NAME`` (skipped when that folder already has its ``summary.json`` for the same seeds
and episodes, so an interrupted run resumes), and the result file collects every run's summary with its Wilson interval:

    MUJOCO_GL=osmesa .venv/bin/python bench/heldout_eval.py --env stack3 --episodes 100 --seed 70000 \
        main_s0=runs/issue12/s3_rac_fs_s0/round_01/train control_s0=runs/issue12/s3_rac_fs_s0/round_01/control/train \
        --out bench/results/heldout_stack3_fs.json

Defaults (``--env pick_place --seed 90000``) are those of the PickPlace held-out reports in docs/loop.md.
``--ddim-eta E`` samples every policy with DDIM eta ``E`` (``rewind-eval ddim_eta=E``; weights a loop
fine-tuned from an eta-0 base keep eta 0 in their config) into ``ROOT/ENV_SEED_etaE``, and a finished
folder that recorded another eta is an error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from _commands import named_paths, rewind_bin, run_once, write_result

from rewind.utils.stats import wilson_interval

log = logging.getLogger("bench")


def _specs(items: list[str]) -> dict[str, str]:
    """``NAME=WEIGHTS`` arguments as a mapping; a malformed or repeated name is an error naming it."""
    try:
        return named_paths(items, "WEIGHTS", "weights")
    except ValueError as e:
        raise SystemExit(str(e)) from None


def _group(args: argparse.Namespace) -> str:
    """The folder under ``--root`` for this env, first seed and sampler."""
    group = f"{args.env}_{args.seed}"
    return group if args.ddim_eta is None else f"{group}_eta{args.ddim_eta:g}"


def _check(summary: dict[str, Any], folder: Path, args: argparse.Namespace) -> None:
    """A finished folder must hold the requested seeds, episodes and (if given) DDIM eta."""
    first = summary["records"][0]["seed"] if summary.get("records") else None
    if summary["episodes"] != args.episodes or first != args.seed:
        raise SystemExit(
            f"{folder} holds {summary['episodes']} episodes from seed {first}, not {args.episodes} from "
            f"{args.seed}: remove it or pass another --root"
        )
    if args.ddim_eta is not None and summary.get("ddim_eta") != args.ddim_eta:
        raise SystemExit(
            f"{folder} was sampled with ddim_eta={summary.get('ddim_eta')}, not {args.ddim_eta}: "
            "remove it or pass another --root"
        )


def heldout(args: argparse.Namespace) -> dict[str, Any]:
    """Run (or read back) every evaluation; the result record."""
    results = {}
    for name, weights in _specs(args.policies).items():
        folder = args.root / _group(args) / name
        cmd = [
            rewind_bin("rewind-eval"),
            f"policy_path={weights}",
            f"env={args.env}",
            f"episodes={args.episodes}",
            f"seed={args.seed}",
            f"num_threads={args.num_threads}",
            f"out_dir={folder}",
        ]
        if args.ddim_eta is not None:
            cmd.append(f"ddim_eta={args.ddim_eta}")
        summary = run_once(cmd, folder)
        assert summary is not None
        _check(summary, folder, args)
        n, k = int(summary["episodes"]), int(summary["successes"])
        results[name] = {
            "weights": weights,
            "success": k / n,
            "ci95": wilson_interval(k, n),
            "summary": summary,
        }
        log.info("%s: %d/%d", name, k, n)
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "env": args.env,
        "seed": args.seed,
        "episodes": args.episodes,
        "ddim_eta": args.ddim_eta,
        "results": results,
    }


def main() -> None:
    """Command line entry."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policies", nargs="+", help="NAME=WEIGHTS (a run, weights folder or step folder)")
    p.add_argument("--env", default="pick_place")
    p.add_argument("--episodes", type=int, default=300)
    p.add_argument("--seed", type=int, default=90000, help="first evaluation seed")
    p.add_argument(
        "--ddim-eta", type=float, default=None, help="DDIM eta for every policy (default: each its own)"
    )
    p.add_argument(
        "--threads",
        "--num-threads",
        dest="num_threads",
        type=int,
        default=0,
        help="torch threads (0: its default)",
    )
    p.add_argument("--root", type=Path, default=Path("runs/heldout_eval"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.ddim_eta is not None and not 0.0 <= args.ddim_eta <= 1.0:
        p.error(f"--ddim-eta must be in [0, 1], got {args.ddim_eta}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    write_result(args.out, heldout(args))


if __name__ == "__main__":
    main()
