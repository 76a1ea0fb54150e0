"""What ``recovery.stall_from_demos`` gives per task: the demos' stage durations (percentiles, per
stage) and ``stall_steps = ceil(f * q95)`` for a few factors ``f``, beside today's fixed 30.

Per task it collects scripted demos as the loop's base does (``rewind-collect``, seeds ``0..N-1``; kept
under ``--root`` and reused when there), then counts the durations with :mod:`rewind.loop.stall`, the
code the loop runs. Results of several invocations merge into ``--out`` (one entry per task), so the
robosuite tasks can be added from their own virtualenv:

    MUJOCO_GL=osmesa .venv/bin/python bench/stall_from_demos.py --tasks pick_place stack3 nut_peg --demos 20
    MUJOCO_GL=osmesa .venv-robosuite/bin/python bench/stall_from_demos.py --tasks robosuite_can --demos 10
    # the store of an existing loop (docs/robosuite.md's 100 Can demos), under its own key:
    MUJOCO_GL=osmesa .venv-robosuite/bin/python bench/stall_from_demos.py --tasks robosuite_can \
        --store runs/robosuite_results/can/store --name robosuite_can_100 \
        --policy-store runs/robosuite_results/can/loop_nostall/round_01/collect/store
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from rewind.collect import CollectConfig, run_collect
from rewind.envs.config import EnvConfig, build_env
from rewind.loop.stall import store_episode_durations, store_stage_durations, threshold_steps
from rewind.utils.io import atomic_write_json

log = logging.getLogger("stall_from_demos")
PERCENTILES = (50, 75, 90, 95, 99, 100)
#: The default configs' fixed ``recovery.stall_steps``.
DEFAULT_STALL_STEPS = 30


def demo_store(task: str, demos: int, root: Path) -> Path:
    """``demos`` scripted demos of ``task`` (seeds ``0..``) under ``root/task/store`` (reused if there)."""
    store = root / task / "store"
    if not store.exists():
        cfg = CollectConfig(
            out_dir=str(root / task), env=EnvConfig(name=task), episodes=demos, out=str(store), progress=False
        )
        run_collect(cfg)
    return store


def task_entry(task: str, store: Path, factors: list[float], percentile: float) -> dict[str, Any]:
    """Durations' percentiles (all and per stage) and the threshold for each factor."""
    env = build_env(EnvConfig(name=task))
    try:
        pairs, used, skipped = store_stage_durations(store, env, task)
        names = [*env.unwrapped.stage_names]
    finally:
        env.close()
    d = np.array([n for _, n in pairs], dtype=np.float64)
    pct = {f"p{p}": round(float(np.percentile(d, p)), 2) for p in PERCENTILES}
    per_stage = {}
    for s in sorted({s for s, _ in pairs}):
        ds = np.array([n for t, n in pairs if t == s], dtype=np.float64)
        per_stage[names[s]] = {
            "n": int(ds.size),
            **{f"p{p}": round(float(np.percentile(ds, p)), 2) for p in PERCENTILES},
        }
    stall = {}
    for f in factors:
        steps, q = threshold_steps(d.tolist(), f, percentile)
        stall[f"{f:g}"] = {"stall_steps": steps, "q": round(q, 2)}
    return {
        "store": str(store),
        "demo_episodes": used,
        "skipped_episodes": skipped,
        "demo_stages": int(d.size),
        "steps_to_success_mean": round(float(d.sum() / max(used, 1)), 2),
        "percentile": percentile,
        "durations": pct,
        "per_stage": per_stage,
        "stall_steps": stall,
    }


def policy_stalls(task: str, store: Path, thresholds: dict[str, int]) -> dict[str, Any]:
    """On the successful episodes the policy drove alone (every step ``policy``; e.g. a loop round's
    collection store with the stall trigger off): how many had a stage longer than each threshold, i.e.
    would have been taken over by the stall trigger although they succeeded."""
    env = build_env(EnvConfig(name=task))
    try:
        episodes, skipped = store_episode_durations(store, env, task, sources=("policy",))
    finally:
        env.close()
    longest = np.array([max(n for _, n in ep) for ep in episodes if ep], dtype=np.float64)
    d = np.array([n for ep in episodes for _, n in ep], dtype=np.float64)
    return {
        "store": str(store),
        "episodes": len(episodes),
        "skipped_episodes": skipped,
        "durations": {f"p{p}": round(float(np.percentile(d, p)), 2) for p in PERCENTILES},
        "stalled_episodes": {k: int((longest > v).sum()) for k, v in thresholds.items()},
    }


def main() -> None:
    """Collect (or reuse) the demos of each task, count, merge into ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["pick_place", "stack3", "nut_peg"])
    ap.add_argument("--demos", type=int, default=20)
    ap.add_argument("--factors", type=float, nargs="+", default=[1.5, 2.0])
    ap.add_argument("--percentile", type=float, default=95.0)
    ap.add_argument("--root", default="runs/stall_from_demos")
    ap.add_argument("--out", default="bench/results/stall_from_demos.json")
    ap.add_argument("--store", help="an existing demo store instead of collecting (one task)")
    ap.add_argument("--name", help="the entry's key in --out (default: the task)")
    ap.add_argument("--policy-store", help="(one task) a store of policy episodes to check the thresholds on")
    a = ap.parse_args()
    if (a.store or a.name or a.policy_store) and len(a.tasks) != 1:
        ap.error("--store, --name and --policy-store take one task")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    out = Path(a.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    for task in a.tasks:
        store = Path(a.store) if a.store else demo_store(task, a.demos, Path(a.root))
        key = a.name or task
        results[key] = r = task_entry(task, store, a.factors, a.percentile)
        if a.policy_store:
            thresholds = {"default": DEFAULT_STALL_STEPS}
            thresholds |= {f"f{f}": v["stall_steps"] for f, v in r["stall_steps"].items()}
            r["policy_check"] = policy_stalls(task, Path(a.policy_store), thresholds)
            log.info("%s: policy episodes stalled %s", key, r["policy_check"]["stalled_episodes"])
        log.info(
            "%s (%s): %d stage durations in %d demos, p50 %.0f p95 %.0f max %.0f; stall_steps %s",
            key,
            task,
            r["demo_stages"],
            r["demo_episodes"],
            r["durations"]["p50"],
            r["durations"]["p95"],
            r["durations"]["p100"],
            {f: v["stall_steps"] for f, v in r["stall_steps"].items()},
        )
    atomic_write_json(out, dict(sorted(results.items())))
    log.info("wrote %s", out)


if __name__ == "__main__":
    main()
