"""Where a monitored episode's time goes, sequential vs batched, and what bounds the batched speedup
(issue 14, item 5).

The settings ``sequential`` (one env, unpadded inference) and ``batched`` (``--batch`` envs in
lockstep, inference in blocks of ``--rows`` rows) of ``bench/rollout_batched.py`` run the same
monitored PickPlace episodes, interleaved round by round. Each run times two parts in place: the
policy's ``predict_chunk`` (``inference``) and every env's ``step`` (``env_step``: physics, the
observation, the wrappers). The rest of the wall time (``other``) is the per-step work of this
process: the monitor's score, checkpoint tracking, snapshots and restores, the runner's bookkeeping.

From the parts, two upper bounds on ``batched``'s speedup over ``sequential``:

* ``bound_free_inference``: if the batched inference cost nothing;
* ``bound_free_inference_and_env_step``: if the env steps cost nothing in this process as well
  (environment workers that overlap physics perfectly with everything else).

    MUJOCO_GL=osmesa .venv/bin/python bench/rollout_profile.py --out bench/results/rollout_profile.json
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "osmesa")

import torch  # noqa: E402
from _commands import write_result  # noqa: E402  (bench/ is on sys.path)
from rollout_batched import monitor_parts, run_setting, train_policy  # noqa: E402

import rewind  # noqa: F401, E402  (before mujoco: see rewind/__init__.py)
from rewind.envs.registry import make_env  # noqa: E402
from rewind.train.policy_api import load_policy  # noqa: E402

log = logging.getLogger("bench")

PARTS = ("inference", "env_step")


class Stopwatch:
    """Seconds spent in wrapped callables and how often they ran, by part name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its time added to ``part``."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                self.calls[part] += 1

        return timed


@contextmanager
def timed_parts(watch: Stopwatch, policy: Any, envs: Sequence[Any]) -> Iterator[None]:
    """Inside the block, ``policy.predict_chunk`` and each env's ``step`` are timed by ``watch``; the
    objects are as before afterwards (an attribute set on the instance itself is put back)."""
    targets = [(policy, "predict_chunk", "inference"), *((env, "step", "env_step") for env in envs)]
    saved = [vars(obj).get(name) for obj, name, _ in targets]
    for obj, name, part in targets:
        setattr(obj, name, watch.wrap(part, getattr(obj, name)))
    try:
        yield
    finally:
        for (obj, name, _), own in zip(targets, saved, strict=True):
            if own is None:
                delattr(obj, name)
            else:
                setattr(obj, name, own)


def breakdown(wall: float, seconds: dict[str, float], episodes: int) -> dict[str, float]:
    """Seconds per episode: the wall time, each timed part and the rest (``other``)."""
    parts = {p: seconds.get(p, 0.0) for p in PARTS}
    other = wall - sum(parts.values())
    if other < 0:
        raise ValueError(f"timed parts ({sum(parts.values()):.3f} s) exceed the wall time ({wall:.3f} s)")
    per = {"wall": wall, **parts, "other": other}
    return {k: round(v / episodes, 4) for k, v in per.items()}


def bounds(sequential: dict[str, float], batched: dict[str, float]) -> dict[str, float]:
    """The measured speedup of ``batched`` over ``sequential`` (per-episode breakdowns) and its upper
    bounds with batched inference free, and with batched inference and env steps free."""
    free_inference = batched["wall"] - batched["inference"]
    return {
        "speedup": round(sequential["wall"] / batched["wall"], 3),
        "bound_free_inference": round(sequential["wall"] / free_inference, 3),
        "bound_free_inference_and_env_step": round(sequential["wall"] / batched["other"], 3),
    }


def profile_round(
    args: argparse.Namespace, envs: list[Any], loaded: Any, monitor: Any, tracker: Any, r: int
) -> dict[str, Any]:
    """One round: both settings on the same seeds, each with its parts timed."""
    seeds = list(range(1000 * (r + 1), 1000 * (r + 1) + args.episodes))
    row: dict[str, Any] = {"seeds": [seeds[0], seeds[-1]], "load_avg_1min": os.getloadavg()[0]}
    for name, (batch, rows) in {"sequential": (1, 0), "batched": (args.batch, args.rows)}.items():
        watch = Stopwatch()
        with timed_parts(watch, loaded.policy, envs[:batch]):
            out = run_setting(envs[:batch], loaded, monitor, tracker, seeds, rows, args.task)
        row[name] = breakdown(out["wall_s"], watch.seconds, len(seeds))
        row[name]["inference_calls"] = watch.calls["inference"]
        row[name]["env_steps"] = out["env_steps"]
        log.info("round %d %s: %s", r, name, row[name])
    row.update(bounds(row["sequential"], row["batched"]))
    return row


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds of every per-episode part and of the speedup and its bounds."""
    out: dict[str, Any] = {
        name: {k: statistics.median(x[name][k] for x in rounds) for k in ("wall", *PARTS, "other")}
        for name in ("sequential", "batched")
    }
    for key in ("speedup", "bound_free_inference", "bound_free_inference_and_env_step"):
        out[f"{key}_median"] = statistics.median(x[key] for x in rounds)
    return out


def main() -> None:
    """Parse the arguments, prepare a policy and the monitor, profile, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--demos", type=int, default=5)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=20, help="episodes per setting and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--quantile", type=float, default=0.9)
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_profile.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run, store = train_policy(args.task, Path(tmp), args.demos, args.train_steps)
        env = make_env(args.task)
        loaded = load_policy(str(run), env, args.task, torch.device("cpu"))
        env.close()
        monitor, tracker = monitor_parts(args, loaded, store)
        envs = [make_env(args.task) for _ in range(args.batch)]
        try:
            rounds = [profile_round(args, envs, loaded, monitor, tracker, r) for r in range(args.rounds)]
        finally:
            for env in envs:
                env.close()
    result = {
        "rounds": rounds,
        "summary": summarize(rounds),
        "meta": {
            "task": args.task,
            "policy": f"diffusion U-Net {list(loaded.policy.config.down_dims)}, "
            f"{loaded.policy.config.inference_steps} steps, fresh, {args.train_steps} training steps",
            "episodes_per_round": args.episodes,
            "batch": args.batch,
            "inference_rows": args.rows,
            "torch_threads": 1,
            "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "units": "seconds per episode",
        },
    }
    log.info("summary: %s", result["summary"])
    write_result(args.out, result)


if __name__ == "__main__":
    main()
