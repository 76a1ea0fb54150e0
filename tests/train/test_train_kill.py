"""A real SIGKILL in the middle of a run: the newest save is complete and ``resume=true`` finishes the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.train import train_args, train_config

from rewind.policies.io import load_policy_weights
from rewind.train import run_train
from rewind.train.state import STATE_DIR, WEIGHTS_DIR, read_pointer, step_name

SAVE_OFTEN = ["train.steps=60", "train.save_every=2", "train.val_every=0", "train.log_every=2"]


def _wait_for_step(run: Path, proc: subprocess.Popen, step: int, timeout: float = 120.0) -> None:
    pointer = run / STATE_DIR / "last.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if pointer.is_file() and json.loads(pointer.read_text())["step"] >= step:
            return
        time.sleep(0.05)
    pytest.fail(f"the training process did not reach step {step} (exit code {proc.poll()})")


def test_sigkill_leaves_a_complete_save_and_resume_finishes(
    tmp_path: Path, tiny_run: dict[str, Path]
) -> None:
    store = tiny_run["store"]
    run = tmp_path / "run"
    args = [a for a in train_args(run, store) if not a.startswith(("train.steps", "train.save_every"))]
    code = "import sys; from rewind.scripts.train import main; main(sys.argv[1:])"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args, *SAVE_OFTEN], env=env, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for_step(run, proc, 6)
        proc.send_signal(signal.SIGKILL)  # saves every 2 steps: the kill often lands inside one
    finally:
        proc.wait(timeout=60)
    step = read_pointer(run / STATE_DIR)
    assert step is not None and step < 60
    assert read_pointer(run / WEIGHTS_DIR) >= step
    load_policy_weights(run / WEIGHTS_DIR / step_name(step))  # complete and uncorrupted (sha256 checked)
    train = {"steps": 60, "batch_size": 8, "warmup_steps": 5, "save_every": 2, "val_every": 0, "log_every": 2}
    summary = run_train(train_config(run, store, train=train, resume=True))
    assert summary["steps"] == 60
    assert not [p for p in (run / WEIGHTS_DIR).iterdir() if p.name.startswith(".tmp-")]
