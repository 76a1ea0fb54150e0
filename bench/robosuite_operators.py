"""Score the robosuite scripted operators: success from reset and on takeover (docs/robosuite.md).

Usage (in the extra's virtualenv, ``bash .ci/robosuite_venv.sh``)::

    MUJOCO_GL=osmesa .venv-robosuite/bin/python bench/robosuite_operators.py --tasks Lift Can --episodes 40

Episode ``i`` uses env seed ``i``; the protocols are :mod:`rewind.envs.robosuite.evaluation`'s. The
report goes to ``bench/results/robosuite_operators.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from rewind.envs.robosuite.evaluation import TakeoverConfig, run_from_reset, run_takeover, summarize
from rewind.utils.io import atomic_write_text

log = logging.getLogger("robosuite_operators")
RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    """Run both protocols per task and write the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="*", default=["Lift", "Can"])
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--out", type=Path, default=RESULTS / "robosuite_operators.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = {"takeover_config": asdict(TakeoverConfig()), "tasks": {}}
    for task in args.tasks:
        t0 = time.perf_counter()
        seeds = range(args.episodes)
        reset, takeover = summarize(run_from_reset(task, seeds)), summarize(run_takeover(task, seeds))
        report["tasks"][task] = {
            "from_reset": reset,
            "takeover": takeover,
            "wall_s": round(time.perf_counter() - t0),
        }
        log.info(
            "%s: from reset %d/%d, takeover %d/%d",
            task,
            reset["successes"],
            reset["episodes"],
            takeover["successes"],
            takeover["episodes"],
        )
    atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
