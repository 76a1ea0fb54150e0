"""Checkpoint labelers on real demos, KDE templates, peak tracking, the library file."""

import numpy as np
import pytest
import torch

from rewind.envs.registry import make_env
from rewind.monitor.checkpoints import (
    CheckpointLibrary,
    CheckpointTracker,
    GripperLabeler,
    ReachedCheckpoint,
    StageLabeler,
    kde_mode,
    make_labeler,
)
from rewind.store import ReplayStore


def test_labelers_on_recorded_lift_demos(tiny_run) -> None:
    env = make_env("lift")
    with ReplayStore.open(tiny_run["store"]) as store:
        ep = store.load(store.episodes()[0].id)
    stage = StageLabeler(offset=0).label(ep, env.unwrapped)
    names = [n for _, n in stage]
    assert names[0] == "after_grasp"
    t = stage[0][0]
    env.unwrapped.set_physics_state(ep.states[t])
    assert env.unwrapped.stage() >= 1  # the grasp stage is done at the labelled step
    env.unwrapped.set_physics_state(ep.states[t - 1])
    assert env.unwrapped.stage() == 0
    grip = GripperLabeler().label(ep)
    assert grip and grip[0][1] == "grasp_0"
    assert (ep.actions[: grip[0][0], 4] < 0).any()  # the fingers were commanded closed before it
    env.close()
    with pytest.raises(KeyError, match="stage, gripper"):
        make_labeler("vlm")


def test_kde_mode_picks_the_dense_cluster() -> None:
    rng = np.random.default_rng(0)
    dense = rng.normal(0, 0.05, size=(30, 6))
    outliers = rng.normal(5, 2.0, size=(5, 6))
    x = np.concatenate([outliers, dense])
    assert kde_mode(x) >= 5


def _cp(index: int, name: str) -> ReachedCheckpoint:
    return ReachedCheckpoint(index, name, 0, 1.0, None, {})


class SnapEnv:
    def __init__(self) -> None:
        self.n = 0

    def snapshot(self) -> int:
        self.n += 1
        return self.n


def test_tracker_peak_detection_and_truncate() -> None:
    templates = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    lib = CheckpointLibrary(["a", "b"], templates, np.zeros(2, np.float32), "stage", "h", [3, 3])
    tr = CheckpointTracker(lib, min_similarity=0.8, patience=2)
    tr.reset(_cp(-1, "start"))
    env = SnapEnv()
    sims = [0.0, 0.5, 0.9, 0.99, 0.95, 0.9, 0.5]
    hits = [tr.update(torch.tensor([s, np.sqrt(1 - s * s)]), t, env, {}) for t, s in enumerate(sims)]
    reached = [h for h in hits if h is not None]
    assert len(reached) == 1 and reached[0].name == "a" and reached[0].step == 3  # the peak
    assert hits.index(reached[0]) == 5  # reported after `patience` steps without improvement
    assert tr.next_index == 1
    tr.truncate(tr.reached[0])
    assert tr.latest().name == "start" and tr.next_index == 0


def test_library_round_trip_and_corruption(tmp_path) -> None:
    lib = CheckpointLibrary(["a"], np.ones((1, 3), np.float32), np.zeros(3, np.float32), "gripper", "h", [4])
    lib.save(tmp_path)
    back = CheckpointLibrary.load(tmp_path)
    assert back.names == ["a"] and np.array_equal(back.templates, lib.templates)
    (tmp_path / "checkpoint_library.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable checkpoint library"):
        CheckpointLibrary.load(tmp_path)


def test_nearest_matching_uses_the_closest_labelled_example() -> None:
    ex = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    lib = CheckpointLibrary(["a"], ex[:1], np.zeros(2, np.float32), "stage", "h", [2], ex, np.array([0, 0]))
    feats = torch.tensor([0.6, 0.8])
    near = CheckpointTracker(lib, min_similarity=0.9, patience=1, match="nearest")
    tmpl = CheckpointTracker(lib, min_similarity=0.9, patience=1, match="template")
    for tr in (near, tmpl):
        tr.reset(_cp(-1, "start"))
        tr.update(feats, 0, SnapEnv(), {})
    assert near._best is not None and near._best[0] == pytest.approx(1.0)  # matched the second example
    assert tmpl._best is None  # cosine 0.6 with the single template: below 0.9
    with pytest.raises(ValueError, match="nearest, template"):
        CheckpointTracker(lib, match="closest")
