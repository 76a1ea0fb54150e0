"""Hostile policy-weights folders and training states: every tampering is refused in one line.

A real 4-demo Lift store and a real tiny diffusion run (``weights/step_000010..30`` and the training
state of step 30: the session's ``tiny_run``) are made once; each case copies them, tampers with one
thing and checks the error type (:class:`PolicyWeightsError` / :class:`TrainingStateError`, both
one-line user errors for the commands) and that the message names the file and the problem. Then: a
resume over a corrupted optimizer file keeps the last good state, the commands report both kinds in
one line (exit status 2), and a non-finite loss stops training naming the step while the last good
weights and state stay.
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
from helpers.train import TINY_TRAIN, run_cli, train_args, train_config
from safetensors.torch import load_file, save_file

from rewind.cli.app import is_user_error
from rewind.config import ConfigError
from rewind.metrics import MetricsLogger
from rewind.policies.io import PolicyWeightsError, load_policy_weights, read_policy_meta
from rewind.scripts.eval import main as eval_main
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

STEP = "step_000030"
#: The tiny run continued to step 40 on resume (its other settings as made).
RESUME_TRAIN = {**TINY_TRAIN, "steps": 40}
#: A low-dim observation key of Lift (the tiny run's layout).
OBS_KEY = "eef_pos"


@pytest.fixture()
def made(tiny_run: dict[str, Path]) -> dict[str, Path]:
    """The session's tiny run: ``store``, ``train`` (a finished 30-step run) and ``root``. Cases copy
    what they tamper with; the run itself is only read."""
    return tiny_run


def _error_line(err: str, prog: str) -> str:
    """The one ``<prog>: error: ...`` line of a command's stderr (log lines aside; no traceback)."""
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and is_user_error(exc), text
    return text


# ----------------------------------------------------------------------------- weights folders
def _set(*path: Any, value: Any) -> Callable[[dict[str, Any], Path], None]:
    def edit(meta: dict[str, Any], folder: Path) -> None:
        node = meta
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _drop(*path: str) -> Callable[[dict[str, Any], Path], None]:
    def edit(meta: dict[str, Any], folder: Path) -> None:
        node = meta
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


def _outside_copy(meta: dict[str, Any], folder: Path) -> None:
    """weights_file: an absolute path to an exact copy outside the folder (the sha256 matches)."""
    outside = folder.parent / "elsewhere.safetensors"
    shutil.copy(folder / "model.safetensors", outside)
    meta["weights_file"] = str(outside)


def _dotdot_copy(meta: dict[str, Any], folder: Path) -> None:
    shutil.copy(folder / "model.safetensors", folder.parent / "elsewhere.safetensors")
    meta["weights_file"] = "../elsewhere.safetensors"


def _symlink_out(meta: dict[str, Any], folder: Path) -> None:
    """model.safetensors replaced by a symlink to an identical file outside (the sha256 matches)."""
    outside = folder.parent / "elsewhere.safetensors"
    os.replace(folder / "model.safetensors", outside)
    (folder / "model.safetensors").symlink_to(outside)


def _nan_weights(meta: dict[str, Any], folder: Path) -> None:
    """A nan in the first tensor, sha256 recomputed (what an unguarded diverged run saved)."""
    path = folder / "model.safetensors"
    state = load_file(str(path))
    key = next(k for k, v in state.items() if v.is_floating_point() and not k.startswith("normalizer"))
    state[key].view(-1)[0] = float("nan")
    save_file(state, str(path))
    meta["weights_sha256"] = file_sha256(path)


def _flip_weights_byte(meta: dict[str, Any], folder: Path) -> None:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


#: (case, edit of config.json / the folder, words the message must contain)
WEIGHTS_CASES: list[tuple[str, Callable[[dict[str, Any], Path], None], str]] = [
    (
        "unknown policy_type",
        _set("policy_type", value="nope"),
        "unknown policy_type 'nope'; valid: act, diffusion, flow",
    ),
    ("policy_type not a string", _set("policy_type", value=["diffusion"]), "policy_type must be a string"),
    ("policy_type missing", _drop("policy_type"), "policy_type: missing"),
    ("format_version a string", _set("format_version", value="1"), "format_version '1'"),
    ("config missing", _drop("config"), "config: missing"),
    ("config a list", _set("config", value=[1, 2]), "config must be a JSON object"),
    ("unknown config field", _set("config", "bogus", value=1), "unknown DiffusionConfig fields ['bogus']"),
    ("horizon a string", _set("config", "horizon", value="abc"), "horizon must be int; got 'abc' (str)"),
    ("horizon a float", _set("config", "horizon", value=8.5), "horizon must be int; got 8.5"),
    ("horizon a bool", _set("config", "horizon", value=True), "horizon must be int; got True"),
    (
        "negative n_obs_steps",
        _set("config", "n_obs_steps", value=-1),
        "n_obs_steps must be >= 1; got -1",
    ),
    ("null n_obs_steps", _set("config", "n_obs_steps", value=None), "n_obs_steps must be int; got None"),
    ("obs_keys a string", _set("config", "obs_keys", value="eef_pos"), "obs_keys must be a list of str"),
    ("down_dims nested", _set("config", "down_dims", value=[[16]]), "down_dims must be a list of int"),
    ("n_groups zero", _set("config", "n_groups", value=0), "n_groups must divide every entry of down_dims"),
    (
        "ema_decay infinite",
        _set("config", "ema_decay", value=float("inf")),
        "ema_decay must be a finite number",
    ),
    (
        "obs_clip nan",
        _set("config", "obs_clip", value=float("nan")),
        "obs_clip must be a finite number or null",
    ),
    ("shape_meta missing", _drop("shape_meta"), "shape_meta: missing"),
    (
        "shape_meta.obs a list",
        _set("shape_meta", "obs", value=[]),
        "shape_meta.obs must be a non-empty JSON object",
    ),
    (
        "negative obs shape",
        _set("shape_meta", "obs", OBS_KEY, "shape", value=[-3]),
        f"shape_meta.obs.{OBS_KEY}.shape must be a list of positive ints",
    ),
    (
        "action_dim a string",
        _set("shape_meta", "action_dim", value="7"),
        "shape_meta.action_dim must be a positive int",
    ),
    (
        "action_dim null",
        _set("shape_meta", "action_dim", value=None),
        "shape_meta.action_dim must be a positive int",
    ),
    (
        "bad dtype",
        _set("shape_meta", "obs", OBS_KEY, "dtype", value=5),
        f"shape_meta.obs.{OBS_KEY}.dtype must be a numpy dtype name",
    ),
    ("huge obs_feature_dim", _set("config", "obs_feature_dim", value=10**9), "weights do not fit the policy"),
    (
        "used_obs_keys unknown",
        _set("used_obs_keys", value=["nope"]),
        "used_obs_keys ['nope'] are not in shape_meta.obs",
    ),
    ("extra a list", _set("extra", value=[1]), "extra must be a JSON object"),
    (
        "sha256 not hex",
        _set("weights_sha256", value="A" * 64),
        "weights_sha256 must be 64 lowercase hex digits",
    ),
    (
        "weights_file /etc/passwd",
        _set("weights_file", value="/etc/passwd"),
        "weights_file '/etc/passwd' is an absolute path",
    ),
    ("weights_file absolute copy", _outside_copy, "is an absolute path; it must name a file inside"),
    ("weights_file ..", _dotdot_copy, "weights_file '../elsewhere.safetensors' contains '..'"),
    ("weights_file a number", _set("weights_file", value=5), "weights_file must be a file name inside"),
    ("weights_file the folder", _set("weights_file", value="."), "weights_file '.' names the folder itself"),
    ("symlink leading out", _symlink_out, "weights_file 'model.safetensors' leads outside"),
    ("flipped byte", _flip_weights_byte, "model.safetensors: corrupted (sha256 differs"),
    ("nan weights", _nan_weights, "model.safetensors: non-finite values (nan/inf)"),
]


def _tampered_weights(made: dict[str, Path], tmp_path: Path, edit: Callable[..., None]) -> Path:
    folder = tmp_path / "w" / STEP
    shutil.copytree(made["train"] / WEIGHTS_DIR / STEP, folder)
    meta = json.loads((folder / "config.json").read_text())
    edit(meta, folder)
    (folder / "config.json").write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize(("case", "edit", "words"), WEIGHTS_CASES, ids=[c[0] for c in WEIGHTS_CASES])
def test_tampered_weights_folder_is_refused_in_one_line(
    made: dict[str, Path], tmp_path: Path, case: str, edit: Callable[..., None], words: str
) -> None:
    folder = _tampered_weights(made, tmp_path, edit)
    with pytest.raises(PolicyWeightsError) as caught:
        load_policy_weights(folder)
    message = _one_line(caught.value)
    assert words in message, message
    assert str(folder) in message  # names the file (or the folder) at fault


def test_weights_without_newer_config_fields_still_load(made: dict[str, Path], tmp_path: Path) -> None:
    """Weights saved before a config field existed load with its default (validation adds no field)."""
    folder = _tampered_weights(made, tmp_path, _drop("config", "obs_scale_floor"))
    assert load_policy_weights(folder).config.obs_scale_floor == 0.0
    assert read_policy_meta(folder)["config"].get("obs_scale_floor") is None


def test_init_from_tampered_weights_is_a_config_error(made: dict[str, Path], tmp_path: Path) -> None:
    """Fine-tuning from weights goes through the same checks: the outside file is never read."""
    folder = _tampered_weights(made, tmp_path, _outside_copy)
    cfg = train_config(tmp_path / "ft", made["store"], init={"from_weights": str(folder)})
    with pytest.raises(ConfigError, match="init.from_weights: .*weights_file .* is an absolute path"):
        run_train(cfg)


def test_eval_reports_tampered_weights_in_one_line(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = _tampered_weights(made, tmp_path, _set("config", "n_obs_steps", value=-1))
    args = [f"policy_path={folder}", "env=lift", "episodes=1", f"out_dir={tmp_path / 'eval'}", "device=cpu"]
    assert run_cli(eval_main, [*args, "wandb.mode=disabled", "progress=false"]) == 2
    err = _error_line(capsys.readouterr().err, "rewind-eval")
    assert f"{folder}/config.json: config (diffusion): n_obs_steps must be >= 1; got -1" in err, err


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
def test_tampered_training_state_is_refused_in_one_line(
    made: dict[str, Path], tmp_path: Path, case: str, tamper: Callable[[Path], None], words: str
) -> None:
    run = _copy_run(made, tmp_path)
    tamper(run)
    before = sorted(p.name for p in (run / STATE_DIR).iterdir())
    with pytest.raises(TrainingStateError) as caught:
        run_train(train_config(run, made["store"], train=RESUME_TRAIN, resume=True))
    message = _one_line(caught.value)
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
    err = _error_line(capsys.readouterr().err, "rewind-train")
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
    message = _one_line(caught.value)
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
