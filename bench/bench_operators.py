"""Benchmark a task's scripted operator: success from reset, and after taking over a perturbed episode.

Usage::

    MUJOCO_GL=osmesa .venv/bin/python bench/bench_operators.py --task stack3 --episodes 200 \\
        --out bench/results/operators_stack3.json

From reset: episode ``i`` uses env seed ``seed0 + i``; the operator runs with the default
:class:`OperatorNoise` (its style drawn from a generator seeded the same) for ``max_steps`` steps.

Takeover: a disturbing phase of a random 5 .. ``--max-disturb`` steps runs first: the operator's
action plus Gaussian noise (std 0.1), interrupted (chance 0.05 per step) by bursts of 1-5 uniform
random actions; with chance 0.04 per step one perturbation is applied through the env's hooks: nudge
a random object 2-5 cm, push the gripper 1-3 cm, or drop the finger friction to 0.05 for 10 steps
when the gripper is closed near an object. Then friction is restored and a fresh operator (default
noise, new style) gets ``max_steps`` more steps. Episodes that end during the disturbing phase count
as they ended (``done_at_handover`` counts the successes); ``stage_at_handover`` is a histogram;
``failed_object_out_of_reach`` counts failures that ended with an object knocked outside the
gripper's workspace (not recoverable by any operator).

Reported rates carry Wilson 95% intervals; lengths are in control steps (20 Hz).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

import rewind.envs as renvs
from rewind.envs.core.base import WORKSPACE_HIGH
from rewind.envs.operators.base import OperatorNoise

log = logging.getLogger("bench_operators")
FRICTION_DROP, FRICTION_STEPS = 0.05, 10
#: Disturbing phase: per-step chance of a burst of 1-5 uniform random actions, action noise std
#: otherwise, per-step chance of a perturbation.
BURST_P, DISTURB_STD, PERTURB_P = 0.05, 0.1, 0.04


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a success rate ``k / n``."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def summarize(successes: list[bool], lengths: list[int]) -> dict[str, Any]:
    """Rate, Wilson interval and episode-length statistics of a batch of episodes."""
    k, n = int(sum(successes)), len(successes)
    lo, hi = wilson(k, n)
    ok_len = [ln for ln, s in zip(lengths, successes, strict=True) if s]
    return {
        "successes": k,
        "episodes": n,
        "rate": k / n if n else 0.0,
        "wilson95": [round(lo, 4), round(hi, 4)],
        "mean_len": float(np.mean(lengths)) if lengths else 0.0,
        "mean_len_success": float(np.mean(ok_len)) if ok_len else 0.0,
        "max_len_success": int(max(ok_len)) if ok_len else 0,
    }


def run_operator(env, op, steps: int) -> tuple[bool, int, dict]:
    """Let ``op`` drive ``env`` for up to ``steps`` steps. Returns (success, steps taken, last info)."""
    info: dict = {}
    for t in range(steps):
        _, _, terminated, _, info = env.step(op.act(env))
        if terminated:
            return bool(info.get("success", False)), t + 1, info
    return False, steps, info


def out_of_reach(base) -> bool:
    """Some object's centre lies outside the gripper's workspace (it cannot be fetched back)."""
    lim = WORKSPACE_HIGH[:2] + 0.01
    return any(np.any(np.abs(base.object_pos(n)[:2]) > lim) for n in base.object_names)


def _holding_something(base) -> bool:
    grip = base.gripper_pos()
    near = any(np.linalg.norm(base.object_pos(n) - grip) < 0.04 for n in base.object_names)
    return near and base.gripper_opening() < 0.07


def _perturb(base, rng: np.random.Generator) -> int:
    """Apply one random perturbation; returns the steps of low friction it started (0 if none)."""
    kind = rng.integers(3)
    if kind == 0:
        name = base.object_names[rng.integers(len(base.object_names))]
        ang = rng.uniform(0, 2 * np.pi)
        base.nudge_object(name, rng.uniform(0.02, 0.05) * np.array([np.cos(ang), np.sin(ang)]))
    elif kind == 1:
        d = rng.normal(size=3)
        base.push_gripper(rng.uniform(0.01, 0.03) * d / np.linalg.norm(d))
    elif _holding_something(base):
        base.set_finger_friction(FRICTION_DROP)
        return FRICTION_STEPS
    return 0


def disturb(env, op, rng: np.random.Generator, steps: int) -> tuple[bool, int, dict]:
    """The disturbing phase of a takeover episode. Returns (terminated, steps taken, last info)."""
    base = env.unwrapped
    low_friction, burst = 0, 0
    info: dict = {}
    for t in range(steps):
        if burst == 0 and rng.random() < BURST_P:
            burst = int(rng.integers(1, 6))
        if burst > 0:
            a, burst = rng.uniform(-1, 1, size=5), burst - 1
        else:
            a = op.act(env) + np.r_[rng.normal(0, DISTURB_STD, size=4), 0.0]
        if rng.random() < PERTURB_P:
            low_friction = max(low_friction, _perturb(base, rng))
        _, _, terminated, _, info = env.step(np.clip(a, -1, 1).astype(np.float32))
        low_friction -= 1
        if low_friction == 0:
            base.set_finger_friction(1.0)
        if terminated:
            return True, t + 1, info
    base.set_finger_friction(1.0)
    return False, steps, info


def bench(task: str, episodes: int, seed0: int, max_disturb: int) -> dict[str, Any]:
    """Run both protocols on ``episodes`` seeds each and return the JSON-ready report."""
    env = renvs.make_env(task)
    steps = env.unwrapped.max_steps
    res: dict[str, list] = {k: [] for k in ("reset_ok", "reset_len", "take_ok", "take_len")}
    done_at_handover, sim_errors, unreachable = 0, 0, 0
    handover_stages: dict[str, int] = {}
    for i in range(episodes):
        seed = seed0 + i
        env.reset(seed=seed)
        op = renvs.make_operator(task, noise=OperatorNoise())
        op.reset(np.random.default_rng(seed))
        ok, n, info = run_operator(env, op, steps)
        res["reset_ok"].append(ok)
        res["reset_len"].append(n)
        sim_errors += "sim_error" in info

        rng = np.random.default_rng([seed, 1])
        env.reset(seed=seed)
        op.reset(rng)
        term, _, info = disturb(env, op, rng, int(rng.integers(5, max_disturb + 1)))
        name = info.get("stage_name", "?")
        handover_stages[name] = handover_stages.get(name, 0) + 1
        if term:
            ok, n = bool(info.get("success", False)), 0
            done_at_handover += ok
        else:
            op = renvs.make_operator(task, noise=OperatorNoise())
            op.reset(np.random.default_rng([seed, 2]))
            ok, n, info = run_operator(env, op, steps)
        sim_errors += "sim_error" in info
        res["take_ok"].append(ok)
        res["take_len"].append(n)
        if not ok:
            unreachable += out_of_reach(env.unwrapped)
            log.info("seed %d: takeover failed (stage %s)", seed, info.get("stage_name"))
    env.close()
    takeover = summarize(res["take_ok"], res["take_len"])
    takeover["done_at_handover"] = int(done_at_handover)
    takeover["stage_at_handover"] = handover_stages
    takeover["failed_object_out_of_reach"] = int(unreachable)
    return {
        "task": task,
        "max_steps": steps,
        "seed0": seed0,
        "max_disturb": max_disturb,
        "from_reset": summarize(res["reset_ok"], res["reset_len"]),
        "takeover": takeover,
        "sim_errors": int(sim_errors),
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="task name or Gymnasium id, e.g. stack3")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed0", type=int, default=0, help="first env seed")
    p.add_argument("--max-disturb", type=int, default=80, help="longest disturbing phase (steps)")
    p.add_argument("--out", type=Path, help="write the report here as JSON")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    t0 = time.time()
    report = bench(args.task, args.episodes, args.seed0, args.max_disturb)
    report["wall_s"] = round(time.time() - t0, 1)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    log.info("%s", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
