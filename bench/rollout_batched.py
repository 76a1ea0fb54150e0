"""Monitored episodes per second: sequential vs batched (issue 14, item 1), side by side in one run.

The same monitored episodes (TIDE with a checkpoint tracker, ``restore`` rewinds) under three settings,
interleaved round by round so that a change in the machine's load hits them alike:

* ``sequential``: one env, unpadded inference (what the one-env-at-a-time runner cost);
* ``sequential_exact``: one env, inference padded to ``--rows`` rows (bit-identical to ``batched``);
* ``batched``: ``--batch`` envs in lockstep, inference in blocks of ``--rows`` rows;
* ``batched_workers`` (with ``--workers N``): the same, the envs stepped in ``N`` worker processes
  (``rollout.workers=N``), the monitor and the policy in this process.

The policy is a default-size diffusion policy (``configs/policy/diffusion.yaml``: U-Net [32, 64, 128],
10 DDIM steps, ``n_action_steps`` 8) trained for a few steps on scripted demos (its speed, not its
skill, matters; pass ``--policy-path`` for real weights), the threshold the ``--quantile`` of a pilot's
TIDE scores, so that some episodes rewind. ``batched`` and ``sequential_exact`` must give identical
records (checked; with ``--threads N > 1`` they agree at float precision only, so equality is
recorded per round, not required). One torch thread, as the monitored commands use (``--threads N``:
N threads for every setting). ``summary.inference_ms_min``: the fastest ``predict_chunk`` on 1 row and on
``--rows`` rows (what bounds the batched speedup).

    MUJOCO_GL=osmesa .venv/bin/python bench/rollout_batched.py --out bench/results/rollout_batched.json

``--collect operator|dagger|retry`` measures the loop's collection instead (``rewind.loop.batched_collect``:
the recovery source acts on alarms and stalls, with the settings of ``configs/recovery/<name>.yaml``;
``sequential`` is then the one-at-a-time ``collect_episodes``, the path before batching); outcomes of
``batched`` and ``sequential_exact`` checked equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _commands import write_result  # noqa: E402  (bench/ is on sys.path)

import rewind  # noqa: F401, E402  (before mujoco: see rewind/__init__.py)
from rewind.collect import CollectConfig, run_collect  # noqa: E402
from rewind.config import to_dataclass  # noqa: E402
from rewind.envs.config import EnvConfig  # noqa: E402
from rewind.envs.registry import make_env  # noqa: E402
from rewind.loop.batched_collect import collect_batched  # noqa: E402
from rewind.loop.config import RecoveryConfig  # noqa: E402
from rewind.loop.episodes import CollectRules, collect_episodes  # noqa: E402
from rewind.loop.sources import make_source  # noqa: E402
from rewind.monitor import (  # noqa: E402
    Calibration,
    CheckpointTracker,
    Monitor,
    MonitoredEpisode,
    RewindConfig,
    build_library,
)
from rewind.monitor.checkpoints import make_labeler  # noqa: E402
from rewind.monitor.factory import MonitorConfig, build_score, score_params  # noqa: E402
from rewind.monitor.rollouts import run_monitored  # noqa: E402
from rewind.policies.noise import NoiseStream, RowGenerators  # noqa: E402
from rewind.rollout.workers import EnvFactory, EnvWorkers  # noqa: E402
from rewind.store import ReplayStore  # noqa: E402
from rewind.train import TrainConfig, run_train  # noqa: E402
from rewind.train.policy_api import load_policy  # noqa: E402

log = logging.getLogger("bench")


def train_policy(
    task: str, work: Path, demos: int, steps: int, down_dims: list[int] | None = None
) -> tuple[Path, Path]:
    """Scripted demos and a diffusion policy (default size, or U-Net ``down_dims``) trained ``steps``
    steps on them."""
    store = work / "demos"
    run_collect(CollectConfig(out_dir=str(work), env=EnvConfig(name=task), episodes=demos, out=str(store)))
    node = {
        "out_dir": str(work / "train"),
        "env": {"name": task},
        "data": {"path": str(store), "val_fraction": 0.0},
        "policy": {"name": "diffusion", **({"down_dims": down_dims} if down_dims else {})},
        "train": {"steps": steps, "batch_size": 32, "warmup_steps": 1, "save_every": steps, "val_every": 0},
        "device": "cpu",
        "num_threads": 1,
        "wandb": {"mode": "disabled"},
        "progress": False,
    }
    run_train(to_dataclass(node, TrainConfig))
    return work / "train", store


def monitor_parts(args: argparse.Namespace, loaded: Any, store: Path) -> tuple[Monitor, CheckpointTracker]:
    """TIDE (default settings) thresholded at the ``--quantile`` of a pilot's scores; the tracker of a
    checkpoint library labelled on the demos."""
    env = make_env(args.task)
    with ReplayStore.open(store) as s:
        demos = [s.load(i.id) for i in s.episodes(success=True)]
    library = build_library(loaded.policy, demos, env.unwrapped, make_labeler("stage"), loaded.weights_hash)
    tracker = CheckpointTracker(library)
    mcfg = MonitorConfig(score="tide")
    score = build_score("tide", score_params("tide", mcfg, 0), None)
    pilot = Monitor(score, None)
    _, traces = run_monitored(env, loaded, pilot, tracker, RewindConfig(), [900, 901], 0, progress=False)
    env.close()
    values = [v for t in traces for v in t if v is not None]
    threshold = float(np.quantile(values, args.quantile))
    cal = Calibration("tide", mcfg.alpha, len(values), threshold, loaded.weights_hash)
    return Monitor(score, cal), tracker


#: ``--collect``: the recovery sources' settings of ``configs/recovery/<name>.yaml``
COLLECT = {
    "operator": {"name": "operator", "rewind_mode": "drive", "after": "end", "max_interventions": 1},
    "dagger": {"name": "dagger", "after": "handback", "max_interventions": 3},
    "retry": {"name": "retry", "rewind_mode": "restore", "max_interventions": 3, "keep": "success"},
}


def run_collection(
    envs: list[Any],
    loaded: Any,
    monitor: Monitor,
    tracker: Any,
    seeds: list[int],
    rows: int,
    task: str,
    name: str,
) -> tuple[list[Any], int, int]:
    """The loop's collection of ``seeds`` on ``task`` with recovery source ``name``: outcomes, recorded
    steps, rewinds."""
    node = {"max_correction_steps": 40, "stall_steps": 30, **COLLECT[name]}
    rc = to_dataclass(node, RecoveryConfig)
    rules = CollectRules(rc.keep, rc.pre_intervention_steps, rc.max_interventions, rc.stall_steps)
    rewind_cfg = RewindConfig(mode=rc.rewind_mode, max_rewinds=10**6, auto_rewind=False)
    source = make_source(rc, task)
    if len(envs) == 1 and rows == 0:  # the one-at-a-time path (equal to collect_batched at B = 1, unpadded)
        outcomes = collect_episodes(
            lambda: MonitoredEpisode(envs[0], loaded.policy, monitor, tracker, rewind_cfg),
            source,
            seeds,
            None,
            rules,
            "bench",
            1,
        )
    else:
        outcomes = collect_batched(
            envs, loaded.policy, monitor, tracker, rewind_cfg, source, seeds, None, rules, "bench", 1, rows
        )
    rewinds = sum(e["kind"] == "rewind" for o in outcomes for e in o.events)
    return outcomes, sum(o.steps for o in outcomes), rewinds


def run_setting(
    envs: list[Any],
    loaded: Any,
    monitor: Monitor,
    tracker: Any,
    seeds: list[int],
    rows: int,
    task: str,
    collect: str = "",
) -> dict[str, Any]:
    """The episodes ``seeds`` on ``envs`` (``collect``: the loop's collection with that source): wall
    time, episodes/s, env steps (recorded steps for a collection), the records."""
    start = time.perf_counter()
    if collect:
        records, steps, rewinds = run_collection(envs, loaded, monitor, tracker, seeds, rows, task, collect)
    else:
        recs, _ = run_monitored(
            envs, loaded, monitor, tracker, RewindConfig(), seeds, 0, progress=False, inference_rows=rows
        )
        records = [dataclasses.replace(r, monitor_ms=0.0) for r in recs]
        steps, rewinds = sum(r.length for r in recs), sum(r.rewinds for r in recs)
    wall = time.perf_counter() - start
    return {
        "wall_s": round(wall, 3),
        "episodes_per_s": round(len(records) / wall, 4),
        "env_steps_per_s": round(steps / wall, 1),
        "env_steps": steps,
        "rewinds": rewinds,
        "successes": sum(r.success for r in records),
        "records": records,
    }


def inference_ms(task: str, loaded: Any, rows: int, reps: int = 15) -> dict[str, float]:
    """Fastest of ``reps`` ``predict_chunk`` calls on 1 and on ``rows`` rows (a real window): how much
    of a batched inference's cost is per call and how much per row."""
    env = make_env(task)
    obs, _ = env.reset(seed=0)
    env.close()
    policy = loaded.policy
    one = {
        k: torch.as_tensor(np.stack([obs[k]] * policy.n_obs_steps))[None].float()
        for k in policy.used_obs_keys
    }
    out = {}
    for n in (1, rows):
        window = {k: v.repeat(n, *([1] * (v.dim() - 1))) for k, v in one.items()}
        streams = RowGenerators([NoiseStream(torch.Generator().manual_seed(i)) for i in range(n)])
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            policy.predict_chunk(window, 1, streams)
            times.append(time.perf_counter() - start)
        out[f"rows_{n}"] = round(1e3 * min(times), 2)
    return out


def measure(args: argparse.Namespace, loaded: Any, monitor: Monitor, tracker: Any) -> dict[str, Any]:
    """Every setting once per round on the same seeds, interleaved; records checked equal."""
    settings = {"sequential": (1, 0), "sequential_exact": (1, args.rows), "batched": (args.batch, args.rows)}
    envs: dict[str, Any] = {"local": [make_env(args.task) for _ in range(args.batch)]}
    if args.workers:  # the same batch with its envs stepped in worker processes
        settings["batched_workers"] = (args.batch, args.rows)
        envs["batched_workers"] = EnvWorkers(EnvFactory(EnvConfig(name=args.task)), args.batch, args.workers)
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            seeds = list(range(1000 * (r + 1), 1000 * (r + 1) + args.episodes))
            row: dict[str, Any] = {"seeds": [seeds[0], seeds[-1]], "load_avg_1min": os.getloadavg()[0]}
            for name, (batch, rows) in settings.items():
                batch_envs = envs.get(name, envs["local"])[:batch]
                row[name] = run_setting(
                    batch_envs, loaded, monitor, tracker, seeds, rows, args.task, args.collect
                )
                log.info("round %d %s: %.3f episodes/s", r, name, row[name]["episodes_per_s"])
            for name in settings:
                if not name.startswith("batched"):
                    continue
                row[f"records_equal_{name}"] = row[name]["records"] == row["sequential_exact"]["records"]
                if args.threads == 1 and not row[f"records_equal_{name}"]:  # guaranteed with one thread only
                    raise SystemExit(f"{name} and sequential_exact records differ: the equality is broken")
            for name in settings:
                if name.startswith("batched"):
                    row[f"speedup_{name}_vs_sequential"] = round(
                        row[name]["episodes_per_s"] / row["sequential"]["episodes_per_s"], 3
                    )
                row[name].pop("records")
            row["speedup_vs_sequential"] = row["speedup_batched_vs_sequential"]
            rounds.append(row)
    finally:
        for env in envs["local"]:
            env.close()
        if "batched_workers" in envs:
            envs["batched_workers"].close()
    summary: dict[str, Any] = {
        name: {"episodes_per_s_median": statistics.median(x[name]["episodes_per_s"] for x in rounds)}
        for name in settings
    }
    summary["speedup_median"] = statistics.median(x["speedup_vs_sequential"] for x in rounds)
    if args.workers:
        summary["speedup_batched_workers_median"] = statistics.median(
            x["speedup_batched_workers_vs_sequential"] for x in rounds
        )
    summary["records_equal_batched_vs_sequential_exact"] = all(x["records_equal_batched"] for x in rounds)
    return {"rounds": rounds, "summary": summary}


def _parser() -> argparse.ArgumentParser:
    """The bench's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--policy-path", default=None, help="weights to run (default: train a fresh one)")
    parser.add_argument("--demos-path", default=None, help="the demos of --policy-path (library)")
    parser.add_argument("--demos", type=int, default=5)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument(
        "--down-dims", type=int, nargs="+", default=None, help="U-Net widths (default: config)"
    )
    parser.add_argument("--episodes", type=int, default=20, help="episodes per setting and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--quantile", type=float, default=0.9)
    parser.add_argument("--collect", choices=sorted(COLLECT), default="", help="the loop's collection")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="N >= 1: also 'batched_workers', the batch's envs in N worker processes",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads for every setting (the commands' default: 1)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_batched.json"))
    return parser


def main() -> None:
    """Parse the arguments, prepare the policy and the monitor, measure, write the JSON."""
    parser = _parser()
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.policy_path:
            run, store = Path(args.policy_path), Path(args.demos_path)
        else:
            run, store = train_policy(args.task, Path(tmp), args.demos, args.train_steps, args.down_dims)
        env = make_env(args.task)
        loaded = load_policy(str(run), env, args.task, torch.device("cpu"))
        env.close()
        monitor, tracker = monitor_parts(args, loaded, store)
        result = measure(args, loaded, monitor, tracker)
        result["summary"]["inference_ms_min"] = inference_ms(args.task, loaded, args.rows)
    result["meta"] = {
        "task": args.task,
        "collect": args.collect or None,
        "policy": f"diffusion U-Net {list(loaded.policy.config.down_dims)}, "
        f"{loaded.policy.config.inference_steps} {loaded.policy.config.scheduler} steps, "
        f"n_action_steps {loaded.policy.n_action_steps}",
        "policy_path": args.policy_path or f"fresh, {args.train_steps} training steps",
        "episodes_per_round": args.episodes,
        "batch": args.batch,
        "inference_rows": args.rows,
        "threshold": monitor.threshold(0),
        "torch_threads": args.threads,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "note": "how busy the machine was: load_avg_1min per round",
    }
    log.info("summary: %s", json.dumps(result["summary"]))
    write_result(args.out, result)


if __name__ == "__main__":
    main()
