"""bench/base_ablation.py's variants are valid ``rewind-train`` and ``rewind-eval`` settings: each one's
training overrides compose into a :class:`TrainConfig` (the policy node validated by its registry
config), each one's evaluation overrides compose into a validated :class:`EvalConfig`, and each
evaluation's ``n_action_steps`` fits the chunk its training predicts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from rewind.config import to_dataclass
from rewind.eval import EvalConfig
from rewind.train import TrainConfig
from rewind.train.config import policy_config

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is not a package; taken off again once imported
try:
    import base_ablation
finally:
    sys.path.remove(str(BENCH))

VARIANTS = base_ablation.VARIANTS


def _compose(config_name: str, overrides: list[str], schema: type) -> object:
    """The Hydra config ``config_name`` with ``overrides`` on stack3, as a validated ``schema``."""
    with initialize_config_module(config_module="rewind.configs", version_base="1.3"):
        cfg = compose(config_name, overrides=["env=stack3", "out_dir=unused", *overrides])
    return to_dataclass(cfg, schema)


def _train_config(name: str) -> TrainConfig:
    import rewind.scripts.train  # noqa: F401  (registers train_schema)

    overrides = base_ablation.training_overrides(name, round_store="unused/store")
    policy = base_ablation._policy_choice(overrides)
    rest = [o for o in overrides if not o.startswith("policy=")]
    return _compose("train", [*policy, "data.path=unused", *rest], TrainConfig)


def _eval_config(name: str) -> EvalConfig:
    import rewind.scripts.eval  # noqa: F401  (registers eval_schema)

    return _compose("eval", ["policy_path=unused", *VARIANTS[name].eval], EvalConfig)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_composes_and_its_execution_fits_the_chunk(name: str) -> None:
    cfg = _train_config(name)
    pc = policy_config(cfg.policy)
    n = _eval_config(name).n_action_steps
    if n is not None:
        assert 1 <= n <= pc.horizon - pc.n_obs_steps + 1, (name, n, pc.horizon)


def test_the_short_chunk_variant_changes_the_horizon() -> None:
    cfg = _train_config("all_demos_h8")
    pc = policy_config(cfg.policy)
    assert (pc.horizon, pc.n_action_steps) == (8, 4)
    assert cfg.data.val_fraction == 0
    assert policy_config(_train_config("all_demos").policy).horizon == 16


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variants_evaluation_overrides_compose(name: str) -> None:
    ev = _eval_config(name)
    for o in VARIANTS[name].eval:
        key, value = o.split("=", 1)
        assert str(getattr(ev, key)) == value, (name, o)
