"""Replay the promotion decisions recorded in loop result files under ``promotion.floor=base``.

Every gated decision a loop recorded (``bench/loop_result.py`` files: each round's ``promotion`` and
``control_promotion``) is judged again by :func:`rewind.loop.promotion.not_worse` with the base
policy's selection result (round 1's ``deployed_selection``) as the floor. The result lists the
decisions the floor changes. Nothing is run; a loop folder listed in several files counts once.

    .venv/bin/python bench/gate_floor.py bench/results/*.json --out bench/results/gate_floor_replay.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from _commands import write_result

from rewind.loop.promotion import not_worse
from rewind.loop.record import PromotionOutcome

log = logging.getLogger("bench")


def _loops(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """The gated loop runs of ``paths`` by out_dir (files that are not loop results are skipped)."""
    loops: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            runs = json.loads(path.read_text()).get("runs")
        except (OSError, ValueError, AttributeError):
            continue
        for run in runs if isinstance(runs, list) else []:
            rounds = run.get("rounds") if isinstance(run, dict) else None
            first = (rounds or {}).get("round_01") if isinstance(rounds, dict) else None
            if first and first.get("promotion"):
                loops.setdefault(run["out_dir"], {**run, "file": str(path)})
    return loops


def replay(paths: list[Path]) -> dict[str, Any]:
    """Each gated decision of ``paths``' loops judged again with the base floor: the files that held
    gated loops, the counts, and the decisions the floor changes."""
    loops, decisions, changed = _loops(paths), 0, []
    for out_dir, run in sorted(loops.items()):
        first = PromotionOutcome.from_json(run["rounds"]["round_01"]["promotion"], f"{out_dir} round_01")
        base = first.deployed_selection
        for name, rnd in sorted(run["rounds"].items()):
            for arm, key in (("main", "promotion"), ("control", "control_promotion")):
                if not rnd.get(key):
                    continue
                decisions += 1
                gate = PromotionOutcome.from_json(rnd[key], f"{out_dir} {name} {key}")
                cand, dep = gate.candidate_selection, gate.deployed_selection
                floored = not_worse(cand, dep, gate.tolerance, base)
                if floored != gate.promoted:
                    changed.append(
                        {
                            "out_dir": out_dir,
                            "file": run["file"],
                            "round": name,
                            "arm": arm,
                            "candidate": cand.success_rate,
                            "deployed": dep.success_rate,
                            "base": base.success_rate,
                            "promoted": gate.promoted,
                            "with_floor": floored,
                        }
                    )
    files = sorted({run["file"] for run in loops.values()})
    return {"files": files, "loops": len(loops), "decisions": decisions, "changed": changed}


def main() -> None:
    """Command line: loop result files in, the replay's JSON out."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="bench/loop_result.py files (others are skipped)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = replay(args.files)
    log.info(
        "%d gated loops, %d decisions, %d changed by the floor",
        result["loops"],
        result["decisions"],
        len(result["changed"]),
    )
    for c in result["changed"]:
        log.info(
            "  %s %s %s: candidate %.2f vs deployed %.2f, base %.2f",
            c["out_dir"],
            c["round"],
            c["arm"],
            c["candidate"],
            c["deployed"],
            c["base"],
        )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
