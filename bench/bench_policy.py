"""CPU benchmark of the action-chunk policies: training throughput and per-chunk inference latency.

Training: samples/s of ``compute_loss + backward + AdamW step`` at ``--batch`` (256) on random
windows in the Lift layout (16 low-dim floats in 6 keys, action_dim 5), default configs.
Inference: ms per ``predict_chunk`` call at batch 1 and 16 for DDPM-100, DDIM-10, flow-10 (and ACT
when ``rewind.policies.act`` is registered). Prints the JSON it writes to ``--out``.

``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (set before torch is imported): on a shared, busy
machine OpenMP threads that spin-wait at barriers made 2-thread runs ~10x slower than 1 thread.

    .venv/bin/python bench/bench_policy.py --out bench/results/policy.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP runtime

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rewind.policies.base import count_parameters  # noqa: E402
from rewind.policies.registry import get_policy_classes, make_policy  # noqa: E402
from rewind.utils.io import atomic_write_text
from rewind.utils.seeding import torch_generator  # noqa: E402

#: Lift's observation layout (``rewind.envs`` task ``lift``), without importing MuJoCo.
LIFT_SHAPE_META = {
    "obs": {
        k: {"shape": [d], "dtype": "float32"}
        for k, d in {
            "cube_pos": 3,
            "cube_quat": 4,
            "cube_to_eef": 3,
            "eef_pos": 3,
            "eef_yaw": 2,
            "gripper": 1,
        }.items()
    },
    "action_dim": 5,
}

#: label -> (registry name, config overrides) for the latency table.
INFERENCE_VARIANTS = {
    "ddpm-100": ("diffusion", {"scheduler": "ddpm"}),
    "ddim-10": ("diffusion", {"scheduler": "ddim"}),
    "flow-10": ("flow", {"num_inference_steps": 10}),
    "act": ("act", {}),
}


def _available(name: str) -> bool:
    try:
        get_policy_classes(name)
    except KeyError:
        return False
    return True


DEVICE = torch.device("cpu")
#: Extra config overrides for the U-Net policies (``--down-dims``).
UNET_OVERRIDES: dict[str, Any] = {}


def _build(name: str, overrides: dict[str, Any], seed: int = 0) -> Any:
    """Policy on ``DEVICE`` with seeded init (global RNG restored), normalizer fitted on random data."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        extra = UNET_OVERRIDES if name in ("diffusion", "flow") else {}
        policy = make_policy(name, {**extra, **overrides}, LIFT_SHAPE_META)
    rng = np.random.default_rng(seed)
    data = {f"obs/{k}": rng.normal(size=(1000, e["shape"][0])) for k, e in LIFT_SHAPE_META["obs"].items()}
    policy.fit_normalizer({**data, "action": rng.normal(size=(1000, 5))})
    return policy.to(DEVICE)


def _batch(policy: Any, n: int, seed: int = 0) -> dict[str, Any]:
    g = torch_generator(seed)
    obs = {
        k: torch.randn(n, policy.n_obs_steps, *e["shape"], generator=g)
        for k, e in LIFT_SHAPE_META["obs"].items()
    }
    batch = {
        "obs": obs,
        "action": torch.randn(n, policy.horizon, 5, generator=g),
        "action_mask": torch.ones(n, policy.horizon, dtype=torch.bool),
        "sample_weight": torch.ones(n),
    }
    return {
        k: ({kk: vv.to(DEVICE) for kk, vv in v.items()} if isinstance(v, dict) else v.to(DEVICE))
        for k, v in batch.items()
    }


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _timeit(fn: Callable[[], Any], reps: int, budget_s: float) -> tuple[float, int]:
    """Mean seconds per call after one warm-up call; stops early past ``budget_s`` (>= 1 rep).
    On CUDA the device is synchronized around each call."""
    fn()
    _sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps and (not times or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return float(np.mean(times)), len(times)


def bench_training(name: str, batch_size: int, steps: int, budget_s: float) -> dict[str, Any]:
    """Samples/s of full optimizer steps at ``batch_size``."""
    policy = _build(name, {}).train()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    batch = _batch(policy, batch_size)

    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=DEVICE.type == "cuda")

    def step() -> None:
        with autocast:
            loss = policy.compute_loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    sec, n = _timeit(step, steps, budget_s)
    return {
        "params": count_parameters(policy),
        "samples_per_s": batch_size / sec,
        "step_ms": 1e3 * sec,
        "steps": n,
    }


def bench_inference(label: str, batch_sizes: list[int], reps: int, budget_s: float) -> dict[str, Any]:
    """Milliseconds per ``predict_chunk`` call for each batch size."""
    name, overrides = INFERENCE_VARIANTS[label]
    policy = _build(name, overrides).eval()
    out: dict[str, Any] = {"params": count_parameters(policy)}
    for b in batch_sizes:
        obs = _batch(policy, b)["obs"]
        sec, n = _timeit(
            lambda obs=obs: policy.predict_chunk(obs, 1, torch_generator(0, DEVICE)), reps, budget_s
        )
        out[f"batch{b}_ms"] = 1e3 * sec
        out[f"batch{b}_reps"] = n
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, write ``--out``, print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/policy.json")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads for training")
    ap.add_argument("--infer-threads", type=int, default=1, help="torch intra-op threads for inference")
    ap.add_argument("--batch", type=int, default=256, help="training batch size")
    ap.add_argument("--train-steps", type=int, default=5, help="timed optimizer steps per policy")
    ap.add_argument("--reps", type=int, default=5, help="timed predict_chunk calls per setting")
    ap.add_argument("--budget-s", type=float, default=5.0, help="time cap per measurement (>= 1 rep)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (training in bf16 autocast on cuda)")
    ap.add_argument("--down-dims", type=int, nargs="*", help="U-Net widths (reference: 256 512 1024)")
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = torch.device(args.device)
    if args.down_dims:
        UNET_OVERRIDES["down_dims"] = list(args.down_dims)
    torch.set_num_threads(args.threads)
    policies = [p for p in ("diffusion", "flow", "act") if _available(p)]
    result: dict[str, Any] = {
        "command": " ".join(["bench/bench_policy.py", *(sys.argv[1:] if argv is None else argv)]),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu",
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "machine": platform.processor() or platform.machine(),
        "layout": "lift (16 low-dim floats, action_dim 5)",
        "unet_overrides": dict(UNET_OVERRIDES),
        "training": {p: bench_training(p, args.batch, args.train_steps, args.budget_s) for p in policies},
    }
    torch.set_num_threads(args.infer_threads)
    result["infer_threads"] = torch.get_num_threads()
    result["inference"] = {
        label: bench_inference(label, [1, 16], args.reps, args.budget_s)
        for label, (name, _) in INFERENCE_VARIANTS.items()
        if name in policies
    }
    out = Path(args.out)
    atomic_write_text(out, json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
