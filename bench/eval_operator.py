"""Success rate of a task's scripted operator, from reset and when taking over a perturbed episode.

Modes:

* ``reset``: the operator (default :class:`OperatorNoise`) runs each seed's episode from reset.
* ``takeover``: every perturbation wrapper is on (probability ``--perturb-prob`` each); for a random
  number of steps (0 .. ``--max-prefix``) the episode is driven by a disruptive prefix policy (uniform
  random actions, the operator with heavy action noise, or the operator with random bursts, chosen
  per episode), then the clean operator takes over until the episode ends.

Example::

    .venv/bin/python bench/eval_operator.py --task pick_place --mode reset --episodes 200
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

import rewind.envs as renvs
from rewind.envs.operators.base import Operator, OperatorNoise
from rewind.envs.wrappers import PerturbationConfig, apply_perturbations

log = logging.getLogger("eval_operator")
PREFIX_KINDS = ("random", "noisy", "bursts")


def _prefix_action(kind: str, env, noisy: Operator, rng: np.random.Generator) -> np.ndarray:
    if kind == "random" or (kind == "bursts" and rng.random() < 0.3):
        return rng.uniform(-1, 1, size=5).astype(np.float32)
    return noisy.act(env)


def run_episode(task: str, seed: int, mode: str, max_prefix: int, perturb_prob: float) -> dict:
    """One episode; returns its seed, success, steps taken and (takeover) prefix length and kind."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    if mode == "reset":
        env = renvs.make_env(task)
        op = renvs.make_operator(task, noise=OperatorNoise())
        prefix, kind = 0, "none"
    else:
        p = perturb_prob
        env = renvs.make_env(task, max_steps=max_prefix + renvs.make_env(task).unwrapped.max_steps)
        env = apply_perturbations(env, PerturbationConfig(nudge_prob=p, slip_prob=p, push_prob=p))
        op = renvs.make_operator(task)
        prefix = int(rng.integers(0, max_prefix + 1))
        kind = PREFIX_KINDS[int(rng.integers(len(PREFIX_KINDS)))]
    noisy = renvs.make_operator(task, noise=OperatorNoise(action_std=0.5, gain_range=(0.5, 1.5)))
    noisy.reset(rng)
    op.reset(rng)
    env.reset(seed=seed)
    info: dict = {"success": False}
    perts: list = []
    for t in range(10_000):
        a = _prefix_action(kind, env, noisy, rng) if t < prefix else op.act(env)
        _, _, term, trunc, info = env.step(a)
        perts += [p["type"] for p in info.get("perturbation", [])]
        if term or trunc:
            break
    env.close()
    return {
        "seed": seed,
        "success": bool(info["success"]),
        "steps": t + 1,
        "prefix": prefix,
        "kind": kind,
        "stage": info["stage"],
        "perturbations": perts,
        "sim_error": info.get("sim_error"),
    }


def main(argv: list[str] | None = None) -> None:
    """Evaluate and print/write the success rate."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="pick_place")
    ap.add_argument("--mode", choices=("reset", "takeover"), default="reset")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--max-prefix", type=int, default=100)
    ap.add_argument("--perturb-prob", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=None, help="optional JSON file for the per-episode results")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    eps = [
        run_episode(args.task, s, args.mode, args.max_prefix, args.perturb_prob)
        for s in range(args.first_seed, args.first_seed + args.episodes)
    ]
    rate = float(np.mean([e["success"] for e in eps]))
    log.info(
        "%s %s: %d/%d = %.1f%% success (%.1fs)",
        args.task,
        args.mode,
        sum(e["success"] for e in eps),
        len(eps),
        100 * rate,
        time.perf_counter() - t0,
    )
    for e in eps:
        if not e["success"]:
            log.info("  failed: %s", e)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"task": args.task, "mode": args.mode, "success_rate": rate, "episodes": eps}, indent=1
            )
        )


if __name__ == "__main__":
    main()
