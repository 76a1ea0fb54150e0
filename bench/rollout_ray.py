"""Monitored ``rewind-eval`` episodes per second on Ray: 2 actors vs 1 (and in this process), same seeds.

Every setting runs the same episodes (``--episodes`` Lift episodes of ``--max-steps`` steps, the TIDE
monitor scoring every chunk with a calibration that never alarms, so no rewinds), in rounds with the
settings interleaved, so that a change in the machine's load hits them alike. Ray runs on a local
instance with ``--cpus`` CPUs (1 CPU per actor); each setting's actors start afresh every round and
their start-up (Ray worker, imports, weights loading) is reported apart from the rollout time. The
records of every setting must equal the in-process ones (checked). The policy is ``--policy-path``,
else a tiny diffusion policy trained here on 4 scripted demos (seconds; inference is cheap, so the
episodes are physics- and monitor-bound).

    .venv/bin/python bench/rollout_ray.py --out bench/results/rollout_ray.json    (~5 min on 2 loaded cores)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "osmesa")

import torch  # noqa: E402

from rewind.collect import CollectConfig, run_collect  # noqa: E402
from rewind.config import to_dataclass  # noqa: E402
from rewind.envs.config import EnvConfig, build_env  # noqa: E402
from rewind.eval.config import EvalConfig  # noqa: E402
from rewind.eval.sharded import EvalJob, EvalUnitRunner, units_of  # noqa: E402
from rewind.monitor import Calibration  # noqa: E402
from rewind.rollout.ray_backend import RayOptions, RayShards  # noqa: E402
from rewind.train import TrainConfig, run_train  # noqa: E402
from rewind.train.policy_api import load_policy  # noqa: E402
from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench")

TINY_POLICY = {
    "name": "diffusion",
    "horizon": 8,
    "n_action_steps": 4,
    "down_dims": [16, 32],
    "obs_feature_dim": 16,
    "diffusion_step_embed_dim": 16,
    "num_train_timesteps": 10,
    "num_inference_steps": 3,
}


def tiny_policy(root: Path) -> Path:
    """4 scripted Lift demos and a tiny diffusion policy trained on them for 30 steps; the run folder."""
    store = root / "store"
    run_collect(
        CollectConfig(
            out_dir=str(root), env=EnvConfig(name="lift"), episodes=4, out=str(store), progress=False
        )
    )
    train = {"steps": 30, "batch_size": 8, "warmup_steps": 5, "save_every": 30, "val_every": 30}
    node = {"out_dir": str(root / "train"), "env": {"name": "lift"}, "data": {"path": str(store)}}
    node.update(policy=TINY_POLICY, train=train, device="cpu", num_threads=1, wandb={"mode": "disabled"})
    run_train(to_dataclass({**node, "progress": False}, TrainConfig))
    return root / "train"


def never_alarms(policy_path: Path, folder: Path) -> Path:
    """A TIDE calibration for the weights whose threshold no score reaches (scores, no rewinds)."""
    env = build_env(EnvConfig(name="lift"))
    loaded = load_policy(policy_path, env, "lift", torch.device("cpu"))
    env.close()
    cal = Calibration("tide", 0.05, 100, 1e9, loaded.weights_hash, score_params={"dims": [0, 1, 2, 3]})
    cal.n_action_steps = loaded.policy.n_action_steps
    cal.save(folder)
    return folder


def in_process(cfg: EvalConfig) -> dict[str, Any]:
    """The episodes in this process, unit by unit (what every actor runs)."""
    start = time.perf_counter()
    runner = EvalUnitRunner(cfg)
    ready = time.perf_counter()
    records = [r for unit in units_of(cfg) for r in runner.run(unit).records]
    return {"start_s": ready - start, "wall_s": time.perf_counter() - ready, "records": records}


def on_ray(cfg: EvalConfig, actors: int) -> dict[str, Any]:
    """The episodes on ``actors`` fresh actors; start-up (until every actor is built) timed apart."""
    records: list[Any] = []
    start = time.perf_counter()
    with RayShards(EvalJob(cfg), RayOptions(actors=actors)) as shards:
        shards.wait_ready()
        ready = time.perf_counter()
        shards.run(units_of(cfg), lambda i, res: records.extend(res.records))
        wall = time.perf_counter() - ready
    return {"start_s": ready - start, "wall_s": wall, "records": records}


def comparable(records: list[Any]) -> list[dict[str, Any]]:
    """Records without their timing field."""
    return [{k: v for k, v in asdict(r).items() if k != "monitor_ms"} for r in records]


def measure(cfg: EvalConfig, settings: list[str], rounds: int) -> dict[str, list[dict[str, float]]]:
    """Every setting once per round, interleaved; records checked against the in-process ones."""
    reference = comparable(in_process(cfg)["records"])
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    for r in range(rounds):
        for s in settings:
            out = in_process(cfg) if s == "in_process" else on_ray(cfg, int(s.split("_")[1]))
            if comparable(out.pop("records")) != reference:
                raise SystemExit(f"{s}: records differ from the in-process ones")
            out["episodes_per_s"] = cfg.episodes / out["wall_s"]
            runs[s].append(out)
            log.info(
                "round %d, %s: %.2f episodes/s (start-up %.1f s)", r, s, out["episodes_per_s"], out["start_s"]
            )
    return runs


def main() -> None:
    """Parse the arguments, measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_ray.json"))
    parser.add_argument("--policy-path", type=Path, default=None)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="rollout_ray_"))
    policy_path = args.policy_path or tiny_policy(tmp / "policy")
    node = {
        "policy_path": str(policy_path),
        "env": {"name": "lift", "max_steps": args.max_steps},
        "episodes": args.episodes,
        "device": "cpu",
        "num_threads": 1,
        "monitor": {"score": "tide", "calibration": str(never_alarms(policy_path, tmp / "cal"))},
        "out_dir": str(tmp / "eval"),
        "progress": False,
    }
    cfg = to_dataclass(node, EvalConfig)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="WARNING")
    try:
        runs = measure(cfg, ["in_process", "ray_1", "ray_2"], args.rounds)
    finally:
        ray.shutdown()
    write(args, cfg, runs, load_before)


def write(args: argparse.Namespace, cfg: EvalConfig, runs: dict[str, Any], load_before: tuple) -> None:
    """The JSON: per setting the rounds' episodes/s, start-up and their medians; ratios of medians."""
    rows = {}
    for s, outs in runs.items():
        rates = [o["episodes_per_s"] for o in outs]
        rows[s] = {
            "episodes_per_s": [round(x, 3) for x in rates],
            "median_episodes_per_s": round(statistics.median(rates), 3),
            "start_s": [round(o["start_s"], 1) for o in outs],
        }
    med = {s: row["median_episodes_per_s"] for s, row in rows.items()}
    result = {
        "what": "monitored rewind-eval episodes/s (TIDE scoring, no alarms): Ray 2 actors vs 1 vs in-process",
        "env": "lift",
        "episodes_per_round": cfg.episodes,
        "max_steps": args.max_steps,
        "rounds": args.rounds,
        "ray_cpus": args.cpus,
        "policy": str(args.policy_path) if args.policy_path else "tiny diffusion (4 demos, 30 steps)",
        "records_identical": True,
        "runs": rows,
        "ratios_of_medians": {
            "ray_2_vs_ray_1": round(med["ray_2"] / med["ray_1"], 2),
            "ray_1_vs_in_process": round(med["ray_1"] / med["in_process"], 2),
        },
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "note": "the machine was shared with other work while this ran (see the load averages)",
        "machine": platform.processor() or platform.machine(),
        "command": " ".join(["python bench/rollout_ray.py", *sys.argv[1:]]),
    }
    atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    log.info("%s", json.dumps(result["ratios_of_medians"]))
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
