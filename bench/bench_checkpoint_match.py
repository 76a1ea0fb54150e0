"""How well online checkpoint matching finds the moment a stage completes, per matching rule.

    MUJOCO_GL=osmesa .venv/bin/python bench/bench_checkpoint_match.py \
        --task stack3 --run runs/base_policies/stack3_d100_s10000 --episodes 30

For each policy rollout (seeds 10000..) and each ``stage``-labelled checkpoint the stage actually
completed, it compares the step of the similarity peak with the true step, for two rules: the
single KDE template of the checkpoint (Rewind-IL) and the nearest labelled demo example; it also
reports the peak and median cosine similarity (how far a threshold can sit from the background).
Writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rewind  # noqa: F401, E402  (before mujoco)
from rewind.envs.registry import make_env  # noqa: E402
from rewind.monitor import MonitoredEpisode, build_library  # noqa: E402
from rewind.monitor.checkpoints import StageLabeler  # noqa: E402
from rewind.monitor.features import FeatureExtractor  # noqa: E402
from rewind.store import ReplayStore  # noqa: E402
from rewind.train.policy_api import load_policy  # noqa: E402
from rewind.utils.io import atomic_write_text


def _cos(f: np.ndarray, rows: np.ndarray) -> float:
    return float((rows @ f / (np.linalg.norm(rows, axis=1) * np.linalg.norm(f) + 1e-9)).max())


def main() -> None:
    """Measure and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="stack3")
    ap.add_argument("--run", default="runs/base_policies/stack3_d100_s10000")
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--out", default="bench/results/checkpoint_match.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    env = make_env(args.task)
    lp = load_policy(str(Path(args.run) / "train"), env, args.task, torch.device("cpu"))
    with ReplayStore.open(Path(args.run) / "store") as st:
        demos = [st.load(i.id) for i in st.episodes(success=True)[:50]]
    lib = build_library(lp.policy, demos, env.unwrapped, StageLabeler(), lp.weights_hash)
    rules = {
        "template": [lib.templates[k : k + 1] for k in range(len(lib.names))],
        "nearest": [lib.examples[lib.owner == k] for k in range(len(lib.names))],
    }
    ep, fe = (
        MonitoredEpisode(env, lp.policy, generator=torch.Generator().manual_seed(0)),
        FeatureExtractor(lp.policy),
    )
    rows: dict[str, list[tuple[int, int, float, float]]] = {r: [] for r in rules}
    for seed in range(10000, 10000 + args.episodes):
        ep.reset(seed)
        fe.reset()
        fe.push(ep.obs)
        feats, stages = [], []
        while not ep.done:
            ep.policy_step()
            fe.push(ep.obs)
            feats.append(fe.features() - lib.mean)
            stages.append(env.unwrapped.stage())
        for k in range(len(lib.names)):
            done = np.flatnonzero(np.asarray(stages) > k)
            if not len(done):
                continue
            for rule, mats in rules.items():
                sims = np.array([_cos(f, mats[k]) for f in feats])
                rows[rule].append(
                    (int(done[0]), int(sims.argmax()), float(sims.max()), float(np.median(sims)))
                )
    out = {"task": args.task, "run": args.run, "episodes": args.episodes, "checkpoints": lib.names}
    for rule, v in rows.items():
        a = np.array(v)
        err = np.abs(a[:, 0] - a[:, 1])
        out[rule] = {
            "n": len(a),
            "median_peak_error_steps": float(np.median(err)),
            "frac_within_5_steps": float(np.mean(err <= 5)),
            "median_peak_similarity": float(np.median(a[:, 2])),
            "median_similarity": float(np.median(a[:, 3])),
            "frac_peak_above_0.7": float(np.mean(a[:, 2] >= 0.7)),
        }
    atomic_write_text(args.out, json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
