"""Store lifecycle, both write APIs, queries, summary and open-time errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from helpers.store import ENV_ID, LOW_DIM, assert_episode_equals, make_episode, make_spec

from rewind.store import (
    SCHEMA_VERSION,
    SOURCES,
    ReplayStore,
    StoreError,
    StoreSpec,
    format_store_info,
    store_info,
)


def _fill(path: Path, n: int, image: bool = False) -> ReplayStore:
    store = ReplayStore.create(path, make_spec(image))
    for i in range(n):
        store.add_episode(**make_episode(i, image))
    return store


def test_bulk_round_trip_with_images(tmp_path: Path) -> None:
    with _fill(tmp_path / "s", 4, image=True) as store:
        assert len(store) == 4
        for i in range(4):
            assert_episode_equals(store.load(i), make_episode(i, image=True))
    with ReplayStore.open(tmp_path / "s") as reader:
        ep = reader.load(3, obs_keys=["cam"])
        assert list(ep.obs) == ["cam"] and ep.obs["cam"].dtype == np.uint8
        np.testing.assert_array_equal(ep.obs["cam"], make_episode(3, image=True)["obs"]["cam"])


def test_step_writer_commits_on_clean_exit(tmp_path: Path) -> None:
    expected = make_episode(7)
    with ReplayStore.create(tmp_path / "s", make_spec()) as store:
        with store.episode(seed=7, policy_version="v1", round=1) as ep:
            for t in range(len(expected["actions"])):
                obs = {k: v[t] for k, v in expected["obs"].items()}
                ep.add(
                    obs=obs,
                    action=expected["actions"][t],
                    state=expected["states"][t],
                    source=expected["sources"][t],
                    reward=float(expected["rewards"][t]),
                )
            ep.meta.update(success=True, n_operator_steps=3, extra={"events": [1, 2]})
            assert len(ep) == len(expected["actions"])
        assert ep.info is not None and ep.info.id == 0
        loaded = store.load(0)
        expected["meta"] = {
            "seed": 7,
            "policy_version": "v1",
            "round": 1,
            "success": True,
            "n_operator_steps": 3,
            "extra": {"events": [1, 2]},
            "env_id": ENV_ID,
        }
        assert_episode_equals(loaded, expected)


def test_step_writer_discards_on_exception_and_explicitly(tmp_path: Path) -> None:
    ep0 = make_episode(0)
    step = {
        "obs": {k: v[0] for k, v in ep0["obs"].items()},
        "action": ep0["actions"][0],
        "state": ep0["states"][0],
    }
    with ReplayStore.create(tmp_path / "s", make_spec()) as store:
        with pytest.raises(RuntimeError, match="boom"), store.episode(seed=1) as ep:
            ep.add(**step, source="policy")
            raise RuntimeError("boom")
        writer = store.episode(seed=2)
        writer.add(**step, source="policy")
        writer.discard()
        with pytest.raises(StoreError, match="already committed or discarded"):
            writer.add(**step, source="policy")
        with pytest.raises(StoreError, match="no steps"), store.episode(seed=3):
            pass
        assert len(store) == 0
        assert sorted(p.name for p in (tmp_path / "s" / "episodes").iterdir()) == []


def test_queries_and_summary(tmp_path: Path) -> None:
    eps = [make_episode(i) for i in range(6)]
    with _fill(tmp_path / "s", 6) as store:
        assert store.episodes(success=np.bool_(True)) == store.episodes(success=True)
        assert [e.id for e in store.episodes(success=True)] == [
            i for i in range(6) if eps[i]["meta"]["success"]
        ]
        assert [e.id for e in store.episodes(success=False)] == [
            i for i in range(6) if not eps[i]["meta"]["success"]
        ]
        assert [e.id for e in store.episodes(source="recovery")] == [
            i for i in range(6) if "recovery" in eps[i]["sources"]
        ]
        with pytest.raises(StoreError, match="unknown source label 'bogus'"):
            store.episodes(source="bogus")
        summary = store.summary()
    all_sources = [s for e in eps for s in e["sources"]]
    assert summary["episodes"] == 6
    assert summary["steps"] == len(all_sources)
    assert summary["steps_by_source"] == {s: all_sources.count(s) for s in SOURCES}
    assert summary["successes"] == sum(e["meta"]["success"] for e in eps)
    assert summary["success_rate"] == pytest.approx(summary["successes"] / 6)
    assert summary["n_operator_steps"] == sum(e["meta"]["n_operator_steps"] for e in eps)
    assert summary["per_env"] == {
        ENV_ID: {"episodes": 6, "steps": len(all_sources), "successes": summary["successes"]}
    }
    info = store_info(tmp_path / "s")
    assert info["schema_version"] == SCHEMA_VERSION and info["episodes"] == 6
    assert json.loads(json.dumps(info)) == info
    text = format_store_info(info)
    assert f"episodes    6\nsteps       {len(all_sources)}" in text and "recovery" in text


def test_create_refuses_existing_and_open_reports_missing(tmp_path: Path) -> None:
    _fill(tmp_path / "s", 1).close()
    with pytest.raises(StoreError, match="already exists"):
        ReplayStore.create(tmp_path / "s", make_spec())
    with pytest.raises(StoreError, match="folder missing"):
        ReplayStore.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="not a replay store"):
        ReplayStore.open(tmp_path / "empty")


def test_open_rejects_corrupt_index_and_other_schema_version(tmp_path: Path) -> None:
    _fill(tmp_path / "s", 1).close()
    conn = sqlite3.connect(tmp_path / "s" / "index.sqlite")
    conn.execute("UPDATE store_meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema_version is '999'"):
        ReplayStore.open(tmp_path / "s")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "episodes").mkdir()
    (tmp_path / "bad" / "index.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="corrupt or foreign index"):
        ReplayStore.open(tmp_path / "bad", mode="a")


def test_open_or_create_checks_spec(tmp_path: Path) -> None:
    ReplayStore.open_or_create(tmp_path / "s", make_spec()).close()
    with ReplayStore.open_or_create(tmp_path / "s", make_spec()) as store:
        assert store.mode == "a"
    other = StoreSpec(
        obs={**{k: (s, "float32") for k, s in LOW_DIM.items()}, "eef_pos": ((4,), "float32")},
        action_dim=5,
        state_dim=57,
        env_id=ENV_ID,
    )
    with pytest.raises(StoreError, match=r"obs\['eef_pos'\]: store has \(\(3,\), 'float32'\)"):
        ReplayStore.open_or_create(tmp_path / "s", other)


def test_read_only_and_single_writer(tmp_path: Path) -> None:
    writer = _fill(tmp_path / "s", 1)
    with pytest.raises(StoreError, match="already has .* open for writing"):
        ReplayStore.open(tmp_path / "s", mode="a")
    with ReplayStore.open(tmp_path / "s", mode="r") as reader:
        with pytest.raises(StoreError, match="read-only"):
            reader.add_episode(**make_episode(1))
        with pytest.raises(StoreError, match="read-only"):
            reader.episode()
        with pytest.raises(StoreError, match="no committed episode 5"):
            reader.load(5)
    writer.close()
    ReplayStore.open(tmp_path / "s", mode="a").close()  # lock released on close


def test_spec_validation() -> None:
    with pytest.raises(StoreError, match=r"spec.obs\['a/b'\]|invalid key 'a/b'"):
        StoreSpec(obs={"a/b": ((3,), "float32")}, action_dim=5, state_dim=3, env_id="e")
    with pytest.raises(StoreError, match=r"spec.obs\['x'\]: dtype complex64"):
        StoreSpec(obs={"x": ((3,), "complex64")}, action_dim=5, state_dim=3, env_id="e")
    with pytest.raises(StoreError, match="spec.action_dim"):
        StoreSpec(obs={"x": ((3,), "float32")}, action_dim=0, state_dim=3, env_id="e")
    spec = make_spec(image=True)
    assert (
        StoreSpec.from_json(spec.to_json()) == spec and spec.is_image("cam") and not spec.is_image("eef_pos")
    )
    assert hash(StoreSpec.from_json(spec.to_json())) == hash(spec) and make_spec() != spec


def test_step_writer_copies_caller_buffers(tmp_path: Path) -> None:
    """Envs often reuse their observation arrays in place; the writer must not alias them."""
    spec = make_spec()
    obs = {k: np.zeros(s, np.float32) for k, (s, _) in spec.obs.items()}
    action, state = np.zeros(5, np.float32), np.zeros(57)
    with ReplayStore.create(tmp_path / "s", spec) as store:
        with store.episode(seed=0) as ep:
            for t in range(3):
                for buf in (*obs.values(), action, state):
                    buf[...] = t
                ep.add(obs, action, state, source="policy")
        loaded = store.load(0)
    np.testing.assert_array_equal(loaded.obs["cube_pos"][:, 0], [0, 1, 2])
    np.testing.assert_array_equal(loaded.actions[:, 0], [0, 1, 2])
    np.testing.assert_array_equal(loaded.states[:, -1], [0, 1, 2])
