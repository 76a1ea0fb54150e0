"""robomimic interop: robomimic's own SequenceDataset reads our export; export -> import round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers.store import ENV_ID, LOW_DIM, assert_episode_equals, make_episode, make_spec

from rewind.store import ReplayStore, StoreError
from rewind.store.robomimic_io import export_robomimic, import_robomimic

N = 5


@pytest.fixture()
def store(tmp_path: Path) -> ReplayStore:
    store = ReplayStore.create(tmp_path / "s", make_spec(image=True))
    for i in range(N):
        store.add_episode(**make_episode(i, image=True))
    yield store
    store.close()


def test_export_schema(store: ReplayStore, tmp_path: Path) -> None:
    names = export_robomimic(store, tmp_path / "x.hdf5", valid_fraction=0.2)
    assert names == [f"demo_{i}" for i in range(N)]
    with h5py.File(tmp_path / "x.hdf5", "r") as f:
        data = f["data"]
        assert data.attrs["total"] == sum(len(make_episode(i)["actions"]) for i in range(N))
        env_args = json.loads(data.attrs["env_args"])
        assert env_args["env_name"] == ENV_ID and env_args["type"] == 2 and env_args["env_kwargs"] == {}
        ep = make_episode(3, image=True)
        g = data["demo_3"]
        assert g.attrs["num_samples"] == len(ep["actions"])
        np.testing.assert_array_equal(g["obs/cube_pos"][()], ep["obs"]["cube_pos"])
        np.testing.assert_array_equal(g["next_obs/cube_pos"][:-1], ep["obs"]["cube_pos"][1:])
        np.testing.assert_array_equal(g["next_obs/cube_pos"][-1], ep["obs"]["cube_pos"][-1])
        np.testing.assert_array_equal(g["actions"][()], ep["actions"])
        np.testing.assert_array_equal(g["states"][()], ep["states"])
        np.testing.assert_array_equal(g["rewards"][()], ep["rewards"])
        assert g["dones"][()].tolist() == [0] * (len(ep["actions"]) - 1) + [1]
        vocab = json.loads(g["sources"].attrs["vocabulary"])
        assert [vocab[c] for c in g["sources"][()]] == ep["sources"]
        train = [n.decode() for n in f["mask/train"][()]]
        valid = [n.decode() for n in f["mask/valid"][()]]
        assert len(valid) == 1 and sorted(train + valid) == sorted(names)


def test_robomimic_sequence_dataset_reads_export(store: ReplayStore, tmp_path: Path) -> None:
    obs_utils = pytest.importorskip("robomimic.utils.obs_utils")
    from robomimic.utils.dataset import SequenceDataset

    export_robomimic(store, tmp_path / "x.hdf5", valid_fraction=0.2)
    keys = sorted(LOW_DIM)
    obs_utils.initialize_obs_utils_with_obs_specs({"obs": {"low_dim": keys}})
    for cache_mode in (None, "low_dim"):
        ds = SequenceDataset(
            hdf5_path=str(tmp_path / "x.hdf5"),
            obs_keys=keys,
            dataset_keys=("actions", "rewards", "dones"),
            frame_stack=2,
            seq_length=4,
            pad_frame_stack=True,
            pad_seq_length=True,
            hdf5_cache_mode=cache_mode,
            hdf5_use_swmr=True,
            filter_by_attribute="train",
        )
        with h5py.File(tmp_path / "x.hdf5", "r") as f:
            train = sorted((n.decode() for n in f["mask/train"][()]), key=lambda n: int(n[5:]))
        lengths = [len(make_episode(int(n[5:]))["actions"]) for n in train]
        assert len(ds) == sum(lengths)
        # window 0 of the 2nd train demo, then one in the middle of it
        demo = int(train[1][5:])
        ep = make_episode(demo, image=True)
        for t in (0, 5):
            item = ds[lengths[0] + t]
            idx = np.clip(
                np.arange(t - 1, t + 4), 0, len(ep["actions"]) - 1
            )  # frame_stack-1 before, seq after
            np.testing.assert_array_equal(item["actions"], ep["actions"][idx])
            np.testing.assert_array_equal(item["rewards"], ep["rewards"][idx])
            np.testing.assert_array_equal(item["obs"]["eef_pos"], ep["obs"]["eef_pos"][idx])
            np.testing.assert_array_equal(
                item["next_obs"]["cube_quat"][0], ep["obs"]["cube_quat"][idx[0] + 1]
            )


def test_export_import_round_trip(store: ReplayStore, tmp_path: Path) -> None:
    export_robomimic(store, tmp_path / "x.hdf5", episodes=[1, 3, 4])
    with import_robomimic(tmp_path / "x.hdf5", tmp_path / "imported") as back:
        assert back.spec == store.spec
        assert [e.id for e in back.episodes()] == [0, 1, 2]
        for new_id, old_id in enumerate([1, 3, 4]):
            assert_episode_equals(back.load(new_id), make_episode(old_id, image=True))
            assert back.info(new_id).meta() == store.info(old_id).meta()


def test_import_foreign_file_infers_spec(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with h5py.File(tmp_path / "foreign.hdf5", "w") as f:
        f.create_group("data").attrs["env_args"] = json.dumps(
            {"env_name": "Lift", "type": 1, "env_kwargs": {}}
        )
        for i, t in ((10, 7), (2, 4)):
            g = f.create_group(f"data/demo_{i}")
            g.attrs["num_samples"] = t
            g.create_dataset("obs/object", data=rng.standard_normal((t, 10)).astype(np.float32))
            g.create_dataset("actions", data=rng.standard_normal((t, 7)))
            g.create_dataset("states", data=rng.standard_normal((t, 32)))
    with import_robomimic(tmp_path / "foreign.hdf5", tmp_path / "imp", default_source="human") as st:
        assert st.spec.env_id == "Lift" and st.spec.action_dim == 7 and st.spec.state_dim == 32
        assert [e.length for e in st.episodes()] == [4, 7]  # numeric demo order
        assert st.load(0).source_names == ["human"] * 4
        np.testing.assert_array_equal(st.load(0).rewards, 0.0)


def test_import_rejects_bad_demo_and_leaves_no_store(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "bad.hdf5", "w") as f:
        f.create_group("data").attrs["env_args"] = json.dumps(
            {"env_name": "Lift", "type": 1, "env_kwargs": {}}
        )
        for i, value in ((0, 0.0), (1, np.nan)):
            g = f.create_group(f"data/demo_{i}")
            g.create_dataset("obs/object", data=np.full((3, 2), value, np.float32))
            g.create_dataset("actions", data=np.zeros((3, 2)))
            g.create_dataset("states", data=np.zeros((3, 4)))
    with pytest.raises(StoreError, match=r"data/demo_1: obs\['object'\]: contains NaN"):
        import_robomimic(tmp_path / "bad.hdf5", tmp_path / "imp")
    assert not (tmp_path / "imp").exists()
