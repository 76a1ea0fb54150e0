"""Bad input is rejected with a StoreError naming the field, and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.store import assert_episode_equals, make_episode, make_spec

from rewind.store import ReplayStore, StoreError


def _nan_obs(e: dict) -> None:
    e["obs"]["cube_pos"][3, 1] = np.nan


def _inf_action(e: dict) -> None:
    e["actions"][0, 2] = np.inf


def _nan_state(e: dict) -> None:
    e["states"][-1, 0] = np.nan


def _wrong_shape(e: dict) -> None:
    e["obs"]["eef_pos"] = e["obs"]["eef_pos"][:, :2]


def _short_key(e: dict) -> None:
    e["obs"]["eef_quat"] = e["obs"]["eef_quat"][:-1]


def _short_states(e: dict) -> None:
    e["states"] = e["states"][:-1]


def _short_sources(e: dict) -> None:
    e["sources"] = e["sources"][:-1]


def _bad_source(e: dict) -> None:
    e["sources"][4] = "teleop"


def _missing_key(e: dict) -> None:
    del e["obs"]["contact"]


def _extra_key(e: dict) -> None:
    e["obs"]["velocity"] = np.zeros((len(e["actions"]), 3), np.float32)


def _int_obs(e: dict) -> None:
    e["obs"]["phase"] = np.zeros(e["obs"]["phase"].shape, np.int64)


def _float_image(e: dict) -> None:
    e["obs"]["cam"] = e["obs"]["cam"].astype(np.float32)


def _bad_meta(e: dict) -> None:
    e["meta"]["operator"] = "alice"


def _too_many_operator_steps(e: dict) -> None:
    e["meta"]["n_operator_steps"] = len(e["actions"]) + 1


def _extra_not_json(e: dict) -> None:
    e["meta"]["extra"] = {"arr": np.zeros(2)}


def _nan_reward(e: dict) -> None:
    e["rewards"][2] = np.nan


CASES: list[tuple[Callable[[dict], None], str]] = [
    (_nan_obs, r"obs\['cube_pos'\]: contains NaN or inf at step 3"),
    (_inf_action, r"actions: contains NaN or inf"),
    (_nan_state, r"states: contains NaN or inf at step \d+"),
    (_nan_reward, r"rewards: contains NaN or inf"),
    (_wrong_shape, r"obs\['eef_pos'\]: shape \(\d+, 2\) does not match expected \(\d+, 3\)"),
    (_short_key, r"obs\['eef_quat'\]: shape"),
    (_short_states, r"states: shape"),
    (_short_sources, r"sources: shape"),
    (_bad_source, r"sources\[4\]: unknown source label 'teleop'"),
    (_missing_key, r"obs: missing key\(s\) \['contact'\]"),
    (_extra_key, r"obs: unknown key\(s\) \['velocity'\]"),
    (_int_obs, r"obs\['phase'\]: dtype int64 does not match expected float32"),
    (_float_image, r"obs\['cam'\]: dtype float32 does not match expected uint8"),
    (_bad_meta, r"meta: unknown key\(s\) \['operator'\]"),
    (_too_many_operator_steps, r"meta.n_operator_steps: \d+ outside the allowed range"),
    (_extra_not_json, r"meta.extra: not JSON-serialisable"),
]


@pytest.fixture()
def store(tmp_path: Path) -> ReplayStore:
    store = ReplayStore.create(tmp_path / "s", make_spec(image=True))
    store.add_episode(**make_episode(0, image=True))
    yield store
    store.close()


def _assert_untouched(store: ReplayStore) -> None:
    assert [e.id for e in store.episodes()] == [0]
    assert sorted(p.name for p in (store.path / "episodes").iterdir()) == ["ep_000000000.h5"]
    with ReplayStore.open(store.path) as reader:
        assert len(reader) == 1
        assert_episode_equals(reader.load(0), make_episode(0, image=True))


@pytest.mark.parametrize(("mutate", "message"), CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_bulk_rejects_bad_episode(store: ReplayStore, mutate: Callable[[dict], None], message: str) -> None:
    episode = make_episode(1, image=True)
    mutate(episode)
    with pytest.raises(StoreError, match=message):
        store.add_episode(**episode)
    _assert_untouched(store)
    assert store.add_episode(**make_episode(1, image=True)).id == 1  # the store still works


def _step(e: dict[str, Any], t: int) -> dict[str, Any]:
    return {"obs": {k: v[t] for k, v in e["obs"].items()}, "action": e["actions"][t], "state": e["states"][t]}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("action", np.array([0.0, 1.0, np.nan, 0.0, 0.0]), r"actions: contains NaN or inf at step 1"),
        ("action", np.zeros(4), r"action: shape \(4,\) does not match expected \(5,\)"),
        ("state", np.full(57, np.inf), r"states: contains NaN or inf at step 1"),
        ("eef_pos", np.array([0.0, np.nan, 0.0]), r"obs\['eef_pos'\]: contains NaN or inf at step 1"),
        ("cube_quat", np.zeros(11, np.float32), r"obs\['cube_quat'\]: shape \(11,\)"),
        ("source", "teleop", r"source: unknown source label 'teleop'"),
        ("reward", float("nan"), r"reward: must be finite"),
    ],
)
def test_step_writer_rejects_bad_step(store: ReplayStore, field: str, value: Any, message: str) -> None:
    e = make_episode(1, image=True)
    with pytest.raises(StoreError, match=message), store.episode(seed=1) as ep:
        ep.add(**_step(e, 0), source="policy")
        kwargs = {**_step(e, 1), "source": "policy", "reward": 0.0}
        if field in kwargs:
            kwargs[field] = value
        else:
            kwargs["obs"][field] = value
        ep.add(**kwargs)
    _assert_untouched(store)


def test_step_writer_rejects_bad_meta_at_commit(store: ReplayStore) -> None:
    e = make_episode(1, image=True)
    with pytest.raises(StoreError, match="meta.success: must be a bool"), store.episode(seed=1) as ep:
        ep.add(**_step(e, 0), source="demo")
        ep.meta["success"] = "yes"
    _assert_untouched(store)


def test_float64_obs_is_converted_to_spec_dtype(store: ReplayStore) -> None:
    e = make_episode(1, image=True)
    e["obs"]["eef_pos"] = e["obs"]["eef_pos"].astype(np.float64)
    info = store.add_episode(**e)
    assert store.load(info.id).obs["eef_pos"].dtype == np.float32
