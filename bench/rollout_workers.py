"""Env-steps/s of physics-bound lockstep rollouts: envs in this process vs in 1 and 2 worker processes.

The lockstep batch runner (:func:`rewind.lockstep.run_batch`) drives ``--num-envs`` envs with a policy
that costs next to nothing (seeded Gaussian actions), so the time is MuJoCo's. Each round runs the
same episodes under every setting, the settings interleaved so that a change in the machine's load
hits them alike; the pools are started once (start-up is reported apart). The records of every
setting must be identical (checked). CPU seconds count this process and the workers.

    .venv/bin/python bench/rollout_workers.py --out bench/results/rollout_workers.json    (~1 min)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "osmesa")

import torch  # noqa: E402

from rewind.envs.config import EnvConfig  # noqa: E402
from rewind.lockstep import run_batch  # noqa: E402
from rewind.rollout.workers import EnvFactory, EnvWorkers  # noqa: E402

log = logging.getLogger("bench")


class JitterPolicy:
    """A policy that costs nothing: ``scale * N(0, 1)`` actions from the caller's generator."""

    used_obs_keys = ("eef_pos",)
    n_action_steps = 1

    def __init__(self, scale: float = 0.3) -> None:
        self.scale = scale

    def reset(self) -> None:
        """No state."""

    def select_action(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> torch.Tensor:
        """One action per env of the batch."""
        n = batch["eef_pos"].shape[0]
        return (self.scale * torch.randn(n, 5, generator=generator)).clamp(-1, 1)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far (Linux ``/proc``)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_round(envs: Any, episodes: int, pids: list[int]) -> dict[str, Any]:
    """All episodes in lockstep batches of ``len(envs)``; env-steps/s, CPU seconds, the records."""
    policy, records = JitterPolicy(), []
    cpu0, workers0, start = time.process_time(), _cpu_s(pids), time.perf_counter()
    for first in range(0, episodes, len(envs)):
        seeds = list(range(first, min(first + len(envs), episodes)))
        gen = torch.Generator().manual_seed(first)
        records += run_batch(envs, policy, seeds, gen, torch.device("cpu"))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0 + _cpu_s(pids) - workers0
    steps = sum(r.length for r in records)
    return {"wall_s": wall, "cpu_s": cpu, "env_steps": steps, "records": [asdict(r) for r in records]}


def main() -> None:
    """Parse the arguments, measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_workers.json"))
    parser.add_argument("--env", default="stack3")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    factory = EnvFactory(EnvConfig(name=args.env, max_steps=args.max_steps))
    load_before = os.getloadavg()
    settings: dict[int, Any] = {}
    for w in args.workers:
        start = time.perf_counter()
        envs = EnvWorkers(factory, args.num_envs, w) if w else [factory() for _ in range(args.num_envs)]
        settings[w] = {"envs": envs, "start_s": time.perf_counter() - start, "rounds": []}
    reference = None
    for r in range(args.rounds):
        for w, s in settings.items():
            pids = s["envs"].pids if w else []
            out = run_round(s["envs"], args.episodes, pids)
            reference = reference or out["records"]
            if out.pop("records") != reference:
                raise SystemExit(f"workers={w}: records differ from the first setting's")
            s["rounds"].append(out)
            log.info("round %d, workers=%d: %.0f env-steps/s", r, w, out["env_steps"] / out["wall_s"])
    rows = []
    for w, s in settings.items():
        if w:
            s["envs"].close()
        rates = [o["env_steps"] / o["wall_s"] for o in s["rounds"]]
        rows.append(
            {
                "workers": w,
                "start_s": round(s["start_s"], 2),
                "env_steps_per_s": [round(x, 1) for x in rates],
                "median_env_steps_per_s": round(statistics.median(rates), 1),
                "cpu_s_per_1000_env_steps": round(
                    1000 * sum(o["cpu_s"] for o in s["rounds"]) / sum(o["env_steps"] for o in s["rounds"]), 3
                ),
            }
        )
    by = {row["workers"]: row["median_env_steps_per_s"] for row in rows}
    ratios = {
        f"workers{a}_vs_{'in_process' if b == 0 else f'workers{b}'}": round(by[a] / by[b], 2)
        for a, b in ((2, 1), (2, 0), (1, 0))
        if a in by and b in by
    }
    result = {
        "what": "lockstep rollouts with a free policy (physics-bound): env-steps/s by rollout.workers",
        "env": args.env,
        "num_envs": args.num_envs,
        "episodes_per_round": args.episodes,
        "max_steps": args.max_steps,
        "rounds": args.rounds,
        "records_identical": True,
        "runs": rows,
        "ratios_of_medians": ratios,
        "cpu_count": os.cpu_count(),
        "loaded": load_before[0] > (os.cpu_count() or 1) - 0.5,
        "note": "with other work on the cores (load average near or above the core count), workers share "
        "them with it and every lockstep tick waits for each worker to be scheduled: the ratios are then "
        "not the unloaded speed-up",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.processor() or platform.machine(),
        "command": " ".join(["python bench/rollout_workers.py", *sys.argv[1:]]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("%s", json.dumps(ratios))
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
