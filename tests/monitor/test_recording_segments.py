"""A ``restore`` rewind in a real MuJoCo episode: the record is cut into segments and no training
window contains both sides of the rewind (undone steps dropped by default, kept on request)."""

import numpy as np
import pytest
import torch

from rewind.envs.registry import make_env
from rewind.monitor import MonitoredEpisode, RewindConfig
from rewind.monitor.checkpoints import CheckpointLibrary, CheckpointTracker, ReachedCheckpoint
from rewind.monitor.recording import EpisodeRecording
from rewind.store import ReplayStore, store_spec_for
from rewind.store.windows import ReplayBuffer, WindowSampler
from rewind.train.policy_api import load_policy

REWIND_AT, RUN_TO, AFTER = 10, 20, 25


@pytest.fixture(scope="module")
def rewound_store(tiny_run, tmp_path_factory):
    """One Lift episode: 20 policy steps, a restore rewind to a rewind checkpoint at step 10, 25 more."""
    env = make_env("lift")
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    dim = loaded.policy.feature_dim
    lib = CheckpointLibrary(
        ["a"], np.ones((1, dim), np.float32), np.zeros(dim, np.float32), "stage", loaded.weights_hash, [1]
    )
    tracker = CheckpointTracker(lib)
    ep = MonitoredEpisode(
        env, loaded.policy, None, tracker, RewindConfig(), generator=torch.Generator().manual_seed(0)
    )
    rec = EpisodeRecording(pre_intervention_steps=0)
    ep.on_step = rec.add
    ep.reset(2)
    while ep.step_count < REWIND_AT:
        ep.policy_step()
    obs = {k: v.copy() for k, v in ep.obs.items()}
    tracker.reached.append(ReachedCheckpoint(0, "a", ep.step_count, 1.0, env.unwrapped.snapshot(), obs))
    while ep.step_count < RUN_TO:
        ep.policy_step()
    ep.rewind(target=1, mode="restore")
    assert ep.step_count == REWIND_AT
    while ep.step_count < REWIND_AT + AFTER and not ep.done:
        ep.policy_step()
    steps = np.array([r.step for r in rec.steps])
    path = tmp_path_factory.mktemp("segments") / "store"
    with ReplayStore.create(path, store_spec_for(env)) as store:
        info = rec.commit(store, success=False, seed=2)
    env.close()
    return path, info, steps


def _window_rows(sampler: WindowSampler) -> np.ndarray:
    """``[W, H]`` buffer rows each window reads (clamped inside its unit)."""
    rows = sampler.starts[:, None] + np.arange(sampler.horizon)
    return np.clip(rows, sampler.ep_begin[:, None], sampler.ep_last[:, None])


def test_recording_marks_the_undone_steps(rewound_store) -> None:
    _, info, steps = rewound_store
    assert steps[RUN_TO - 1] == RUN_TO - 1 and steps[RUN_TO] == REWIND_AT  # the premise: time jumps back
    assert info.extra["segment_starts"] == [0, REWIND_AT, RUN_TO]
    assert info.extra["undone_segments"] == [1]


def test_no_window_crosses_the_rewind_when_undone_steps_are_kept(rewound_store) -> None:
    path, _, steps = rewound_store
    with ReplayStore.open(path) as store:
        buf = ReplayBuffer.from_store(store, undone="keep")
    assert buf.n_steps == len(steps) and list(buf.episode_ends) == [REWIND_AT, RUN_TO, len(steps)]
    eef = buf.data["obs/eef_pos"]
    np.testing.assert_array_equal(eef[RUN_TO], eef[REWIND_AT])  # the state was restored exactly...
    assert np.linalg.norm(eef[RUN_TO] - eef[RUN_TO - 1]) > 0.01  # ...and jumped away from the undone end
    rows = _window_rows(WindowSampler(buf, n_obs_steps=2, horizon=16))
    step_of_row = steps[rows]
    assert set(np.unique(np.diff(step_of_row, axis=1))) <= {0, 1}  # time only moves forward by one
    undone = (rows >= REWIND_AT) & (rows < RUN_TO)
    assert not np.any(undone.any(1) & (~undone).any(1))  # no window mixes the undone branch with others


def test_undone_steps_are_dropped_by_default(rewound_store) -> None:
    path, _, steps = rewound_store
    with ReplayStore.open(path) as store:
        buf = ReplayBuffer.from_store(store)
        full = store.load(store.episodes()[0].id)
    kept = np.r_[0:REWIND_AT, RUN_TO : len(steps)]
    np.testing.assert_array_equal(buf.data["action"], full.actions[kept])
    assert list(buf.episode_ends) == [REWIND_AT, len(kept)] and buf.episode_ids == [0, 0]
    rows = _window_rows(WindowSampler(buf, n_obs_steps=2, horizon=16))
    assert not np.any((rows < REWIND_AT).any(1) & (rows >= REWIND_AT).any(1))
