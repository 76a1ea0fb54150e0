"""Env overhead benchmark: step() cost over raw MuJoCo, restore() latency, rgb render time.

For every task whose module imports, a trajectory of the (noisy) scripted operator is recorded. Then,
from the same start state and with the same actions:

* ``step_us_gym`` / ``step_us_unwrapped``: mean wall time of ``env.step`` through the registered
  Gymnasium env (``gymnasium.make``, with its wrappers) and through the unwrapped task env;
* ``mj_step_us``: mean wall time of the raw ``mujoco.mj_step(model, data, nstep=N_SUBSTEPS)`` that one
  step performs, on the same recorded states;
* ``ratio_gym`` / ``ratio_unwrapped``: step time over raw time (target <= 1.5, stretch <= 1.2); the
  env step and the raw substeps are timed alternately, step by step, from the same recorded states;
* ``restore_us``: one ``env.restore(snapshot)`` (target <= 20 us);
* ``render_ms_128`` / ``render_ms_256``: one rgb frame of the front camera.

Each number is the median over ``--repeats`` repeats. Run::

    MUJOCO_GL=osmesa .venv/bin/python bench/bench_env.py --out bench/results/env.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")

import rewind  # noqa: E402, F401  (first: with OSMesa it must load triton before mujoco)

# isort: split
import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import rewind.envs as renvs  # noqa: E402
from rewind.envs.core.mjcf import N_SUBSTEPS  # noqa: E402
from rewind.envs.operators.base import OperatorNoise  # noqa: E402
from rewind.envs.registry import TASKS  # noqa: E402
from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench_env")


def _record(task: str, steps: int, seed: int) -> tuple[gym.Env, object, list[np.ndarray], list[np.ndarray]]:
    """The registered env reset to ``seed``, its start snapshot, the actions and per-step states."""
    env = renvs.make_env(task, max_steps=10 * steps)
    base = env.unwrapped
    try:
        op = renvs.make_operator(task, noise=OperatorNoise())
        op.reset(np.random.default_rng(seed))
    except (ImportError, AttributeError):
        op = None
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    start = base.snapshot()
    actions, states = [], []
    for _ in range(steps):
        a = op.act(base) if op is not None else rng.uniform(-1, 1, 5).astype(np.float32)
        states.append(base.physics_state())
        actions.append(a)
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            base.restore(start)  # keep the trajectory going through the same states
    base.restore(start)
    return env, start, actions, states


def _time_step_vs_raw(
    env: gym.Env, states: list[np.ndarray], actions: list[np.ndarray], tries: int = 3
) -> tuple[float, float]:
    """Mean us of ``env.step`` and of the raw substeps it performs, from the same recorded states.

    For each state both are timed ``tries`` times, alternately, and the fastest of each is kept, so a
    preemption by other processes on a busy machine does not land in one side only.
    """
    base = env.unwrapped
    m, d = base.model, base.data
    step, set_state, apply = env.step, base.set_physics_state, base._apply_action
    t_env = t_raw = 0.0
    for s, a in zip(states, actions, strict=True):
        best_env = best_raw = float("inf")
        for _ in range(tries):
            set_state(s)
            t0 = time.perf_counter()
            step(a)
            t1 = time.perf_counter()
            set_state(s)
            apply(np.asarray(a, dtype=np.float64))  # the same controls as env.step, outside the timing
            t2 = time.perf_counter()
            mujoco.mj_step(m, d, nstep=N_SUBSTEPS)
            t3 = time.perf_counter()
            best_env, best_raw = min(best_env, t1 - t0), min(best_raw, t3 - t2)
        t_env += best_env
        t_raw += best_raw
    n = len(states)
    return t_env / n * 1e6, t_raw / n * 1e6


def _time_restore(base, snap, n: int = 2000) -> float:
    restore = base.restore
    t0 = time.perf_counter()
    for _ in range(n):
        restore(snap)
    return (time.perf_counter() - t0) / n * 1e6


def _time_render(base, size: int, n: int) -> float:
    base.render_camera("front", size)  # warm-up: creates the GL context
    t0 = time.perf_counter()
    for _ in range(n):
        base.render_camera("front", size)
    return (time.perf_counter() - t0) / n * 1e3


def bench_task(task: str, steps: int, repeats: int, frames: int) -> dict:
    """All numbers for one task (medians over ``repeats``)."""
    env, start, actions, states = _record(task, steps, seed=0)
    base = env.unwrapped
    keys = ("step_us_gym", "step_us_unwrapped", "mj_step_us", "ratio_gym", "ratio_unwrapped", "restore_us")
    rows: dict[str, list[float]] = {k: [] for k in (*keys, "render_ms_128", "render_ms_256")}
    for _ in range(repeats):
        gym_us, raw_gym = _time_step_vs_raw(env, states, actions)
        unw_us, raw_unw = _time_step_vs_raw(base, states, actions)
        rows["step_us_gym"].append(gym_us)
        rows["step_us_unwrapped"].append(unw_us)
        rows["mj_step_us"].append((raw_gym + raw_unw) / 2)
        rows["ratio_gym"].append(gym_us / raw_gym)
        rows["ratio_unwrapped"].append(unw_us / raw_unw)
        rows["restore_us"].append(_time_restore(base, start))
        rows["render_ms_128"].append(_time_render(base, 128, frames))
        rows["render_ms_256"].append(_time_render(base, 256, frames))
    out = {k: round(statistics.median(v), 3 if k.startswith("ratio") else 2) for k, v in rows.items()}
    env.close()
    return out


def _importable(task: str) -> bool:
    try:
        renvs.make_env(task).close()
    except ImportError as e:
        log.warning("skipping %s: %s", task, e)
        return False
    return True


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark and write the JSON results."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench/results/env.json"))
    ap.add_argument("--tasks", nargs="*", default=sorted(TASKS), help="task short names (default: all)")
    ap.add_argument("--steps", type=int, default=150, help="steps per timed trajectory")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frames", type=int, default=20, help="frames per render timing")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    results = {}
    for task in args.tasks:
        if _importable(task):
            results[task] = bench_task(task, args.steps, args.repeats, args.frames)
            log.info("%s: %s", task, results[task])
    doc = {
        "results": results,
        "meta": {
            "mujoco": mujoco.__version__,
            "gymnasium": gym.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "mujoco_gl": os.environ.get("MUJOCO_GL"),
            "steps": args.steps,
            "repeats": args.repeats,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
    }
    atomic_write_text(args.out, json.dumps(doc, indent=1) + "\n")
    log.info("wrote %s", args.out)
    return doc


if __name__ == "__main__":
    main()
