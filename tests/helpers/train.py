"""Tiny policies, a 4-demo Lift store and CLI helpers shared by the train and eval tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rewind.collect import CollectConfig, run_collect
from rewind.config import to_dataclass
from rewind.envs.config import EnvConfig
from rewind.train import TrainConfig

#: Policy settings small enough for a few dozen CPU steps in seconds.
TINY_POLICIES: dict[str, dict[str, Any]] = {
    "diffusion": {
        "horizon": 8,
        "n_action_steps": 4,
        "down_dims": [16, 32],
        "obs_feature_dim": 16,
        "diffusion_step_embed_dim": 16,
        "num_train_timesteps": 10,
        "num_inference_steps": 3,
    },
    "flow": {
        "horizon": 8,
        "n_action_steps": 4,
        "down_dims": [16, 32],
        "obs_feature_dim": 16,
        "diffusion_step_embed_dim": 16,
        "num_inference_steps": 3,
    },
    "act": {
        "horizon": 8,
        "n_action_steps": 4,
        "d_model": 16,
        "n_heads": 2,
        "dim_feedforward": 32,
        "n_encoder_layers": 1,
        "n_decoder_layers": 1,
        "n_vae_encoder_layers": 1,
        "latent_dim": 4,
        "obs_feature_dim": 16,
    },
}

#: A short run: saves at 10, 20, 30; validation at 15 and 30.
TINY_TRAIN = {
    "steps": 30,
    "batch_size": 8,
    "warmup_steps": 5,
    "save_every": 10,
    "val_every": 15,
    "log_every": 5,
}


def collect_lift_store(path: Path, episodes: int = 4) -> Path:
    """Record ``episodes`` scripted Lift demos into a store at ``path``."""
    cfg = CollectConfig(
        out_dir=str(path.parent), env=EnvConfig(name="lift"), episodes=episodes, out=str(path), progress=False
    )
    summary = run_collect(cfg)
    assert summary["succeeded"] == episodes, summary
    return path


def train_config(out_dir: Path, store: Path, policy: str = "diffusion", **overrides: Any) -> TrainConfig:
    """A tiny CPU :class:`TrainConfig` (W&B disabled); ``overrides`` replace top-level nodes."""
    node = {
        "out_dir": str(out_dir),
        "env": {"name": "lift"},
        "data": {"path": str(store), "val_fraction": 0.25},
        "policy": {"name": policy, **TINY_POLICIES[policy]},
        "train": dict(TINY_TRAIN),
        "device": "cpu",
        "num_threads": 1,
        "wandb": {"mode": "disabled"},
        "progress": False,
    }
    node.update(overrides)
    return to_dataclass(node, TrainConfig)


def train_args(out_dir: Path, store: Path, policy: str = "diffusion") -> list[str]:
    """The command-line overrides of :func:`train_config`."""
    args = [
        f"out_dir={out_dir}",
        "env=lift",
        f"policy={policy}",
        f"data.path={store}",
        "data.val_fraction=0.25",
    ]
    for key, value in TINY_POLICIES[policy].items():
        text = "[" + ",".join(map(str, value)) + "]" if isinstance(value, list) else str(value)
        args.append(f"policy.{key}={text}")
    args += [f"train.{k}={v}" for k, v in TINY_TRAIN.items()]
    return [*args, "device=cpu", "num_threads=1", "wandb.mode=disabled", "progress=false"]


def run_cli(main: Callable[[Sequence[str]], None], args: Sequence[str]) -> int:
    """Run a hydra_command entry point in-process; return its exit status."""
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def train_tiny_policy(root: Path) -> dict[str, Path]:
    """A 4-demo Lift store under ``root/store`` and a tiny diffusion policy trained on it under
    ``root/train`` (seconds); the caller's torch thread count is restored."""
    import torch

    from rewind.train import run_train

    store = collect_lift_store(root / "store")
    threads = torch.get_num_threads()
    try:
        run_train(train_config(root / "train", store))
    finally:
        torch.set_num_threads(threads)
    return {"store": store, "train": root / "train", "root": root}
