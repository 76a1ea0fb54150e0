"""Do the operator's corrections contradict the demos? Per stage, the share of correction steps whose
action disagrees with what the demos do in the nearest states.

For every step, the policy's own encoder gives features of its observation window (what the policy
sees). For a correction (or recovery) step of a round's store, the ``k`` nearest demo steps in that
feature space are found, and the step's *disagreement* is the distance from its normalized action to
the nearest of those demo actions. The same statistic for demo steps, with neighbours taken from the
*other* demo episodes only, gives the demos' own spread; a correction step **conflicts** when its
disagreement exceeds the demos' ``--quantile`` (0.95: 5% of demo steps count as conflicting by
construction). The stage of each step comes from the env's predicates on its stored physics state.

    MUJOCO_GL=osmesa .venv/bin/python bench/label_conflict.py --task stack3 \
        --weights runs/loop_experiment/stack3/demos_100/train \
        --demos runs/loop_experiment/stack3/demos_100/store \
        --round-store runs/loop_experiment/stack3/dagger_s0/round_01/collect/store \
        --out bench/results/label_conflict_stack3.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rewind.envs.registry import make_env
from rewind.store import SOURCE_CODES, ReplayStore
from rewind.train.policy_api import load_policy

log = logging.getLogger("label_conflict")
LABELS = ("correction", "recovery")


def step_table(
    store_path: str, policy: Any, env: Any, labels: tuple[str, ...] | None
) -> dict[str, np.ndarray]:
    """Per step of the store (only ``labels`` when given): features ``[N, F]``, normalized actions
    ``[N, Da]``, episode ids and stages."""
    feats, acts, eps, stages = [], [], [], []
    codes = None if labels is None else [SOURCE_CODES[x] for x in labels]
    to = policy.n_obs_steps
    with ReplayStore.open(store_path) as store:
        for info in store.episodes():
            ep = store.load(info.id)
            keep = np.arange(len(ep.actions)) if codes is None else np.flatnonzero(np.isin(ep.sources, codes))
            if not len(keep):
                continue
            idx = np.clip(keep[:, None] + np.arange(1 - to, 1), 0, None)
            window = {k: torch.as_tensor(ep.obs[k][idx]).float() for k in policy.obs_keys}
            with torch.no_grad():
                feats.append(policy.encode(window).numpy())
                acts.append(policy.normalizer.normalize("action", torch.as_tensor(ep.actions[keep])).numpy())
            for t in keep:
                env.set_physics_state(ep.states[t])
                stages.append(env.stage())
            eps.append(np.full(len(keep), info.id))
    return {
        "feats": np.concatenate(feats),
        "acts": np.concatenate(acts),
        "episode": np.concatenate(eps),
        "stage": np.asarray(stages),
    }


def disagreement(query: dict[str, np.ndarray], demos: dict[str, np.ndarray], k: int, loo: bool) -> np.ndarray:
    """Per query step: distance from its action to the nearest action among its ``k`` nearest demo steps
    (``loo``: never neighbours from the query's own episode)."""
    out = np.empty(len(query["feats"]))
    for i in range(0, len(out), 512):
        q = query["feats"][i : i + 512]
        d = (q**2).sum(1)[:, None] + (demos["feats"] ** 2).sum(1)[None] - 2.0 * q @ demos["feats"].T
        if loo:
            d[query["episode"][i : i + 512, None] == demos["episode"][None]] = np.inf
        nn = np.argpartition(d, k, axis=1)[:, :k]
        gap = np.linalg.norm(demos["acts"][nn] - query["acts"][i : i + 512, None], axis=-1)
        out[i : i + 512] = gap.min(1)
    return out


def main() -> None:
    """Compute the table; write JSON and Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="stack3")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--demos", required=True)
    ap.add_argument("--round-store", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--quantile", type=float, default=0.95)
    ap.add_argument("--out", default="bench/results/label_conflict_stack3.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    env = make_env(a.task)
    policy = load_policy(a.weights, env, a.task, torch.device("cpu")).policy
    base = env.unwrapped
    demos = step_table(a.demos, policy, base, None)
    corr = step_table(a.round_store, policy, base, LABELS)
    tau = float(np.quantile(disagreement(demos, demos, a.k, loo=True), a.quantile))
    gap = disagreement(corr, demos, a.k, loo=False)
    rows = []
    for s, name in enumerate([*base.stage_names, "done"]):
        sel = corr["stage"] == s
        if sel.any():
            rows.append(
                {
                    "stage": name,
                    "steps": int(sel.sum()),
                    "conflicting": float((gap[sel] > tau).mean()),
                    "median_disagreement": float(np.median(gap[sel])),
                }
            )
    result = {
        "args": vars(a),
        "threshold": tau,
        "all_steps": len(gap),
        "conflicting": float((gap > tau).mean()),
        "rows": rows,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    lines = [
        f"| stage | correction/recovery steps | conflicting (> demos' q{a.quantile:.2f} = {tau:.3f}) "
        "| median disagreement |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['stage']} | {r['steps']} | {r['conflicting']:.0%} | {r['median_disagreement']:.3f} |"
        for r in rows
    ]
    lines.append(f"| all | {len(gap)} | {result['conflicting']:.0%} | {float(np.median(gap)):.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    log.info("\n%s", "\n".join(lines))


if __name__ == "__main__":
    main()
