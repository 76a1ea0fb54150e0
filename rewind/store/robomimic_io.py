"""robomimic HDF5 interop: export a store to the robomimic dataset schema and import one back.

Exported layout (the schema robomimic's ``SequenceDataset`` reads)::

    data.attrs["total"]       total number of samples
    data.attrs["env_args"]    JSON {"env_name": env_id, "type": env_type, "env_kwargs": {...}}
    data/demo_<i>/obs/<key>        [T, ...]
    data/demo_<i>/next_obs/<key>   [T, ...]  obs shifted by one; the last step repeats obs[T-1]
    data/demo_<i>/actions          [T, Da] float32
    data/demo_<i>/states           [T, Ds] float64
    data/demo_<i>/rewards          [T] float32
    data/demo_<i>/dones            [T] int64, 1 on the last step only
    data/demo_<i>/sources          [T] uint8 codes (rewind extra; attr "vocabulary")
    data/demo_<i>.attrs            num_samples, rewind_meta (JSON per-episode metadata)
    mask/train, mask/valid         byte-string demo names

rewind adds ``data.attrs["rewind_spec"]`` (the store spec as JSON) so import is lossless; files
from other tools import without it (the spec is inferred from ``demo`` 0).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rewind.store import index as idx
from rewind.store.episode_file import EPISODE_DIR, fsync_dir
from rewind.store.schema import SOURCES, EpisodeInfo, StoreError, StoreSpec, source_code
from rewind.store.store import ReplayStore

logger = logging.getLogger(__name__)

#: robomimic's EnvType.GYM_TYPE (rewind envs are gymnasium envs).
GYM_ENV_TYPE = 2


def export_robomimic(
    store: ReplayStore,
    h5_path: str | os.PathLike,
    episodes: Iterable[int | EpisodeInfo] | None = None,
    valid_fraction: float = 0.1,
    split_seed: int = 0,
    env_type: int = GYM_ENV_TYPE,
    env_kwargs: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> list[str]:
    """Write ``episodes`` (default: all committed) of ``store`` to a robomimic HDF5 file.

    Args:
        valid_fraction: share of demos listed in ``mask/valid`` (the rest in ``mask/train``),
            chosen with ``np.random.default_rng(split_seed)``.
        env_type, env_kwargs: written into ``data.attrs["env_args"]``.
        overwrite: replace an existing file at ``h5_path`` (refused by default).

    Every episode is loaded with full verification (shapes, dtypes, finiteness, content hash)
    before it is written. The file is written under a hidden temp name in the target folder,
    fsynced and renamed into place only when complete, so a failed or killed export never leaves
    a partial file at ``h5_path`` (a killed one may leave ``.<name>.tmp-*`` beside it).

    Returns:
        The demo names written, ``demo_0 ..`` in store order.

    Raises:
        StoreError: if the target exists (without ``overwrite``), is a folder or lies inside a
            replay store, or an episode fails verification (the target is then untouched).
    """
    target = Path(h5_path)
    _check_target(target, overwrite)
    if not 0.0 <= valid_fraction < 1.0:
        raise StoreError(f"valid_fraction: must be in [0, 1), got {valid_fraction}")
    chosen = store.episodes() if episodes is None else list(episodes)
    ids = [e.id if isinstance(e, EpisodeInfo) else int(e) for e in chosen]
    if not ids:
        raise StoreError("episodes: nothing to export")
    names = [f"demo_{i}" for i in range(len(ids))]
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        with h5py.File(tmp, "w", locking=False) as f:
            data = f.create_group("data")
            total = sum(
                _write_demo(data, name, store.load(eid)) for name, eid in zip(names, ids, strict=True)
            )
            data.attrs["total"] = total
            env_args = {"env_name": store.spec.env_id, "type": env_type, "env_kwargs": env_kwargs or {}}
            data.attrs["env_args"] = json.dumps(env_args)
            data.attrs["rewind_spec"] = store.spec.to_json()
            _write_masks(f, names, valid_fraction, split_seed)
            f.flush()
            os.fsync(f.id.get_vfd_handle())
        _publish(tmp, target, overwrite)
    finally:
        tmp.unlink(missing_ok=True)
    logger.info("exported %d episodes (%d steps) to %s", len(ids), total, target)
    return names


def _check_target(target: Path, overwrite: bool) -> None:
    """Refuse a folder, a path inside a replay store, or (without ``overwrite``) an existing file."""
    if target.is_dir():
        raise StoreError(f"out: {target} is a folder; give a file name such as {target / 'export.hdf5'}")
    for folder in target.resolve().parents:
        if (folder / idx.INDEX_NAME).is_file() and (folder / EPISODE_DIR).is_dir():
            raise StoreError(f"out: {target} is inside the replay store {folder}; export outside it")
    if target.exists() and not overwrite:
        raise StoreError(f"out: {target} already exists; pass overwrite=true to replace it")
    if not target.parent.is_dir():
        raise StoreError(f"out: folder {target.parent} does not exist")


def _publish(tmp: Path, target: Path, overwrite: bool) -> None:
    """Rename the finished ``tmp`` to ``target``; without ``overwrite`` never replace a file that
    appeared meanwhile (a hard link fails atomically if the name exists)."""
    if overwrite:
        os.replace(tmp, target)
    else:
        try:
            os.link(tmp, target)
        except FileExistsError as exc:
            raise StoreError(f"out: {target} already exists; pass overwrite=true to replace it") from exc
        except OSError:  # no hard links on this file system: check, then rename
            if target.exists():
                raise StoreError(f"out: {target} already exists; pass overwrite=true to replace it") from None
            os.replace(tmp, target)
    fsync_dir(target.parent)


def _write_demo(data: h5py.Group, name: str, ep: Any) -> int:
    g = data.create_group(name)
    length = len(ep.actions)
    for key, value in ep.obs.items():
        g.create_dataset(f"obs/{key}", data=value)
        g.create_dataset(f"next_obs/{key}", data=np.concatenate([value[1:], value[-1:]]))
    g.create_dataset("actions", data=ep.actions)
    g.create_dataset("states", data=ep.states)
    g.create_dataset("rewards", data=ep.rewards)
    dones = np.zeros(length, np.int64)
    dones[-1] = 1
    g.create_dataset("dones", data=dones)
    g.create_dataset("sources", data=ep.sources)
    g["sources"].attrs["vocabulary"] = json.dumps(list(SOURCES))
    g.attrs["num_samples"] = length
    g.attrs["rewind_meta"] = json.dumps({**ep.info.meta(), "episode_id": ep.info.id}, sort_keys=True)
    return length


def _write_masks(f: h5py.File, names: list[str], valid_fraction: float, split_seed: int) -> None:
    n_valid = int(round(valid_fraction * len(names)))
    order = np.random.default_rng(split_seed).permutation(len(names))
    valid = set(order[:n_valid].tolist())
    train_names = [n for i, n in enumerate(names) if i not in valid]
    valid_names = [n for i, n in enumerate(names) if i in valid]
    f.create_dataset("mask/train", data=np.array(train_names, dtype="S"))
    f.create_dataset("mask/valid", data=np.array(valid_names, dtype="S"))


def import_robomimic(
    h5_path: str | os.PathLike,
    store_path: str | os.PathLike,
    obs_keys: Sequence[str] | None = None,
    default_source: str = "demo",
    policy_version: str = "robomimic",
) -> ReplayStore:
    """Read a robomimic HDF5 file into a new store at ``store_path`` (opened for appending).

    Args:
        obs_keys: observation keys to import (default: all keys of the first demo).
        default_source: source label of every step when the file has no ``sources`` dataset.
        policy_version: ``policy_version`` of episodes without rewind metadata.

    Demos are imported in numeric order (``demo_2`` before ``demo_10``). Raises :class:`StoreError`
    when the file lacks the robomimic layout or a demo does not match the first one; then no
    store is left at ``store_path``.
    """
    source_code(default_source, "default_source")
    with h5py.File(h5_path, "r", locking=False) as f:
        if "data" not in f or not len(f["data"]):
            raise StoreError(f"{h5_path}: no 'data' group with demos (not a robomimic file)")
        data = f["data"]
        names = sorted(data.keys(), key=_demo_number)
        spec = _read_spec(data, names[0], obs_keys)
        store = ReplayStore.create(store_path, spec)
        try:
            for name in names:
                _import_demo(store, data[name], name, default_source, policy_version)
        except BaseException:
            store.close()
            shutil.rmtree(store_path, ignore_errors=True)
            raise
    logger.info("imported %d demos from %s into %s", len(names), h5_path, store_path)
    return store


def _demo_number(name: str) -> int:
    try:
        return int(name.rsplit("_", 1)[1])
    except (IndexError, ValueError) as exc:
        raise StoreError(f"data/{name}: demo names must look like 'demo_<int>'") from exc


def _read_spec(data: h5py.Group, first: str, obs_keys: Sequence[str] | None) -> StoreSpec:
    if "rewind_spec" in data.attrs and obs_keys is None:
        return StoreSpec.from_json(str(data.attrs["rewind_spec"]))
    try:
        env_name = json.loads(str(data.attrs["env_args"]))["env_name"]
        demo = data[first]
        keys = list(demo["obs"].keys()) if obs_keys is None else list(obs_keys)
        obs = {k: (demo["obs"][k].shape[1:], demo["obs"][k].dtype.name) for k in keys}
        return StoreSpec(
            obs=obs, action_dim=demo["actions"].shape[1], state_dim=demo["states"].shape[1], env_id=env_name
        )
    except (KeyError, ValueError, IndexError) as exc:
        raise StoreError(f"data/{first}: cannot infer the store spec ({exc})") from exc


def _import_demo(
    store: ReplayStore, g: h5py.Group, name: str, default_source: str, policy_version: str
) -> None:
    length = int(g.attrs.get("num_samples", g["actions"].shape[0]))
    meta: dict[str, Any] = {"policy_version": policy_version}
    if "rewind_meta" in g.attrs:
        meta = json.loads(str(g.attrs["rewind_meta"]))
        meta.pop("episode_id", None)
    if "sources" in g:
        sources = g["sources"][()]
        vocab = json.loads(str(g["sources"].attrs.get("vocabulary", json.dumps(list(SOURCES)))))
        sources = [vocab[c] if 0 <= c < len(vocab) else int(c) for c in sources.tolist()]
    else:
        sources = [default_source] * length
    rewards = g["rewards"][()] if "rewards" in g else np.zeros(length, np.float32)
    try:
        store.add_episode(
            obs={k: g["obs"][k][()] for k in store.spec.obs},
            actions=g["actions"][()],
            states=g["states"][()],
            sources=sources,
            rewards=rewards,
            meta=meta,
        )
    except KeyError as exc:
        raise StoreError(f"data/{name}: missing dataset ({exc})") from exc
    except StoreError as exc:
        raise StoreError(f"data/{name}: {exc}") from exc
