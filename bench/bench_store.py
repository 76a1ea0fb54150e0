"""Benchmark of the replay store: write throughput (with the fsync commit) and window sampling.

Runs on one core (thread pools limited to 1, process pinned to ``--cpu``) with Stack3-like
low-dim episodes: 8 float32 obs keys (41 floats), act_dim 5, state_dim 57.

    .venv/bin/python bench/bench_store.py --out bench/results/store.json
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from rewind.store import ReplayStore, StoreSpec  # noqa: E402
from rewind.store.windows import ReplayBuffer, WindowSampler  # noqa: E402
from rewind.utils.io import atomic_write_text  # noqa: E402

OBS = {
    "eef_pos": (3,),
    "eef_quat": (4,),
    "gripper_qpos": (2,),
    "cube_pos": (9,),
    "cube_quat": (12,),
    "eef_to_cubes": (9,),
    "contact": (1,),
    "phase": (1,),
}
SPEC = StoreSpec(
    obs={k: (s, "float32") for k, s in OBS.items()}, action_dim=5, state_dim=57, env_id="rewind/Stack3-v0"
)


def make_episode(rng: np.random.Generator, length: int) -> dict[str, Any]:
    """A random Stack3-like episode as ``add_episode`` keyword arguments."""
    half = length // 2
    return {
        "obs": {k: rng.standard_normal((length, *s)).astype(np.float32) for k, s in OBS.items()},
        "actions": rng.uniform(-1, 1, (length, 5)).astype(np.float32),
        "states": rng.standard_normal((length, 57)),
        "sources": ["policy"] * half + ["recovery"] * (length - half),
        "rewards": np.zeros(length, np.float32),
        "meta": {"seed": 0, "policy_version": "bench", "success": True},
    }


def bench_write_bulk(
    root: Path, episodes: list[dict[str, Any]], sync_every_commit: bool = False
) -> dict[str, float]:
    """``add_episode`` for every episode, each file fsynced before its commit; returns steps/s."""
    with ReplayStore.create(root, SPEC, sync_every_commit=sync_every_commit) as store:
        t0 = time.perf_counter()
        for ep in episodes:
            store.add_episode(**ep)
        dt = time.perf_counter() - t0
    steps = sum(len(ep["actions"]) for ep in episodes)
    return {"episodes": len(episodes), "steps": steps, "seconds": dt, "steps_per_s": steps / dt}


def bench_write_steps(root: Path, episodes: list[dict[str, Any]]) -> dict[str, float]:
    """The step-by-step ``store.episode()`` writer (per-step validation); returns steps/s."""
    with ReplayStore.create(root, SPEC) as store:
        t0 = time.perf_counter()
        for ep in episodes:
            with store.episode(seed=0, policy_version="bench") as writer:
                for t in range(len(ep["actions"])):
                    obs = {k: v[t] for k, v in ep["obs"].items()}
                    writer.add(obs, ep["actions"][t], ep["states"][t], ep["sources"][t], 0.0)
        dt = time.perf_counter() - t0
    steps = sum(len(ep["actions"]) for ep in episodes)
    return {"episodes": len(episodes), "steps": steps, "seconds": dt, "steps_per_s": steps / dt}


def bench_sampling(root: Path, args: argparse.Namespace) -> dict[str, float]:
    """Load the store into a :class:`ReplayBuffer`, then time ``WindowSampler.sample`` batches."""
    with ReplayStore.open(root, mode="r") as store:
        t0 = time.perf_counter()
        buffer = ReplayBuffer.from_store(store)
        load_s = time.perf_counter() - t0
    sampler = WindowSampler(
        buffer, args.n_obs_steps, args.horizon, sample_weights={"recovery": 2.0}, seed=args.seed
    )
    sampler.sample(args.batch)  # warm-up
    t0 = time.perf_counter()
    for _ in range(args.batches):
        sampler.sample(args.batch)
    dt = time.perf_counter() - t0
    n = args.batches * args.batch
    return {
        "load_seconds": load_s,
        "windows": n,
        "seconds": dt,
        "windows_per_s": n / dt,
        "batch": args.batch,
        "horizon": args.horizon,
        "n_obs_steps": args.n_obs_steps,
    }


def _repeat(fn: Any, repeats: int, key: str) -> dict[str, Any]:
    """Run ``fn(rep)`` ``repeats`` times; keep every run and the median/max of ``key``."""
    runs = [fn(rep) for rep in range(repeats)]
    values = [r[key] for r in runs]
    return {f"{key}_median": float(np.median(values)), f"{key}_max": max(values), "runs": runs}


def main() -> None:
    """Parse arguments, run the benchmarks and write the JSON results to ``--out``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench/results/store.json")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--steps", type=int, default=200, help="steps per episode")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=400)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--n-obs-steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="runs per benchmark (median and max reported)")
    p.add_argument("--cpu", type=int, default=0, help="core to pin the process to (-1: no pinning)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="where to create the temp stores (default: system tmp)")
    args = p.parse_args()
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    rng = np.random.default_rng(args.seed)
    episodes = [make_episode(rng, args.steps) for _ in range(args.episodes)]
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        results = {
            "write_bulk": _repeat(
                lambda r: bench_write_bulk(root / f"bulk{r}", episodes), args.repeats, "steps_per_s"
            ),
            "write_bulk_sync_every_commit": _repeat(
                lambda r: bench_write_bulk(root / f"full{r}", episodes, True), args.repeats, "steps_per_s"
            ),
            "write_steps": _repeat(
                lambda r: bench_write_steps(root / f"steps{r}", episodes), args.repeats, "steps_per_s"
            ),
            "sampling": _repeat(
                lambda r: bench_sampling(root / "bulk0", args), args.repeats, "windows_per_s"
            ),
        }
    results["config"] = {**vars(args), "obs_floats": sum(int(np.prod(s)) for s in OBS.values())}
    results["machine"] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "h5py": h5py.__version__,
        "loadavg_at_end": os.getloadavg(),
    }
    atomic_write_text(args.out, json.dumps(results, indent=2) + "\n")
    summary = {
        name: {k: v for k, v in r.items() if k != "runs"} for name, r in results.items() if "runs" in r
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
