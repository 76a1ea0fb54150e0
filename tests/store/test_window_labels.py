"""Windows and label boundaries: a window anchored on an intervention supervises only that
intervention's actions; segment metadata in ``extra`` is validated."""

from __future__ import annotations

import numpy as np
import pytest

from rewind.store import SOURCE_CODES, StoreError
from rewind.store.windows import ReplayBuffer, WindowSampler, episode_segments

LABELS = ["policy"] * 6 + ["recovery"] * 2 + ["correction"] * 3 + ["policy"] * 9


def _buffer() -> ReplayBuffer:
    n = len(LABELS)
    data = {
        "obs/pos": np.arange(n, dtype=np.float32)[:, None],
        "action": np.arange(n, dtype=np.float32)[:, None].repeat(5, 1),
        "source": np.array([SOURCE_CODES[lbl] for lbl in LABELS], np.uint8),
        "reward": np.zeros(n, np.float32),
    }
    return ReplayBuffer(data, np.array([n]), [0])


def _by_anchor(sampler: WindowSampler) -> dict[int, dict[str, np.ndarray]]:
    batch = sampler.get(np.arange(len(sampler)))
    return {
        int(t): {k: batch[k][i] for k in ("action", "action_mask", "source")}
        for i, t in enumerate(batch["t"])
    }


def test_intervention_windows_stop_at_the_hand_back() -> None:
    windows = _by_anchor(WindowSampler(_buffer(), n_obs_steps=2, horizon=8, source_boundaries="respect"))
    inter = {SOURCE_CODES[x] for x in ("recovery", "correction")}
    for t in range(6, 11):  # anchored on recovery / correction steps
        w = windows[t]
        steps = w["action"][:, 0].astype(int)
        np.testing.assert_array_equal(w["action_mask"], [s in range(6, 11) for s in steps])
        assert all(s in inter for s in w["source"][w["action_mask"]])
    w = windows[9]
    assert w["action_mask"].sum() == 3  # steps 8, 9, 10: the policy's steps 11.. after the hand-back are out


def test_policy_windows_may_run_into_an_intervention() -> None:
    windows = _by_anchor(WindowSampler(_buffer(), n_obs_steps=2, horizon=8, source_boundaries="respect"))
    w = windows[4]  # policy steps 3..5, then the operator's 6..10: all of them are targets
    np.testing.assert_array_equal(w["action"][:, 0], np.arange(3, 11))
    assert w["action_mask"].all()


def test_ignore_mode_supervises_every_step() -> None:
    windows = _by_anchor(WindowSampler(_buffer(), n_obs_steps=2, horizon=8, source_boundaries="ignore"))
    assert windows[9]["action_mask"].all()
    with pytest.raises(StoreError, match=r"source_boundaries: must be one of \['respect', 'ignore'\]"):
        WindowSampler(_buffer(), source_boundaries="sometimes")


@pytest.mark.parametrize(
    "extra",
    [
        {"segment_starts": [3, 5]},
        {"segment_starts": [0, 5, 5]},
        {"segment_starts": [0, 40]},
        {"segment_starts": [0, 5], "undone_segments": [2]},
        {"segment_starts": "0,5"},
    ],
)
def test_malformed_segments_name_the_episode(extra) -> None:
    with pytest.raises(StoreError, match="episode 7: extra.segment_starts"):
        episode_segments(20, extra, 7)


def test_segments_default_to_the_whole_episode() -> None:
    assert episode_segments(20, {}) == [(0, 20, False)]
    assert episode_segments(20, {"segment_starts": [0, 4, 9], "undone_segments": [1]}) == [
        (0, 4, False),
        (4, 9, True),
        (9, 20, False),
    ]


def test_default_keeps_every_in_unit_step() -> None:
    """Until the loop is re-measured with ``respect``, the default supervises every step (as before)."""
    from rewind.train.config import DataConfig

    assert DataConfig(path="x").source_boundaries == "ignore"
    assert _by_anchor(WindowSampler(_buffer(), n_obs_steps=2, horizon=8))[9]["action_mask"].all()
