"""bench/rollout_profile.py: the parts it times are timed without changing what they return, and the
speedup bounds follow from the parts."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from rewind.envs.registry import make_env

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def profile():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("rollout_profile")
    finally:
        sys.path.remove(str(BENCH))


class _Chunker:
    """The one method of a policy that the profile times."""

    def predict_chunk(self, window: np.ndarray) -> np.ndarray:
        return window * 2


def test_timed_parts_count_and_restore(profile) -> None:
    timed, plain = make_env("pick_place"), make_env("pick_place")
    policy, watch = _Chunker(), profile.Stopwatch()
    actions = np.random.default_rng(0).uniform(-1, 1, (5, *timed.action_space.shape))
    timed.reset(seed=3)
    plain.reset(seed=3)
    with profile.timed_parts(watch, policy, [timed]):
        got = [timed.step(a) for a in actions]
        doubled = policy.predict_chunk(np.ones(2))
    want = [plain.step(a) for a in actions]
    for (o1, r1, *_), (o2, r2, *_) in zip(got, want, strict=True):
        assert r1 == r2 and all(np.array_equal(o1[k], o2[k]) for k in o2)
    assert watch.calls["env_step"] == 5 and watch.seconds["env_step"] > 0
    assert watch.calls["inference"] == 1 and np.array_equal(doubled, [2, 2])
    assert "step" not in vars(timed) and "predict_chunk" not in vars(policy)
    own = policy.predict_chunk  # a bound method set on the instance itself is put back, not dropped
    policy.predict_chunk = own
    with profile.timed_parts(watch, policy, []):
        assert policy.predict_chunk is not own
    assert vars(policy)["predict_chunk"] is own
    timed.close()
    plain.close()


def test_breakdown_and_bounds(profile) -> None:
    seq = profile.breakdown(10.0, {"inference": 6.0, "env_step": 2.0}, 10)
    bat = profile.breakdown(4.0, {"inference": 2.0, "env_step": 1.0}, 10)
    assert seq == {"wall": 1.0, "inference": 0.6, "env_step": 0.2, "other": 0.2}
    assert profile.bounds(seq, bat) == {
        "speedup": 2.5,
        "bound_free_inference": 5.0,
        "bound_free_inference_and_env_step": 10.0,
    }
    with pytest.raises(ValueError, match="exceed the wall time"):
        profile.breakdown(1.0, {"inference": 2.0}, 1)
