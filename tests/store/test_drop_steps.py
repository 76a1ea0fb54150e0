"""Dropped steps (``data.drop_steps_paths``): never a window's anchor, never a target; the store and the
other stores' windows are untouched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers.store import ENV_ID, make_episode, make_spec

from rewind.config import ConfigError, to_dataclass
from rewind.store import ReplayStore, StoreError
from rewind.store.windows import ReplayBuffer, WindowSampler, read_drop_steps, write_drop_steps
from rewind.train import DataConfig
from rewind.train.data import load_data

DROPPED = {0: [3, 4, 5, 6], 1: [0, 9]}


def _store(path: Path, n: int = 2) -> Path:
    with ReplayStore.create(path, make_spec()) as store:
        for i in range(n):
            ep = make_episode(i, length=12)
            store.add_episode(
                ep["obs"], ep["actions"], ep["states"], ep["sources"], ep["rewards"], ep["meta"]
            )
    return path


def test_dropped_steps_are_neither_anchors_nor_targets(tmp_path: Path) -> None:
    path = _store(tmp_path / "s")
    drop = write_drop_steps(tmp_path / "drop.json", path, DROPPED)
    assert read_drop_steps(drop) == DROPPED
    with ReplayStore.open(path) as store:
        buf = ReplayBuffer.from_store(store, drop_steps=read_drop_steps(drop))
        plain = ReplayBuffer.from_store(store)
    assert "step_weight" not in plain.data  # without drop_steps nothing changes
    expected = np.ones(24, np.float32)
    expected[[3, 4, 5, 6, 12, 21]] = 0
    np.testing.assert_array_equal(buf.data["step_weight"], expected)
    sampler = WindowSampler(buf, n_obs_steps=2, horizon=4, sample_weight_mode="sample")
    batch = sampler.get(np.arange(len(sampler)))
    anchors = batch["episode_id"] * 12 + batch["t"]  # global step of each window's anchor
    np.testing.assert_array_equal(sampler.window_sample_weights > 0, expected[anchors] > 0)
    drawn = sampler.sample(500)
    assert not np.isin(drawn["episode_id"] * 12 + drawn["t"], [3, 4, 5, 6, 12, 21]).any()
    # a kept anchor next to dropped steps: their actions are not targets
    w = int(np.flatnonzero(anchors == 2)[0])  # window of steps 1..4 of episode 0 (anchor 2)
    np.testing.assert_array_equal(batch["action_mask"][w], [True, True, False, False])
    plain_batch = WindowSampler(plain, n_obs_steps=2, horizon=4).get(np.arange(len(sampler)))
    np.testing.assert_array_equal(batch["action"], plain_batch["action"])  # same data, only masks differ


def test_load_data_masks_only_the_store_named(tmp_path: Path) -> None:
    demos, rounds = _store(tmp_path / "demos"), _store(tmp_path / "round")
    drop = write_drop_steps(tmp_path / "drop.json", rounds, DROPPED)
    cfg = to_dataclass(
        {
            "path": str(demos),
            "extra_paths": [str(rounds)],
            "mix": [0.5, 0.5],
            "val_fraction": 0.0,
            "drop_steps_paths": [None, str(drop)],
        },
        DataConfig,
    )
    data = load_data(cfg, 2, 4, 0, ENV_ID)
    demo_w, round_w = (s.window_sample_weights for s in data.train.samplers)
    assert (demo_w > 0).all() and int((round_w == 0).sum()) == 6
    concat = load_data(dataclasses.replace(cfg, mix=[]), 2, 4, 0, ENV_ID).train  # fs: stores concatenated
    np.testing.assert_array_equal(concat.window_sample_weights, np.concatenate([demo_w, round_w]))
    with pytest.raises(
        ConfigError, match=r"^data.drop_steps_paths needs one entry .* per store \(2: .*got 1$"
    ):
        to_dataclass({"path": "a", "extra_paths": ["b"], "drop_steps_paths": [str(drop)]}, DataConfig)
    with pytest.raises(StoreError, match=r"drop_steps: episode 0 has 12 steps; got step 12"):
        with ReplayStore.open(rounds) as store:
            ReplayBuffer.from_store(store, drop_steps={0: [12]})
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(StoreError, match=r"is not a file of dropped steps"):
        read_drop_steps(tmp_path / "bad.json")
