"""Pool a base recipe's evaluations over training seeds: ``bench/base_ablation.py`` rows, recipe by recipe.

Each ``--arm NAME=FILE:VARIANT[,FILE:VARIANT...]`` names one recipe and, per training seed, the
``base_ablation.py`` result file and the row (variant) that holds its evaluation. All arms of one
comparison must cover the same evaluation seed ranges and episode counts (refused otherwise): one
range, or several that every arm covers (an arm pooled over two fresh seed ranges). Writes, per
arm, each training seed's success and the pooled successes with the 95% Wilson interval, and the
difference of each arm from the first, in points. Nothing is run; the numbers are the files' own.

``--choose`` applies the selection rule the sessions fix before their runs: the arm with the most pooled
successes, a tie keeping the first arm (the incumbent). It records ``chosen`` in the JSON and prints the
arm's name on stdout, so a run script can evaluate the choice on other seeds without a hand-written rule.

    .venv/bin/python bench/pool_base.py \\
        --arm all_demos=bench/results/base_ablation_stack3_all_demos_s12000_seeds70000.json:all_demos_act2,bench/results/base_ablation_stack3_all_demos_s12000_seed1_seeds70000.json:all_demos_act2 \\
        --arm 90_demos=bench/results/base_ablation_stack3_s12000_seeds70000.json:ddim_eta1_act2,bench/results/base_ablation_stack3_baseline_s12000_seed1_seeds70000.json:act2 \\
        --out bench/results/pooled_stack3_base_all_demos.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from _commands import write_result
from pool_arms import arm_record


def _row(spec: str) -> dict[str, Any]:
    """The ``base_ablation.py`` row named by ``FILE:VARIANT``, with its file's training seed."""
    path, sep, variant = spec.rpartition(":")
    if not sep or not path:
        raise SystemExit(f"--arm entry {spec!r}: expected FILE:VARIANT")
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"{path}: not a readable base_ablation.py result file ({e})") from None
    rows = [r for r in record.get("rows", []) if r.get("variant") == variant]
    if not rows:
        found = sorted(r.get("variant") for r in record.get("rows", []))
        raise SystemExit(f"{path}: no row {variant!r}; its rows: {found}")
    row = rows[0]
    seed = row.get("train_seed", record.get("train_seed", 0))
    return {
        "file": path,
        "variant": variant,
        "train_seed": seed,
        **{k: row[k] for k in ("success", "episodes", "eval_seed")},
    }


def pool_arm(name: str, specs: list[str]) -> dict[str, Any]:
    """One arm: its per-seed rows and the pooled success with its Wilson interval."""
    rows = [_row(s) for s in specs]
    k = sum(round(r["success"] * r["episodes"]) for r in rows)
    n = sum(r["episodes"] for r in rows)
    return {"arm": name, "runs": rows, **arm_record(k, n)}


def eval_ranges(arms: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (first evaluation seed, episodes) ranges the arms cover: one range, or several that every arm
    covers alike (e.g. an arm pooled over two seed ranges); any other mix is refused."""
    per_arm = [sorted({(r["eval_seed"], r["episodes"]) for r in arm["runs"]}) for arm in arms]
    if any(ranges != per_arm[0] for ranges in per_arm):
        found = {arm["arm"]: ranges for arm, ranges in zip(arms, per_arm, strict=True)}
        raise SystemExit(f"the arms are on different evaluation seeds or episode counts: {found}")
    return per_arm[0]


#: the selection rule ``--choose`` applies, as recorded in the JSON and the table
RULE = "most pooled successes; a tie keeps the first arm"


def choose(arms: list[dict[str, Any]]) -> str:
    """The arm with the most pooled successes; ties keep the earliest arm (the first is the incumbent)."""
    best = max(arm["successes"] for arm in arms)
    return next(arm["arm"] for arm in arms if arm["successes"] == best)


def table(record: dict[str, Any]) -> str:
    """The Markdown table of a pooled record: one row per arm, and the choice when one was made."""
    lines = [
        "| recipe | per training seed | pooled | 95% Wilson | vs first (points) |",
        "|---|---|---|---|---|",
    ]
    several = isinstance(record["eval_seed"], list)  # runs labelled with their seed range
    for arm in record["arms"]:
        per = ", ".join(
            f"seed {r['train_seed']}"
            + (f" on {r['eval_seed']}..: " if several else ": ")
            + f"{r['success']:.0%}"
            for r in arm["runs"]
        )
        lo, hi = arm["ci95"]
        lines.append(
            f"| {arm['arm']} | {per} | {arm['successes']}/{arm['episodes']} = {arm['success']:.1%} "
            f"| [{lo:.2f}, {hi:.2f}] | {arm['minus_first_points']:+.1f} |"
        )
    if "chosen" in record:
        lines.append(f"\nChosen by the rule ({record['rule']}): **{record['chosen']}**")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Pool the arms and write the JSON and a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=FILE:VARIANT[,FILE:VARIANT...]")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--choose",
        action="store_true",
        help=f"record and print the arm the rule selects ({RULE})",
    )
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    arms = []
    for spec in a.arm:
        name, sep, files = spec.partition("=")
        if not sep or not files:
            raise SystemExit(f"--arm {spec!r}: expected NAME=FILE:VARIANT[,FILE:VARIANT...]")
        arms.append(pool_arm(name, files.split(",")))
    ranges = eval_ranges(arms)
    for arm in arms:
        arm["minus_first_points"] = round(100 * (arm["success"] - arms[0]["success"]), 1)
    seeds = [seed for seed, _ in ranges]  # one range: its first seed; several: the list
    record: dict[str, Any] = {"eval_seed": seeds[0] if len(seeds) == 1 else seeds, "arms": arms}
    if a.choose:
        record["chosen"] = choose(arms)
        record["rule"] = RULE
        logging.info("chosen: %s (%s)", record["chosen"], record["rule"])
    write_result(Path(a.out), record, table(record))
    if a.choose:
        print(record["chosen"])  # the command's output, for a run script; everything else is logged


if __name__ == "__main__":
    main()
