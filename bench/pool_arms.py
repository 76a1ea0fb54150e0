"""Pool a loop experiment's two arms over loop seeds and seed ranges: main arm vs control, one round.

For round ``R`` of every loop in ``--loop`` (a ``bench/loop_result.py`` file), the round's candidates
(main arm and control) on the loop's evaluation seeds, plus, with ``--heldout`` (a
``bench/heldout_eval.py`` file), the same candidates on held-out seeds, named in loop order by
``--main`` and ``--control``. Writes each arm's pooled successes with the 95% Wilson interval, per loop
seed and in all, and the difference in points. Nothing is run; the numbers are the files' own.
``--deployed`` pools what each arm deployed after round ``R`` instead (a candidate the gate rejected
is replaced by the policy it kept; name that policy's held-out run, e.g. from round ``R - 1``, whose
file may be passed as a second ``--heldout``). ``--control-loop`` takes the control arm from another
loop file, run for run (loops run with ``control=false`` whose control, the demos-only retraining of
the same loop seed, another loop already ran; the loop seeds must match).

    .venv/bin/python bench/pool_arms.py --loop bench/results/issue12_loop_stack3_rac_fs_refit.json --round 2 \\
        --heldout bench/results/heldout_stack3_rac_fs_refit_r2.json \\
        --main fs_refit_s0_main_r2 fs_refit_s1_main_r2 --control fs_refit_s0_control_r2 fs_refit_s1_control_r2 \\
        --out bench/results/pooled_stack3_rac_fs_refit_r2.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from _commands import write_result

from rewind.utils.stats import wilson_interval

log = logging.getLogger("bench")


def _seed(run: dict[str, Any]) -> str | None:
    """A run's loop seed: its resolved config's (recorded by loop_result.py), else the one on the
    command line of result files written before that (``None`` when neither has it)."""
    if run.get("seed") is not None:
        return str(run["seed"])
    return next(
        (t.split("=", 1)[1] for t in (run.get("command_line") or "").split() if t.startswith("seed=")), None
    )


def _candidates(
    run: dict[str, Any], r: int, deployed: bool = False, control_run: dict[str, Any] | None = None
) -> tuple[float, float]:
    """Round ``r``'s main and control candidates' (or deployed policies') success rates on the
    evaluation seeds; the control from ``control_run`` when given."""

    def candidate(arm_run: dict[str, Any], prefix: str) -> float | None:
        rounds = {x["round"]: x for x in arm_run["summary"]["rounds"]}
        if r not in rounds or r == 0:
            raise SystemExit(f"{arm_run['out_dir']} has no round {r} (rounds: {sorted(rounds)})")
        x = rounds[r]  # a rejected candidate's own result, else the deployed one
        rejected = None if deployed else x.get(f"{prefix}candidate_success")
        return rejected if rejected is not None else x[f"{prefix}success" if prefix else "success_rate"]

    if control_run is not None and _seed(control_run) != _seed(run):
        raise SystemExit(
            f"--control-loop run {control_run['out_dir']} has loop seed {_seed(control_run)}, "
            f"{run['out_dir']} has {_seed(run)}: list the loops in the same order"
        )
    main, ctl = candidate(run, ""), candidate(control_run or run, "control_")
    if ctl is None:
        raise SystemExit(f"{run['out_dir']} round {r} has no control arm (run the loop with control=true)")
    return main, ctl


def _said(arm: dict[str, Any]) -> str:
    """``k/n = x% [lo, hi]`` of an arm's record (:func:`arm_record`)."""
    lo, hi = arm["ci95"]
    return (
        f"{arm['successes']}/{arm['episodes']} = {100 * arm['success']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
    )


def arm_record(k: int, n: int) -> dict[str, Any]:
    """``k`` successes of ``n`` episodes: the counts, the rate and its 95% Wilson interval."""
    return {"successes": k, "episodes": n, "success": k / n, "ci95": list(wilson_interval(k, n))}


def pool(args: argparse.Namespace) -> dict[str, Any]:
    """Per loop seed and pooled: successes of each arm; the difference in points."""
    runs = json.loads(args.loop.read_text())["runs"]
    ctl_runs = json.loads(args.control_loop.read_text())["runs"] if args.control_loop else [None] * len(runs)
    if len(ctl_runs) != len(runs):
        raise SystemExit(
            f"--control-loop has {len(ctl_runs)} loops, --loop {len(runs)}: one control per loop"
        )
    held: dict[str, Any] = {}
    for path in args.heldout:
        for name, res in json.loads(path.read_text())["results"].items():
            if name in held and held[name] != res:
                raise SystemExit(f"{name} is in two --heldout files with different results: rename one")
            held[name] = res
    for names in (args.main, args.control):
        if held and len(names) != len(runs):
            raise SystemExit(
                f"--main and --control need one held-out name per loop ({len(runs)}), got {names}"
            )
        missing = [n for n in names if held and n not in held]
        if missing:
            raise SystemExit(f"{missing} not in {[str(p) for p in args.heldout]} (names: {sorted(held)})")
    per_seed, tot = [], {"main": [0, 0], "control": [0, 0]}
    for i, (run, ctl_run) in enumerate(zip(runs, ctl_runs, strict=True)):
        rates = dict(
            zip(("main", "control"), _candidates(run, args.round, args.deployed, ctl_run), strict=True)
        )
        row: dict[str, Any] = {"out_dir": run["out_dir"]}
        for arm, rate in rates.items():
            k, n = round(rate * args.eval_episodes), args.eval_episodes
            if held:
                h = held[(args.main if arm == "main" else args.control)[i]]["summary"]
                k, n = k + h["successes"], n + h["episodes"]
            row[arm] = arm_record(k, n)
            tot[arm][0] += k
            tot[arm][1] += n
        row["difference_points"] = 100 * (row["main"]["success"] - row["control"]["success"])
        per_seed.append(row)
    pooled = {arm: arm_record(*kn) for arm, kn in tot.items()}
    pooled["difference_points"] = 100 * (pooled["main"]["success"] - pooled["control"]["success"])
    return {
        "loop": str(args.loop),
        "control_loop": str(args.control_loop) if args.control_loop else None,
        "heldout": [str(p) for p in args.heldout],
        "round": args.round,
        "arms": "deployed" if args.deployed else "candidates",
        "per_seed": per_seed,
        "pooled": pooled,
    }


def main() -> None:
    """Write the pooled comparison."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loop", type=Path, required=True, help="a bench/loop_result.py file")
    p.add_argument("--round", type=int, required=True)
    p.add_argument(
        "--control-loop",
        type=Path,
        default=None,
        help="take the control arm from this loop file, run for run",
    )
    p.add_argument("--eval-episodes", type=int, default=100, help="the loops' eval.episodes")
    p.add_argument("--heldout", type=Path, nargs="*", default=[], help="bench/heldout_eval.py files (merged)")
    p.add_argument("--deployed", action="store_true", help="each arm's deployed policy, not its candidate")
    p.add_argument("--main", nargs="*", default=[], help="held-out names of the main candidates, loop order")
    p.add_argument("--control", nargs="*", default=[], help="held-out names of the control candidates")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = pool(args)
    for row in [*result["per_seed"], {"out_dir": "pooled", **result["pooled"]}]:
        m, c = row["main"], row["control"]
        log.info(
            "%s: main %s, control %s, %+.1f points",
            row["out_dir"],
            _said(m),
            _said(c),
            row["difference_points"],
        )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
