"""Hostile policy-weights folders: every tampering is refused in one line.

The session's ``tiny_run`` (a real 4-demo Lift store and a real tiny diffusion run, made once) is copied
per case, one thing tampered with, and the error type (:class:`PolicyWeightsError`, a one-line user
error for the commands) and the message (naming the file and the problem) checked; fine-tuning from and
evaluating tampered weights report the same in one line.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.hostile import OBS_KEY, STEP, error_line, one_line
from helpers.train import run_cli, train_config
from safetensors.torch import load_file, save_file

from rewind.config import ConfigError
from rewind.policies.io import PolicyWeightsError, load_policy_weights, read_policy_meta
from rewind.scripts.eval import main as eval_main
from rewind.train import run_train
from rewind.train.state import (
    WEIGHTS_DIR,
    file_sha256,
)


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
def test_tampered_weights_folder_is_refused_inone_line(
    made: dict[str, Path], tmp_path: Path, case: str, edit: Callable[..., None], words: str
) -> None:
    folder = _tampered_weights(made, tmp_path, edit)
    with pytest.raises(PolicyWeightsError) as caught:
        load_policy_weights(folder)
    message = one_line(caught.value)
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


def test_eval_reports_tampered_weights_inone_line(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = _tampered_weights(made, tmp_path, _set("config", "n_obs_steps", value=-1))
    args = [f"policy_path={folder}", "env=lift", "episodes=1", f"out_dir={tmp_path / 'eval'}", "device=cpu"]
    assert run_cli(eval_main, [*args, "wandb.mode=disabled", "progress=false"]) == 2
    err = error_line(capsys.readouterr().err, "rewind-eval")
    assert f"{folder}/config.json: config (diffusion): n_obs_steps must be >= 1; got -1" in err, err
