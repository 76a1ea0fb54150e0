"""rewind.loop.obs_range: a round's trained-on steps measured against the kept normalizer: steps far
outside are counted per key and warned about, steps of zero weight are not counted."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from rewind.loop.obs_range import round_obs_range, store_arrays
from rewind.store import ReplayStore
from rewind.train.policy_api import resolve_weights


def _round_store(tiny_run: dict[str, Path], path: Path, shift: float) -> tuple[str, int]:
    """A round store holding the tiny run's first demo twice: labelled ``policy`` as it is, and labelled
    ``correction`` with one low-dim key shifted by ``shift``; returns that key and the episode length."""
    with ReplayStore.open(tiny_run["store"]) as demos:
        spec, ep = demos.spec, demos.load(demos.episodes()[0].id)
    key = sorted(k for k, v in ep.obs.items() if v.ndim == 2)[0]
    moved = {k: (v + shift).astype(v.dtype) if k == key else v for k, v in ep.obs.items()}
    n = len(ep.actions)
    with ReplayStore.create(path, spec) as store:
        store.add_episode(ep.obs, ep.actions, ep.states, ["policy"] * n)
        store.add_episode(moved, ep.actions, ep.states, ["correction"] * n)
    return key, n


def test_out_of_range_corrections_are_counted_and_warned(
    tiny_run: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key, n = _round_store(tiny_run, tmp_path / "r1", shift=10.0)
    weights = resolve_weights(str(tiny_run["train"]))
    weights_zero = {"policy": 0.0, "pre_intervention": 0.0, "recovery": 0.0}
    with caplog.at_level(logging.WARNING, logger="rewind.loop.obs_range"):
        rec = round_obs_range(weights, {1: tmp_path / "r1"}, weights_zero, 1)
    assert rec["steps"] == n and "policy" not in rec["labels"]  # the policy's steps weigh 0
    assert rec["keys"][f"obs/{key}"]["frac_over"] == 1.0 and rec["keys"][f"obs/{key}"]["max_abs"] > 1.5
    assert f"round 1: 100% of the trained-on steps have obs/{key}" in caplog.text
    assert store_arrays(tmp_path / "r1", ["policy"])["action"].shape[0] == n


def test_in_range_corrections_report_no_key(tiny_run: dict[str, Path], tmp_path: Path) -> None:
    _round_store(tiny_run, tmp_path / "r1", shift=0.0)
    weights = resolve_weights(str(tiny_run["train"]))
    rec = round_obs_range(weights, {1: tmp_path / "r1"}, {}, 1)
    assert rec["keys"] == {} and rec["steps"] == 2 * len(store_arrays(tmp_path / "r1", ["policy"])["action"])
    with pytest.raises(ValueError, match="unknown step label"):
        store_arrays(tmp_path / "r1", ["nope"])
    assert np.isfinite(rec["threshold"])
