"""Training steps/s of one process vs ``torchrun`` processes (DDP; gloo on this CPU), tiny policy.

The same global batch either way (``train.batch_size``; each of the two ranks trains on half), one
torch thread per process. Steps/s come from ``metrics.jsonl``'s wall times between the first and the
last log line, so start-up (imports, process group, store loading) is not counted.

    .venv/bin/python bench/ddp_cpu.py --out bench/results/ddp_cpu.json      (about a minute)

``bench/gpu.sh`` runs it with ``--device cuda --processes 1 N`` (N: the visible GPUs; NCCL).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rewind.collect import CollectConfig, run_collect
from rewind.envs.config import EnvConfig
from rewind.metrics import read_metrics
from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench")

TINY = [
    "policy.horizon=8",
    "policy.n_action_steps=4",
    "policy.down_dims=[16,32]",
    "policy.obs_feature_dim=16",
    "policy.diffusion_step_embed_dim=16",
    "policy.num_train_timesteps=10",
    "policy.num_inference_steps=3",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(processes: int, store: Path, out: Path, batch: int, steps: int, device: str) -> list[str]:
    """``rewind-train`` (one process) or ``torchrun --nproc_per_node=N -m rewind.scripts.train``."""
    if processes == 1:
        head = [sys.executable, "-m", "rewind.scripts.train"]  # what the rewind-train script runs
    else:
        head = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}"]
        head += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}", "-m", "rewind.scripts.train"]
    args = [f"out_dir={out}", "env=lift", "policy=diffusion", f"data.path={store}", *TINY]
    args += [f"train.steps={steps}", f"train.batch_size={batch}", "train.warmup_steps=10"]
    args += [f"train.save_every={steps}", "train.val_every=0", "train.log_every=10"]
    return [*head, *args, f"device={device}", "num_threads=1", "wandb.mode=disabled", "progress=false"]


def steps_per_s(run: Path) -> float:
    """Steps per second between the first and the last training log line of ``run``."""
    logs = [r for r in read_metrics(run, "log") if "train/loss" in r]
    first, last = logs[0], logs[-1]
    return (last["step"] - first["step"]) / (last["wall_time"] - first["wall_time"])


def main() -> None:
    """Parse the arguments, measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/ddp_cpu.json"))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = root / "store"
        collect = CollectConfig(out_dir=str(root), env=EnvConfig(name="lift"), episodes=4, out=str(store))
        run_collect(collect)
        for batch in args.batches:
            for processes in args.processes:
                out = root / f"b{batch}_p{processes}"
                cmd = command(processes, store, out, batch, args.steps, args.device)
                start = time.perf_counter()
                subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                rate = steps_per_s(out)
                rows.append(
                    {
                        "global_batch": batch,
                        "processes": processes,
                        "steps_per_s": round(rate, 2),
                        "samples_per_s": round(rate * batch, 1),
                        "wall_s": round(time.perf_counter() - start, 1),
                    }
                )
                log.info("batch %d, %d process(es): %.1f steps/s", batch, processes, rate)
    for row in rows:
        one = [r for r in rows if r["global_batch"] == row["global_batch"] and r["processes"] == 1]
        if one and row["processes"] > 1:
            row["speedup_vs_1"] = round(row["steps_per_s"] / one[0]["steps_per_s"], 2)
    result = {
        "what": "rewind-train steps/s, 1 process vs torchrun N processes (DDP), same global batch",
        "device": args.device,
        "policy": "diffusion, tiny (down_dims [16,32], horizon 8), Lift, 4 demos",
        "steps": args.steps,
        "threads_per_process": 1,
        "cpu_count": os.cpu_count(),
        "load_average_before": os.getloadavg(),
        "machine": platform.processor() or platform.machine(),
        "command": " ".join(["python bench/ddp_cpu.py", *sys.argv[1:]]),
        "runs": rows,
    }
    atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
