"""W&B offline (the default mode) writes a local run folder that `wandb sync` can upload later."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.train import train_config

from rewind.metrics import read_metrics
from rewind.train import run_train


def test_offline_mode_writes_a_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_run: dict[str, Path]
) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    store = tiny_run["store"]
    short = {"steps": 4, "batch_size": 4, "warmup_steps": 1, "save_every": 4, "val_every": 4, "log_every": 2}
    run = tmp_path / "run"
    run_train(train_config(run, store, train=short, wandb={"mode": "offline", "project": "rewind-test"}))
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), f"no offline run in {run / 'wandb'}"
    assert [r["step"] for r in read_metrics(run, kind="log") if "train/loss" in r] == [2, 4]
