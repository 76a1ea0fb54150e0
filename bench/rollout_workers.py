"""Env-steps/s of physics-bound lockstep rollouts: envs in this process vs in 1 and 2 worker processes.

The lockstep batch runner (:func:`rewind.lockstep.run_batch`) drives ``--num-envs`` envs with a policy
that costs next to nothing (seeded Gaussian actions), so the time is MuJoCo's. Each round runs the
same episodes under every setting, the settings interleaved so that a change in the machine's load
hits them alike; the pools are started once (start-up is reported apart). Each worker count runs in
two modes: ``per_step`` (one message per tick, as before chunk stepping) and ``chunked`` (the rest
of each chunk of ``--chunk`` actions in one message, ``run_batch``'s default). The records and the
envs' final physics states of every setting must be identical (checked). CPU seconds count this
process and the workers.

    .venv/bin/python bench/rollout_workers.py --out bench/results/rollout_workers.json    (~1 min)
"""

from __future__ import annotations

import argparse
import hashlib
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
from _commands import write_result  # noqa: E402  (bench/ is on sys.path)

from rewind.envs.config import EnvConfig  # noqa: E402
from rewind.lockstep import run_batch  # noqa: E402
from rewind.rollout.workers import EnvFactory, EnvWorkers  # noqa: E402

log = logging.getLogger("bench")


class JitterPolicy:
    """A policy that costs nothing: ``scale * N(0, 1)`` actions from the caller's generator, drawn
    ``n_action_steps`` at a time (a chunk, queued as the real policies queue theirs)."""

    used_obs_keys = ("eef_pos",)

    def __init__(self, n_action_steps: int = 8, scale: float = 0.3) -> None:
        self.n_action_steps, self.scale = n_action_steps, scale
        self._queue: list[torch.Tensor] = []

    def reset(self) -> None:
        """Forget the queue."""
        self._queue = []

    def select_action(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> torch.Tensor:
        """One action per env of the batch (a new chunk when the queue is empty)."""
        if not self._queue:
            n = batch["eef_pos"].shape[0]
            chunk = (self.scale * torch.randn(n, self.n_action_steps, 5, generator=generator)).clamp(-1, 1)
            self._queue = list(chunk.unbind(1))
        return self._queue.pop(0)

    def queued_actions(self) -> list[torch.Tensor]:
        """The rest of the chunk (what :func:`rewind.lockstep.run_batch` steps in one call)."""
        return list(self._queue)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far (Linux ``/proc``)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_round(envs: Any, episodes: int, pids: list[int], chunk: int, chunked: bool) -> dict[str, Any]:
    """All episodes in lockstep batches of ``len(envs)``; env-steps/s, CPU seconds, and the records
    with the envs' final physics states after each batch (what must not depend on the setting)."""
    policy, records, digest = JitterPolicy(chunk), [], hashlib.sha256()
    cpu0, workers0, start = time.process_time(), _cpu_s(pids), time.perf_counter()
    for first in range(0, episodes, len(envs)):
        seeds = list(range(first, min(first + len(envs), episodes)))
        gen = torch.Generator().manual_seed(first)
        records += run_batch(envs, policy, seeds, gen, torch.device("cpu"), chunked=chunked)
        for env in envs[: len(seeds)]:
            digest.update(env.unwrapped.physics_state().tobytes())
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0 + _cpu_s(pids) - workers0
    steps = sum(r.length for r in records)
    outcome = ([asdict(r) for r in records], digest.hexdigest())
    return {"wall_s": wall, "cpu_s": cpu, "env_steps": steps, "outcome": outcome}


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_workers.json"))
    parser.add_argument("--env", default="stack3")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--chunk", type=int, default=8, help="actions per policy call (the configs' 8)")
    parser.add_argument(
        "--modes", nargs="+", default=["per_step", "chunked"], choices=["per_step", "chunked"]
    )
    return parser.parse_args()


def _measure(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Every (workers, mode) setting ``args.rounds`` times, interleaved; outcomes checked identical."""
    factory = EnvFactory(EnvConfig(name=args.env, max_steps=args.max_steps))
    pools, starts = {}, {}
    for w in args.workers:
        start = time.perf_counter()
        pools[w] = EnvWorkers(factory, args.num_envs, w) if w else [factory() for _ in range(args.num_envs)]
        starts[w] = time.perf_counter() - start
    rounds: dict[tuple[int, str], list[dict[str, Any]]] = {
        (w, m): [] for w in args.workers for m in args.modes
    }
    reference = None
    for r in range(args.rounds):
        for (w, mode), outs in rounds.items():
            pids = pools[w].pids if w else []
            out = run_round(pools[w], args.episodes, pids, args.chunk, mode == "chunked")
            reference = reference or out["outcome"]
            if out.pop("outcome") != reference:
                raise SystemExit(
                    f"workers={w} {mode}: records or physics states differ from the first setting's"
                )
            outs.append(out)
            log.info(
                "round %d, workers=%d %s: %.0f env-steps/s", r, w, mode, out["env_steps"] / out["wall_s"]
            )
    for w, pool in pools.items():
        if w:
            pool.close()
    rows = []
    for (w, mode), outs in rounds.items():
        rates = [o["env_steps"] / o["wall_s"] for o in outs]
        cpu = 1000 * sum(o["cpu_s"] for o in outs) / sum(o["env_steps"] for o in outs)
        rows.append(
            {
                "workers": w,
                "mode": mode,
                "env_steps_per_s": [round(x, 1) for x in rates],
                "median_env_steps_per_s": round(statistics.median(rates), 1),
                "cpu_s_per_1000_env_steps": round(cpu, 3),
            }
        )
    return rows, starts


def _ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    by = {(row["workers"], row["mode"]): row["median_env_steps_per_s"] for row in rows}
    out = {}
    for mode in ("per_step", "chunked"):
        for a, b in ((2, 1), (2, 0), (1, 0)):
            if (a, mode) in by and (b, mode) in by:
                name = "in_process" if b == 0 else f"workers{b}"
                out[f"{mode}: workers{a}_vs_{name}"] = round(by[a, mode] / by[b, mode], 2)
    for w in (0, 1, 2):
        if (w, "chunked") in by and (w, "per_step") in by:
            out[f"workers{w}: chunked_vs_per_step"] = round(by[w, "chunked"] / by[w, "per_step"], 2)
    return out


def main() -> None:
    """Parse the arguments, measure, write the JSON."""
    args = _parse()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    rows, starts = _measure(args)
    ratios = _ratios(rows)
    result = {
        "what": "lockstep rollouts with a free policy (physics-bound): env-steps/s by rollout.workers, "
        "stepping one action per message (per_step) or the rest of each chunk per message (chunked)",
        "env": args.env,
        "num_envs": args.num_envs,
        "episodes_per_round": args.episodes,
        "max_steps": args.max_steps,
        "rounds": args.rounds,
        "actions_per_chunk": args.chunk,
        "records_identical": True,
        "runs": rows,
        "pool_start_s": {str(w): round(t, 2) for w, t in starts.items()},
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
    log.info("%s", json.dumps(ratios))
    write_result(args.out, result)


if __name__ == "__main__":
    main()
