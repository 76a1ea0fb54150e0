"""Benchmark the ACT policy on CPU: training samples/s and inference milliseconds per chunk.

Usage::

    .venv/bin/python bench/bench_act.py --threads 2 --out bench/results/act_cpu.json

Observations follow the Lift task's low-dim layout (16 dims over 6 keys, ``Da = 5``); inputs are
random (speed does not depend on values). Training: forward + backward + AdamW step on batches of
``--batch`` windows (``To = 1``, ``H = 16``). Inference: ``predict_chunk`` (eval mode, no grad,
``num_samples = 1``) at batch 1 and 16. Median over ``--iters`` timed calls after ``--warmup``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rewind.policies.act import ACTConfig, ACTPolicy
from rewind.policies.base import count_parameters
from rewind.utils.seeding import torch_generator

log = logging.getLogger("bench_act")
LIFT_OBS = {"cube_pos": 3, "cube_quat": 4, "cube_to_eef": 3, "eef_pos": 3, "eef_yaw": 2, "gripper": 1}
ACTION_DIM = 5


def timed(fn: Callable[[], object], warmup: int, iters: int) -> float:
    """Median wall time of ``fn()`` in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_obs(batch: int, n_obs_steps: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Random low-dim observation window ``dict[key -> [batch, To, d]]``."""
    return {k: torch.randn(batch, n_obs_steps, d, generator=gen) for k, d in LIFT_OBS.items()}


def main() -> None:
    """Parse arguments, run the benchmark, log and optionally write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    config = ACTConfig()
    shape_meta = {
        "obs": {k: {"shape": [d], "dtype": "float32"} for k, d in LIFT_OBS.items()},
        "action_dim": ACTION_DIM,
    }
    gen = torch_generator(0)
    policy = ACTPolicy(config, shape_meta)
    stats = {f"obs/{k}": torch.randn(1000, d, generator=gen).numpy() for k, d in LIFT_OBS.items()}
    policy.fit_normalizer({**stats, "action": torch.randn(1000, ACTION_DIM, generator=gen).numpy()})
    batch = {
        "obs": random_obs(args.batch, config.n_obs_steps, gen),
        "action": torch.randn(args.batch, config.horizon, ACTION_DIM, generator=gen),
    }
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)

    def train_step() -> None:
        loss = policy.compute_loss(batch, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    policy.train()
    step_s = timed(train_step, args.warmup, args.iters)
    policy.eval()
    infer_ms = {}
    for b in (1, 16):
        obs = random_obs(b, config.n_obs_steps, gen)
        infer_ms[b] = 1000 * timed(lambda obs=obs: policy.predict_chunk(obs), 3, 5 * args.iters)
    result = {
        "params": count_parameters(policy),
        "threads": args.threads,
        "train_batch": args.batch,
        "train_samples_per_s": args.batch / step_s,
        "infer_ms_per_chunk_b1": infer_ms[1],
        "infer_ms_per_chunk_b16": infer_ms[16],
        "torch": torch.__version__,
    }
    log.info(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
