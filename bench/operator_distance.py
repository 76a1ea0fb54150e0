"""How far from the demos the human-like operator model finds the states it acts in (issue 13 §1).

The model's skill falls with the distance ratio of :class:`rewind.envs.operators.demo_distance.DemoDistance`
(nearest-demo-state distance over the held-out demo median). This script reports the 10th, 50th and
90th percentiles of that ratio for: states of *new* demos (``--new-demos``: every 5th step of their
episodes, the reference a ratio of ~1 should mean) and the first step of every correction/recovery
segment in loop round stores (``--round NAME=STORE``: where the operator takes over) and of every
``correction`` run (its first decision: in RaC after the drive back), for each distance scaling
(``per_key``, ``per_dim``). The loop records the model's own first-decision ratios per round too
(``round.json``); this script is for stores and scalings after the fact.

    MUJOCO_GL=osmesa .venv/bin/python bench/operator_distance.py \\
        --demos runs/loop_experiment/pick_place/demos_20/store \\
        --new-demos runs/loop_experiment/pick_place/demos_40/store --skip-new 20 \\
        --round rac=runs/loop_experiment/pick_place/operator_human_like_s0/round_01/collect/store \\
        --round dagger=runs/loop_experiment/pick_place/dagger_human_like_s0/round_01/collect/store \\
        --out bench/results/operator_distance_pick_place.json
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
from _commands import write_result  # bench/ is on sys.path when a script there runs

from rewind.envs.operators.demo_distance import DemoDistance
from rewind.store import SOURCE_CODES, ReplayStore

log = logging.getLogger("bench.operator_distance")
TAKEOVER_LABELS = ("correction", "recovery", "human")


def new_demo_states(path: str, keys: list[str], skip: int, every: int = 5) -> list[dict[str, np.ndarray]]:
    """Every ``every``-th step of the episodes of ``path`` after the first ``skip``."""
    out = []
    with ReplayStore.open(path) as store:
        for info in store.episodes()[skip:]:
            ep = store.load(info.id, obs_keys=keys)
            out += [{k: ep.obs[k][i] for k in keys} for i in range(0, info.length, every)]
    return out


def takeover_states(
    path: str, keys: list[str], labels: tuple[str, ...] = TAKEOVER_LABELS
) -> list[dict[str, np.ndarray]]:
    """The first step of every run of ``labels`` steps in the store at ``path`` (default: where the
    operator takes over; ``("correction",)``: its first decision after a RaC drive back)."""
    codes = [SOURCE_CODES[label] for label in labels]
    out = []
    with ReplayStore.open(path) as store:
        for info in store.episodes():
            ep = store.load(info.id, obs_keys=keys)
            mask = np.isin(np.asarray(ep.sources), codes)
            starts = np.flatnonzero(mask & ~np.r_[False, mask[:-1]])
            out += [{k: ep.obs[k][i] for k in keys} for i in starts]
    return out


def percentiles(dist: DemoDistance, states: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """The number of states and the 10/50/90th percentile of their distance ratios."""
    if not states:
        return {"n": 0}
    r = np.array([dist.ratio(s) for s in states])
    p10, p50, p90 = np.percentile(r, [10, 50, 90])
    return {"n": len(r), "p10": float(p10), "p50": float(p50), "p90": float(p90)}


def main() -> None:
    """Measure every scaling on every set of states; write the JSON and a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demos", required=True, help="the demo store the model measures distance to")
    ap.add_argument("--new-demos", help="a store of other demos (reference states)")
    ap.add_argument("--skip-new", type=int, default=0, help="leave out the first N episodes of --new-demos")
    ap.add_argument("--round", action="append", default=[], help="NAME=STORE of a loop round")
    ap.add_argument("--scales", nargs="*", default=["per_key", "per_dim"])
    ap.add_argument("--out", default="bench/results/operator_distance.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    rows = []
    for scale in a.scales:
        dist = DemoDistance.from_store(a.demos, scale=scale)
        sets = {}
        for name, p in (r.split("=", 1) for r in a.round):
            sets[f"{name} takeover"] = takeover_states(p, dist.keys)
            sets[f"{name} first correction"] = takeover_states(p, dist.keys, ("correction",))
        if a.new_demos:
            sets = {"new_demos": new_demo_states(a.new_demos, dist.keys, a.skip_new), **sets}
        for name, states in sets.items():
            rows.append(
                {"scale": scale, "states": name, "reference": dist.reference, **percentiles(dist, states)}
            )
            log.info("%s %s: %s", scale, name, rows[-1])
    lines = ["| scaling | states | n | ratio p10 | p50 | p90 |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['scale']} | {r['states']} | {r['n']} | {r.get('p10', float('nan')):.2f} "
        f"| {r.get('p50', float('nan')):.2f} | {r.get('p90', float('nan')):.2f} |"
        for r in rows
    ]
    write_result(Path(a.out), {"demos": a.demos, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
