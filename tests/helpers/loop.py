"""A tiny loop config for the loop tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.train import TINY_POLICIES
from rewind.config import to_dataclass
from rewind.loop import LoopConfig


def loop_node(out: Path, base: dict[str, Path] | None = None, **overrides: Any) -> dict[str, Any]:
    """A loop small enough for seconds: Lift capped at 50 steps, stall-triggered interventions (the tiny
    policy never succeeds, so there is no calibration), 3 episodes per round, 10 fine-tuning steps."""
    node: dict[str, Any] = {
        "out_dir": str(out),
        "env": {"name": "lift", "max_steps": 50},
        "rounds": 2,
        "episodes_per_round": 3,
        "base": {
            "demos": 4,
            "steps": 30,
            "batch_size": 8,
            "warmup_steps": 5,
            "policy": {"name": "diffusion", **TINY_POLICIES["diffusion"]},
        },
        "recovery": {"name": "operator", "stall_steps": 10, "max_correction_steps": 40},
        "finetune": {"mode": "ft", "steps": 10, "batch_size": 8, "warmup_steps": 2},
        "calibration": {"episodes": 3, "max_demos": 4},
        "promotion": {"episodes": 3},
        "eval": {"episodes": 3, "num_envs": 3},
        "control": False,
        "device": "cpu",
        "num_threads": 1,
        "wandb": {"mode": "disabled"},
        "progress": False,
    }
    if base is not None:
        node["base"]["policy_path"] = str(base["train"])
    for key, value in overrides.items():
        node[key] = (
            {**node[key], **value} if isinstance(value, dict) and isinstance(node.get(key), dict) else value
        )
    return node


def loop_config(out: Path, base: dict[str, Path] | None = None, **overrides: Any) -> LoopConfig:
    """:func:`loop_node` as a checked :class:`LoopConfig`."""
    return to_dataclass(loop_node(out, base, **overrides), LoopConfig)
