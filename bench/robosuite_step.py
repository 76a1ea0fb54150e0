"""Step cost of the robosuite adapter against robosuite's own ``env.step``, and rewind latency.

Usage (in the extra's virtualenv, ``bash .ci/robosuite_venv.sh``)::

    MUJOCO_GL=osmesa .venv-robosuite/bin/python bench/robosuite_step.py --blocks 10 --steps 40

Per task, one env: blocks of ``--steps`` random actions (a fixed generator) alternate between the
adapter's ``step`` (robosuite's control loop, one ``mj_forward``, observations, stage) and
robosuite's ``env.step`` on the same underlying env, each block starting from the same snapshot;
the medians of the per-block mean step times are compared. ``snapshot()`` and ``restore()`` are
timed over ``--restores`` calls (median). The report goes to ``bench/results/robosuite_step.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from rewind.envs.robosuite.env import RobosuiteEnv
from rewind.utils.io import atomic_write_text

log = logging.getLogger("robosuite_step")
RESULTS = Path(__file__).resolve().parent / "results"


def _block_ms(step, actions: np.ndarray) -> float:
    t0 = time.perf_counter()
    for a in actions:
        step(a)
    return 1e3 * (time.perf_counter() - t0) / len(actions)


def _latency_us(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def bench_task(task: str, blocks: int, steps: int, restores: int) -> dict[str, Any]:
    """The JSON-ready timings of one task."""
    env = RobosuiteEnv(task, max_steps=10_000)
    env.reset(seed=0)
    snap = env.snapshot()
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 7))
    ours, theirs = [], []
    for _ in range(blocks):
        env.restore(snap)
        ours.append(_block_ms(env.step, actions))
        env.restore(snap)
        theirs.append(_block_ms(env.rs.step, actions))
    for a in actions[:10]:
        env.step(a)
    out = {
        "adapter_step_ms": round(statistics.median(ours), 3),
        "robosuite_step_ms": round(statistics.median(theirs), 3),
        "snapshot_us": round(_latency_us(env.snapshot, restores), 1),
        "restore_us": round(_latency_us(lambda: env.restore(snap), restores), 1),
    }
    out["ratio"] = round(out["adapter_step_ms"] / out["robosuite_step_ms"], 3)
    env.close()
    return out


def main() -> None:
    """Time every task and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="*", default=["Lift", "Can", "Square"])
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--restores", type=int, default=200)
    ap.add_argument("--out", type=Path, default=RESULTS / "robosuite_step.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report: dict[str, Any] = {
        "blocks": args.blocks,
        "steps": args.steps,
        "machine": platform.processor() or platform.machine(),
        "tasks": {},
    }
    for task in args.tasks:
        report["tasks"][task] = bench_task(task, args.blocks, args.steps, args.restores)
        log.info("%s: %s", task, report["tasks"][task])
    atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
