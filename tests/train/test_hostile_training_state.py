"""Hostile training states: every tampering is refused in one line.

The session's ``tiny_run`` (its training state of step 30) is copied per case, one thing tampered with,
and the error (:class:`TrainingStateError`, a one-line user error) checked to name the file and the
problem; ``rewind-train`` reports it in one line (exit status 2). Then: a resume over a corrupted
optimizer file keeps the last good state, and a non-finite loss stops training naming the step while
the last good weights and state stay.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.hostile import RESUME_TRAIN, STEP, error_line, one_line
from helpers.train import run_cli, train_args, train_config
from safetensors.torch import load_file, save_file

from rewind.metrics import MetricsLogger
from rewind.policies.io import load_policy_weights
from rewind.scripts.train import main as train_main
from rewind.train import run_train
from rewind.train.state import (
    STATE_DIR,
    WEIGHTS_DIR,
    TrainingStateError,
    file_sha256,
    read_pointer,
    verify_training_state,
)
from rewind.train.trainer import Trainer, TrainingDivergedError


# ----------------------------------------------------------------------------- training states
def _state(run: Path) -> Path:
    return run / STATE_DIR / STEP


def _edit_state_json(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def tamper(run: Path) -> None:
        path = _state(run) / "state.json"
        payload = json.loads(path.read_text())
        edit(payload)
        path.write_text(json.dumps(payload))

    return tamper


def _flip_byte(name: str, where: float = 0.5) -> Callable[[Path], None]:
    def tamper(run: Path) -> None:
        path = _state(run) / name
        data = bytearray(path.read_bytes())
        data[int(len(data) * where)] ^= 0xFF
        path.write_bytes(bytes(data))

    return tamper


def _rewrite_tensors(name: str, change: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    """Change the tensors of ``name`` and record the new file's sha256 (a consistent but bad state)."""

    def tamper(run: Path) -> None:
        path = _state(run) / name
        tensors = load_file(str(path))
        change(tensors)
        save_file(tensors, str(path))
        _hash(name, file_sha256(path))(run)

    return tamper


def _first_nan(tensors: dict[str, torch.Tensor]) -> None:
    """A nan in the first floating tensor (what an unguarded diverged run saved)."""
    key = next(k for k, v in sorted(tensors.items()) if v.is_floating_point() and v.numel() > 1)
    tensors[key].view(-1)[0] = float("nan")


def _transpose_one(tensors: dict[str, torch.Tensor]) -> None:
    """One non-square matrix transposed: a model of another layout."""
    key = next(k for k, v in sorted(tensors.items()) if v.dim() == 2 and v.shape[0] != v.shape[1])
    tensors[key] = tensors[key].t().contiguous()


def _symlinked_rng(run: Path) -> None:
    """rng.safetensors a symlink to an identical file outside the state folder (the sha256 matches)."""
    path = _state(run) / "rng.safetensors"
    outside = run / "rng-elsewhere.safetensors"
    os.replace(path, outside)
    path.symlink_to(outside)


def _pointer(text: str) -> Callable[[Path], None]:
    def tamper(run: Path) -> None:
        (run / STATE_DIR / "last.json").write_text(text)

    return tamper


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    def tamper(run: Path) -> None:
        (_state(run) / name).write_bytes(data)

    return tamper


def _hash(name: str, value: str | None) -> Callable[[Path], None]:
    """Set (or, with None, drop) the sha256 that state.json records for ``name``."""

    def edit(payload: dict[str, Any]) -> None:
        if value is None:
            payload["sha256"].pop(name)
        else:
            payload["sha256"][name] = value

    return _edit_state_json(edit)


#: (case, tampering of a copied run folder, words the message must contain)
STATE_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "flipped optimizer byte",
        _flip_byte("optimizer.safetensors"),
        "optimizer.safetensors: corrupted (sha256 differs",
    ),
    ("optimizer header byte", _flip_byte("optimizer.safetensors", 0.001), "optimizer.safetensors: corrupted"),
    ("truncated model", _write("model.safetensors", b"\0" * 10), "model.safetensors: corrupted"),
    ("ema missing", lambda run: (_state(run) / "ema.safetensors").unlink(), "ema.safetensors: missing"),
    ("rng junk", _write("rng.safetensors", b"junk"), "rng.safetensors: corrupted"),
    ("state.json not JSON", _write("state.json", b"{oops"), "state.json: unreadable or not valid JSON"),
    ("state.json a list", _write("state.json", b"[]"), "state.json: not a training state"),
    (
        "step differs",
        _edit_state_json(lambda p: p.update(step=20)),
        "step 20 differs from its folder step_000030",
    ),
    ("components missing", _edit_state_json(lambda p: p.pop("components")), "'components' is missing"),
    (
        "numpy_rng a list",
        _edit_state_json(lambda p: p.update(numpy_rng=[1])),
        "'numpy_rng' is missing or not a JSON object",
    ),
    (
        "numpy_rng garbage",
        _edit_state_json(lambda p: p.update(numpy_rng={"bit_generator": "nope"})),
        "state.json: numpy_rng does not fit this run",
    ),
    ("optimizer hash altered", _hash("optimizer.safetensors", "0" * 64), "optimizer.safetensors: corrupted"),
    ("model hash dropped", _hash("model.safetensors", None), "model.safetensors: no sha256 recorded"),
    ("hash names a path", _hash("../x.safetensors", "0" * 64), "'../x.safetensors' is not a plain file"),
    (
        "resume_signature missing",
        _edit_state_json(lambda p: p.pop("resume_signature")),
        "'resume_signature' is missing",
    ),
    (
        "nan in optimizer",
        _rewrite_tensors("optimizer.safetensors", _first_nan),
        "optimizer.safetensors: non-finite values (nan/inf)",
    ),
    (
        "model of another layout",
        _rewrite_tensors("model.safetensors", _transpose_one),
        "model.safetensors: does not fit this run",
    ),
    ("rng symlinked out", _symlinked_rng, "'rng.safetensors' is not a plain file"),
    ("pointer not JSON", _pointer("{"), "last.json: unreadable or not valid JSON"),
    ("pointer path escapes", _pointer('{"step": 30, "path": "../../etc"}'), "last.json: malformed"),
    ("pointer step a string", _pointer('{"step": "30", "path": "step_000030"}'), "last.json: malformed"),
    (
        "pointer at missing folder",
        _pointer('{"step": 50, "path": "step_000050"}'),
        "points at missing folder step_000050",
    ),
]


def _copy_run(made: dict[str, Path], tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(made["train"], run)
    return run


@pytest.mark.parametrize(("case", "tamper", "words"), STATE_CASES, ids=[c[0] for c in STATE_CASES])
def test_tampered_training_state_is_refused_inone_line(
    made: dict[str, Path], tmp_path: Path, case: str, tamper: Callable[[Path], None], words: str
) -> None:
    run = _copy_run(made, tmp_path)
    tamper(run)
    before = sorted(p.name for p in (run / STATE_DIR).iterdir())
    with pytest.raises(TrainingStateError) as caught:
        run_train(train_config(run, made["store"], train=RESUME_TRAIN, resume=True))
    message = one_line(caught.value)
    assert words in message and str(run / STATE_DIR) in message, message
    assert sorted(p.name for p in (run / STATE_DIR).iterdir()) == before  # nothing deleted or added
    assert json.loads((run / WEIGHTS_DIR / "last.json").read_text())["step"] == 30


def test_resume_over_corrupted_optimizer_keeps_the_last_good_state(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The issue's case: a flipped byte in optimizer.safetensors. The command says so in one line (exit
    2), trains nothing, and the state of step 30 is still there, byte for byte."""
    run = _copy_run(made, tmp_path)
    _flip_byte("optimizer.safetensors")(run)
    files = {p.name: p.read_bytes() for p in _state(run).iterdir()}
    assert run_cli(train_main, [*train_args(run, made["store"]), "resume=true", "train.steps=40"]) == 2
    err = error_line(capsys.readouterr().err, "rewind-train")
    assert f"{_state(run)}/optimizer.safetensors: corrupted (sha256 differs" in err, err
    assert read_pointer(run / STATE_DIR) == 30
    assert {p.name: p.read_bytes() for p in _state(run).iterdir()} == files
    assert sorted(p.name for p in (run / WEIGHTS_DIR).iterdir()) == [
        "last.json",
        "step_000010",
        "step_000020",
        "step_000030",
    ]


def test_saved_training_state_records_and_passes_its_hashes(made: dict[str, Path]) -> None:
    payload = verify_training_state(_state(made["train"]), 30)
    names = ("model", "ema", "optimizer", "scheduler", "rng")
    assert set(payload["sha256"]) == {f"{n}.safetensors" for n in names}
    assert [p.name for p in (made["train"] / STATE_DIR).glob("step_*")] == [STEP]  # older states deleted


# ----------------------------------------------------------------------------- non-finite loss
def _poison_parameter(trainer: Trainer) -> None:
    with torch.no_grad():
        next(trainer.policy.parameters()).view(-1)[0] = float("nan")


def _poison_actions(trainer: Trainer) -> None:
    trainer.data.train.buffer.data["action"][:] = np.nan  # every training batch now has nan actions


@pytest.mark.parametrize("poison", [_poison_parameter, _poison_actions], ids=["parameter", "actions"])
def test_non_finite_loss_stops_naming_the_step_and_keeps_the_last_save(
    made: dict[str, Path], tmp_path: Path, poison: Callable[[Trainer], None]
) -> None:
    """Train to step 12 (saved at 10), poison, continue: the loss of step 13 is nan. The run stops at the
    next log step (15) with an error naming step 13, and the save of step 10 stays the newest."""
    run = tmp_path / "run"
    cfg = train_config(run, made["store"], train=RESUME_TRAIN)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        trainer = Trainer(cfg)
        with MetricsLogger(run, mode="disabled") as metrics:
            trainer.run(metrics, stop_at=12)
            poison(trainer)
            with pytest.raises(TrainingDivergedError) as caught:
                trainer.run(metrics)
    message = one_line(caught.value)
    assert "non-finite loss (nan/inf) at step 13" in message, message
    assert f"step_000010 in {run}" in message, message
    assert trainer.step == 15
    assert read_pointer(run / STATE_DIR) == 10 and read_pointer(run / WEIGHTS_DIR) == 10
    assert sorted(p.name for p in (run / STATE_DIR).glob("step_*")) == ["step_000010"]
    assert sorted(p.name for p in (run / WEIGHTS_DIR).glob("step_*")) == ["step_000010"]
    verify_training_state(run / STATE_DIR / "step_000010", 10)
    load_policy_weights(run / WEIGHTS_DIR / "step_000010")  # intact and finite
    summary = run_train(train_config(run, made["store"], train={**RESUME_TRAIN, "steps": 12}, resume=True))
    assert summary["steps"] == 12  # the kept state resumes
