"""End to end through the console entry points on real data: camera-image demos -> rewind-train with an
image encoder -> rewind-eval, and rewind-store info / export / import on a real store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers.train import run_cli as run

from rewind.scripts.collect import main as collect_main
from rewind.scripts.eval import main as eval_main
from rewind.scripts.store import main as store_main
from rewind.scripts.train import main as train_main
from rewind.store import ReplayStore

TINY_IMAGE_DIFFUSION = [
    "policy.image_keys=[rgb]",
    "policy.horizon=8",
    "policy.n_action_steps=4",
    "policy.down_dims=[16,32]",
    "policy.obs_feature_dim=16",
    "policy.image_feature_dim=16",
    "policy.diffusion_step_embed_dim=16",
    "policy.num_train_timesteps=10",
    "policy.num_inference_steps=3",
]
QUIET = ["wandb.mode=disabled", "progress=false"]


@pytest.fixture(scope="module")
def rgb_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three Lift demos with 32x32 camera images, recorded through rewind-collect."""
    root = tmp_path_factory.mktemp("rgb")
    args = ["env=lift", "env.rgb=true", "env.image_size=32", "episodes=3", f"out={root / 'store'}"]
    assert run(collect_main, [*args, f"out_dir={root / 'collect'}", "progress=false"]) == 0
    summary = json.loads((root / "collect" / "summary.json").read_text())
    assert summary["succeeded"] == 3 and summary["store_info"]["obs"]["rgb"]["dtype"] == "uint8"
    return root / "store"


def test_image_policy_trains_and_evaluates_end_to_end(tmp_path: Path, rgb_store: Path) -> None:
    train = tmp_path / "train"
    args = [
        "env=lift",
        "env.rgb=true",
        "env.image_size=32",
        "policy=diffusion",
        f"data.path={rgb_store}",
        "train.steps=6",
        "train.batch_size=4",
        "train.warmup_steps=1",
        "train.save_every=3",
        "train.val_every=3",
        "device=cpu",
        "num_threads=1",
        f"out_dir={train}",
    ]
    assert run(train_main, [*args, *TINY_IMAGE_DIFFUSION, *QUIET]) == 0
    meta = json.loads((train / "weights" / "step_000006" / "config.json").read_text())
    assert meta["shape_meta"]["obs"]["rgb"]["shape"] == [32, 32, 3]
    assert np.isfinite(json.loads((train / "summary.json").read_text())["final_train_loss"])

    out = tmp_path / "eval"
    args = [
        f"policy_path={train}",
        "env=lift",
        "env.rgb=true",
        "env.image_size=32",
        "env.max_steps=12",
        "episodes=2",
        "num_envs=2",
        "device=cpu",
        f"out_dir={out}",
    ]
    assert run(eval_main, [*args, *QUIET]) == 0
    result = json.loads((out / "summary.json").read_text())
    assert result["episodes"] == 2 and all(r["length"] <= 12 for r in result["records"])


def test_store_info_export_import_round_trip(tmp_path: Path, rgb_store: Path) -> None:
    assert run(store_main, ["info", str(rgb_store), f"out_dir={tmp_path / 'info'}"]) == 0
    info = json.loads((tmp_path / "info" / "summary.json").read_text())
    with ReplayStore.open(rgb_store) as store:
        n_steps = sum(e.length for e in store.episodes())
        first = store.load(store.episodes()[0].id)
    assert info["episodes"] == 3 and info["steps"] == n_steps and info["steps_by_source"]["demo"] == n_steps

    hdf5 = tmp_path / "demo.hdf5"
    assert run(store_main, ["export", str(rgb_store), f"out={hdf5}", f"out_dir={tmp_path / 'exp'}"]) == 0
    with h5py.File(hdf5, "r") as f:
        assert f["data"].attrs["total"] == n_steps and len(f["data"].keys()) == 3
    back = tmp_path / "imported"
    assert run(store_main, ["import", str(hdf5), f"out={back}", f"out_dir={tmp_path / 'imp'}"]) == 0
    with ReplayStore.open(back) as store:
        again = store.load(store.episodes()[0].id)
    np.testing.assert_array_equal(again.obs["rgb"], first.obs["rgb"])
    np.testing.assert_array_equal(again.actions, first.actions)
    np.testing.assert_array_equal(again.states, first.states)


def test_store_command_rejects_unknown_verb(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert run(store_main, ["frobnicate", str(tmp_path), f"out_dir={tmp_path / 'x'}"]) == 2
    err = capsys.readouterr().err
    assert "info, export, import" in err and "frobnicate" in err


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
