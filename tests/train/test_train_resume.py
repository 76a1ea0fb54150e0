"""Exact resume: a run stopped between two saves and resumed ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.train import train_config
from safetensors.torch import load_file

from rewind.config import ConfigError
from rewind.train import run_train
from rewind.train.state import STATE_DIR, WEIGHTS_DIR

RESUME_TRAIN = {
    "steps": 40,
    "batch_size": 8,
    "warmup_steps": 5,
    "save_every": 10,
    "val_every": 20,
    "log_every": 5,
}


@pytest.fixture()
def store(tiny_run: dict[str, Path]) -> Path:
    """The session's 4 Lift demos (only read)."""
    return tiny_run["store"]


def _tensors(run: Path, rel: str) -> dict[str, torch.Tensor]:
    return load_file(str(run / rel))


def _assert_same_tensors(a: Path, b: Path, rel: str) -> None:
    ta, tb = _tensors(a, rel), _tensors(b, rel)
    assert ta.keys() == tb.keys()
    different = [k for k in ta if not torch.equal(ta[k], tb[k])]
    assert not different, f"{rel}: tensors differ: {different[:5]}"


@pytest.mark.parametrize("policy", ["diffusion", "act"])
def test_killed_and_resumed_run_is_bit_identical(tmp_path: Path, store: Path, policy: str) -> None:
    full, cut = tmp_path / "full", tmp_path / "cut"
    run_train(train_config(full, store, policy, train=RESUME_TRAIN))
    run_train(train_config(cut, store, policy, train=RESUME_TRAIN), stop_at=25)  # "killed" at step 25
    assert json.loads((cut / WEIGHTS_DIR / "last.json").read_text())["step"] == 20
    (cut / STATE_DIR / ".tmp-step_000030-999").mkdir()  # a save the kill interrupted
    summary = run_train(train_config(cut, store, policy, train=RESUME_TRAIN, resume=True))
    assert summary["steps"] == 40
    assert not list((cut / STATE_DIR).glob(".tmp-*"))
    _assert_same_tensors(full, cut, "weights/step_000040/model.safetensors")
    for name in ("model", "optimizer", "ema", "rng"):
        _assert_same_tensors(full, cut, f"training_state/step_000040/{name}.safetensors")
    state_full = json.loads((full / STATE_DIR / "step_000040" / "state.json").read_text())
    state_cut = json.loads((cut / STATE_DIR / "step_000040" / "state.json").read_text())
    assert state_full["numpy_rng"] == state_cut["numpy_rng"]
    assert state_full["components"]["scheduler"] == state_cut["components"]["scheduler"]


def test_resume_refuses_a_changed_config_and_fresh_runs_refuse_to_overwrite(
    tmp_path: Path, store: Path
) -> None:
    run = tmp_path / "run"
    short = {**RESUME_TRAIN, "steps": 10}
    run_train(train_config(run, store, train=short))
    with pytest.raises(ConfigError, match="resume=true"):
        run_train(train_config(run, store, train=short))
    with pytest.raises(ConfigError, match="config differs from the saved run in train.lr "):
        run_train(train_config(run, store, train={**short, "lr": 3e-4}, resume=True))
    summary = run_train(train_config(run, store, train={**short, "steps": 12}, resume=True))
    assert summary["steps"] == 12  # train.steps may grow on resume
    # how chunks are sampled at inference may change (training never reads it); the architecture may not
    for change, steps in (({"ddim_eta": 0.5}, 14), ({"horizon": 16}, 16)):
        cfg = train_config(run, store, train={**short, "steps": steps}, resume=True)
        cfg.policy.update(change)
        if "horizon" in change:
            with pytest.raises(ConfigError, match="config differs from the saved run in policy.horizon"):
                run_train(cfg)
        else:
            assert run_train(cfg)["steps"] == steps


def test_resume_without_saved_state_starts_fresh(tmp_path: Path, store: Path) -> None:
    summary = run_train(
        train_config(tmp_path / "new", store, train={**RESUME_TRAIN, "steps": 3}, resume=True)
    )
    assert summary["steps"] == 3
