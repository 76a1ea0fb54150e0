"""Monitor cost per control step: TIDE + checkpoint tracking vs STAC with 32 samples.

    MUJOCO_GL=osmesa .venv/bin/python bench/bench_monitor.py \
        --run runs/base_policies/pick_place_d100_s2500 --task pick_place

* ``tide_ms``: TIDE's update per control step (it reads the chunk the policy already computed).
* ``tracking_ms``: per control step, the encoder features of the window (numpy fast path), cosine
  similarity to the next checkpoint template, peak detection and the snapshot at a new peak.
* ``tide_plus_tracking_ms``: both, measured together inside real monitored rollouts (the monitored
  episode's own timer around its per-step monitor work).
* ``stac32_ms``: STAC's cost per control step: the extra inference of 31 more chunk samples at each
  inference step (amortised over ``n_action_steps``) plus its MMD update.
* ``tide_samples_S_*`` (``--tide-samples S``, ``monitor.tide_samples``): TIDE over the mean of S
  chunks against one, end to end in the same monitored rollouts with tracking (wall time per control
  step, inference and physics included), and the extra inference per control step from the
  batched-sample timing above.

One thread (``torch.set_num_threads(1)``), as monitored episodes use; writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rewind  # noqa: F401, E402  (before mujoco: see rewind/__init__.py)
from rewind.envs.registry import make_env  # noqa: E402
from rewind.monitor import (  # noqa: E402
    CheckpointTracker,
    Monitor,
    MonitoredEpisode,
    RewindConfig,
    build_library,
)
from rewind.monitor.checkpoints import make_labeler  # noqa: E402
from rewind.monitor.scores import StacScore, TideScore  # noqa: E402
from rewind.store import ReplayStore  # noqa: E402
from rewind.train.policy_api import load_policy  # noqa: E402
from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench_monitor")


def _per_step_ms(ep: MonitoredEpisode, seeds: range) -> tuple[float, int, float]:
    """Run ``ep`` on ``seeds``: monitor ms per monitor call, the calls, and wall ms per control step."""
    total, calls, steps, t0 = 0.0, 0, 0, time.perf_counter()
    for s in seeds:
        ep.run(s)
        total += ep.log.monitor_time_s
        calls += ep.log.monitor_calls
        steps += len(ep.log.scores)
    return 1e3 * total / max(calls, 1), calls, 1e3 * (time.perf_counter() - t0) / max(steps, 1)


def _inference_ms(policy, obs: dict, samples: int, reps: int) -> float:
    window = {
        k: torch.as_tensor(np.stack([obs[k]] * policy.n_obs_steps))[None].float()
        for k in policy.used_obs_keys
    }
    gen = torch.Generator().manual_seed(0)
    policy.predict_chunk(window, samples, gen)
    t0 = time.perf_counter()
    for _ in range(reps):
        policy.predict_chunk(window, samples, gen)
    return 1e3 * (time.perf_counter() - t0) / reps


def _tide_samples(
    env: Any, policy: Any, lib: Any, seeds: range, samples: int, one_ms: float
) -> dict[str, float]:
    """Monitored rollouts with TIDE over 1 and over ``samples`` chunks, tracking on: wall time per
    control step each, their ratio, and the extra inference per control step."""
    out: dict[str, float] = {}
    for s in (1, samples):
        monitor = Monitor(TideScore([0, 1, 2, 3], samples=s), None)
        ep = MonitoredEpisode(
            env,
            policy,
            monitor,
            CheckpointTracker(lib),
            RewindConfig(max_rewinds=0),
            generator=torch.Generator().manual_seed(0),
        )
        out[f"tide_samples_{s}_wall_ms_per_step"] = _per_step_ms(ep, seeds)[2]
    out[f"inference_ms_{samples}_samples"] = _inference_ms(policy, env.reset(seed=0)[0], samples, 20)
    extra = (out[f"inference_ms_{samples}_samples"] - one_ms) / policy.n_action_steps
    out[f"tide_samples_{samples}_extra_inference_ms_per_step"] = extra
    ratio = out[f"tide_samples_{samples}_wall_ms_per_step"] / out["tide_samples_1_wall_ms_per_step"]
    out[f"tide_samples_{samples}_wall_ratio"] = ratio
    log.info("tide_samples=%d: %.2fx the wall time per control step of one chunk", samples, ratio)
    return out


def main() -> None:
    """Measure and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--run", default="runs/base_policies/pick_place_d100_s2500", help="folder with store/ and train/"
    )
    ap.add_argument("--task", default="pick_place")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--tide-samples", type=int, default=4, help="S of monitor.tide_samples to compare")
    ap.add_argument("--out", default="bench/results/monitor.json")
    args = ap.parse_args()
    if args.tide_samples < 2:
        ap.error(f"--tide-samples must be >= 2 to compare with one chunk; got {args.tide_samples}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    torch.set_num_threads(1)
    run = Path(args.run)
    env = make_env(args.task)
    loaded = load_policy(str(run / "train"), env, args.task, torch.device("cpu"))
    with ReplayStore.open(run / "store") as store:
        demos = [store.load(i.id) for i in store.episodes(success=True)[:30]]
    lib = build_library(loaded.policy, demos, env.unwrapped, make_labeler("stage"), loaded.weights_hash)
    seeds = range(30000, 30000 + args.episodes)
    gen = torch.Generator().manual_seed(0)
    res = {"task": args.task, "policy": loaded.version, "episodes": args.episodes, "threads": 1}
    cases = {
        "tide_ms": (Monitor(TideScore([0, 1, 2, 3]), None), None),
        "tracking_ms": (None, CheckpointTracker(lib)),
        "tide_plus_tracking_ms": (Monitor(TideScore([0, 1, 2, 3]), None), CheckpointTracker(lib)),
        "stac32_update_ms": (Monitor(StacScore(32, [0, 1, 2, 3]), None), None),
    }
    for name, (monitor, tracker) in cases.items():
        ep = MonitoredEpisode(
            env, loaded.policy, monitor, tracker, RewindConfig(max_rewinds=0), generator=gen
        )
        res[name], res[f"{name}_steps"], _ = _per_step_ms(ep, seeds)
        log.info("%s: %.4f ms per control step", name, res[name])
    obs, _ = env.reset(seed=0)
    one, many = _inference_ms(loaded.policy, obs, 1, 40), _inference_ms(loaded.policy, obs, 32, 20)
    ta = loaded.policy.n_action_steps
    res.update(inference_ms_1_sample=one, inference_ms_32_samples=many, n_action_steps=ta)
    res["stac32_ms"] = (many - one) / ta + res["stac32_update_ms"]
    res["stac32_over_tide_plus_tracking"] = res["stac32_ms"] / res["tide_plus_tracking_ms"]
    res.update(_tide_samples(env, loaded.policy, lib, seeds, args.tide_samples, one))
    log.info(
        "STAC-32 %.3f ms/step = %.0fx TIDE + tracking",
        res["stac32_ms"],
        res["stac32_over_tide_plus_tracking"],
    )
    atomic_write_text(args.out, json.dumps(res, indent=2))
    env.close()
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
