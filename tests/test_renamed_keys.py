"""Renamed config keys (``rewind.config.RENAMED_KEYS``): "weights" means policy weights only (the
sampling meaning is ``sample_weights``), and the per-step tag is a ``source`` as the store calls it.

An override of an old key is one line naming the new key (exit 2, before anything runs); a config saved
under an old key (a training state's resume signature, a loop's ``loop.json``) reads under the new one.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.loop import loop_config
from helpers.train import TINY_TRAIN, train_config

from rewind.config import RENAMED_KEYS, ConfigError, check_renamed_key, with_renamed_keys
from rewind.loop.config import FinetuneConfig
from rewind.loop.lineage import IDENTITY, check_identity
from rewind.train import run_train
from rewind.train.config import DataConfig
from rewind.train.state import STATE_DIR

SCHEMAS = {"data": DataConfig, "finetune": FinetuneConfig}


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_KEYS.items()))
def test_each_new_key_is_a_field_and_the_old_one_is_gone(old: str, new: str) -> None:
    node, old_leaf = old.split(".")
    new_node, new_leaf = new.split(".")
    fields = {f.name for f in dataclasses.fields(SCHEMAS[node])}
    assert node == new_node and new_leaf in fields and old_leaf not in fields


def test_an_old_key_names_the_new_one() -> None:
    with pytest.raises(ConfigError, match=r"^'data.source_weights' was renamed 'data.sample_weights': use "):
        check_renamed_key("data.source_weights")
    with pytest.raises(ConfigError, match=r"use data.sample_weights.recovery=\.\.\.$"):
        check_renamed_key("data.source_weights.recovery")
    check_renamed_key("data.sample_weights")  # the new key passes
    check_renamed_key("data.source_weights_x")  # only whole keys match


@pytest.mark.parametrize(
    "override",
    ["+data.source_weights={policy: 1.0}", "data.weight_mode=sample", "data.label_boundaries=respect"],
)
def test_rewind_train_refuses_an_old_key_in_one_line(
    override: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from rewind.scripts.train import main

    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["rewind-train", "data.path=x", override, f"out_dir={out}"])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err.strip()
    key = override.lstrip("+").split("=")[0]
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert f"'{key}' was renamed '{RENAMED_KEYS[key]}'" in err
    assert not out.exists()


def test_a_saved_config_reads_under_the_new_keys() -> None:
    saved = {
        "data": {"source_weights": {"policy": 0.0}, "weight_mode": "sample", "label_boundaries": "ignore"},
        "finetune": {"source_weights": {}, "weight_mode": "sample", "steps": 5},
        "seed": 1,
    }
    assert with_renamed_keys(saved) == {
        "data": {
            "sample_weights": {"policy": 0.0},
            "sample_weight_mode": "sample",
            "source_boundaries": "ignore",
        },
        "finetune": {"sample_weights": {}, "sample_weight_mode": "sample", "steps": 5},
        "seed": 1,
    }
    assert saved["data"]["source_weights"] == {"policy": 0.0}  # the input is left as it was


def test_a_training_run_saved_before_the_rename_resumes(tiny_run: dict[str, Path], tmp_path: Path) -> None:
    run = shutil.copytree(tiny_run["train"], tmp_path / "train")
    (state,) = (run / STATE_DIR).glob("step_*/state.json")
    meta = json.loads(state.read_text())
    data = meta["resume_signature"]["data"]
    for old, new in RENAMED_KEYS.items():
        if old.startswith("data."):
            data[old[5:]] = data.pop(new[5:])
    state.write_text(json.dumps(meta))
    cfg = train_config(run, tiny_run["store"], train={**TINY_TRAIN, "steps": 31}, resume=True)
    assert run_train(cfg)["steps"] == 31
    (state,) = (run / STATE_DIR).glob("step_*/state.json")  # the state of step 31, old names again
    meta = json.loads(state.read_text())
    data = meta["resume_signature"]["data"]
    data["weight_mode"] = data.pop("sample_weight_mode")
    data["weight_mode"] = "sample"  # a setting that differs is still refused, under its new name
    state.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"differs from the saved run in data.sample_weight_mode \("):
        run_train(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=32)))


def test_a_loop_started_before_the_rename_resumes(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "loop")
    assert check_identity(tmp_path / "loop", cfg) is False
    path = tmp_path / "loop" / IDENTITY
    old = json.loads(path.read_text())
    ft = old["finetune"]
    ft["source_weights"], ft["weight_mode"] = ft.pop("sample_weights"), ft.pop("sample_weight_mode")
    path.write_text(json.dumps(old))
    assert check_identity(tmp_path / "loop", cfg) is True
    ft["weight_mode"] = "loss"  # an old loop.json with another setting is still refused
    path.write_text(json.dumps(old))
    with pytest.raises(ConfigError, match=r"other settings \(finetune.sample_weight_mode\)"):
        check_identity(tmp_path / "loop", cfg)
