"""Do a round's steps lie outside the policy's normalizer range? Per observation key, how far.

A policy normalizes every low-dim observation with statistics fitted to its training data (min-max:
the fitted range maps to ``[-1, 1]``). A channel that barely varies in the demos (a cube quaternion's
x/y) turns a small tilt in a correction into a value of 100 or more: a "correction mode" flag. This
script reports, for each ``NAME=STORE[:LABEL,...]`` data set, per key, the largest ``|normalized
value|`` and the share of steps beyond ``--threshold``: under the policy's own normalizer (what
``finetune.normalizer=keep`` trains with) and under one refit to ``--refit-on`` stores (what
``finetune.normalizer=refit`` fits: every step of those stores).

    MUJOCO_GL=osmesa .venv/bin/python bench/obs_range.py --weights runs/base_ablation/stack3/baseline_s6000/train \
        corrections=runs/issue12/s3_rac_fs_s0/round_01/collect/store:correction \
        --refit-on runs/base_ablation/stack3/store runs/issue12/s3_rac_fs_s0/round_01/collect/store \
        --out bench/results/obs_range_stack3_rac_round1.json
"""

from __future__ import annotations

import argparse
import copy
import logging
from pathlib import Path
from typing import Any

import numpy as np
from _commands import write_result

from rewind.loop.obs_range import store_arrays
from rewind.policies.io import load_policy_weights
from rewind.train.policy_api import resolve_weights

log = logging.getLogger("obs_range")


def _data_sets(items: list[str]) -> dict[str, tuple[str, list[str]]]:
    out = {}
    for item in items:
        name, sep, rest = item.partition("=")
        if not sep or not name or not rest:
            raise SystemExit(f"expected NAME=STORE[:LABEL,...], got {item!r}")
        store, _, labels = rest.partition(":")
        out[name] = (store, [x for x in labels.split(",") if x])
    return out


def report(args: argparse.Namespace) -> dict[str, Any]:
    """The per-data-set, per-key reports under the policy's normalizer and the refit one."""
    weights = resolve_weights(args.weights)
    norm = load_policy_weights(weights).normalizer
    refit = None
    if args.refit_on:
        fit = [store_arrays(p) for p in args.refit_on]
        refit = copy.deepcopy(norm).fit({k: np.concatenate([f[k] for f in fit]) for k in fit[0]})
    sets = {}
    for name, (store, labels) in _data_sets(args.data).items():
        try:
            data = store_arrays(store, labels)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        sets[name] = {
            "store": store,
            "labels": labels,
            "policy_normalizer": norm.range_report(data, args.threshold),
            "refit_normalizer": refit.range_report(data, args.threshold) if refit is not None else None,
        }
        rep = sets[name]["policy_normalizer"]
        if not rep:
            log.warning("%s: no steps%s", name, f" labelled {labels}" if labels else "")
            continue
        worst = max(rep.items(), key=lambda kv: kv[1]["frac_over"])
        log.info(
            "%s: most steps beyond %.1f in %s (%.0f%%)",
            name,
            args.threshold,
            worst[0],
            100 * worst[1]["frac_over"],
        )
    return {"weights": str(weights), "threshold": args.threshold, "refit_on": args.refit_on, "data": sets}


def main() -> None:
    """Command line entry."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="+", help="NAME=STORE[:LABEL,...] (labels: only those steps)")
    p.add_argument("--weights", required=True, help="the policy (run, weights or step folder)")
    p.add_argument("--refit-on", nargs="*", default=[], help="stores a refit normalizer is fitted to")
    p.add_argument("--threshold", type=float, default=1.5)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    write_result(args.out, report(args))


if __name__ == "__main__":
    main()
