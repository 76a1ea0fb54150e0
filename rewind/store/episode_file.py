"""One HDF5 file per episode: durable write (temp name + fsync + rename) and read.

Layout of ``episodes/ep_<id>.h5``::

    /obs/<key>   [T, *shape]  spec dtype (images: chunks (1, H, W, C), gzip level 1)
    /actions     [T, Da]      float32
    /states      [T, Ds]      float64
    /rewards     [T]          float32
    /sources     [T]          uint8 codes; attr "vocabulary" = JSON list of SOURCES
    attrs: schema_version, episode_id, meta (JSON of the per-episode metadata)
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rewind.store.schema import SCHEMA_VERSION, SOURCES, StoreError, StoreSpec

EPISODE_DIR = "episodes"
TMP_PREFIX = ".tmp-"


def episode_filename(eid: int) -> str:
    """Relative path (from the store root) of committed episode ``eid``."""
    return f"{EPISODE_DIR}/ep_{eid:09d}.h5"


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_episode_file(root: Path, eid: int, spec: StoreSpec, arrays: dict[str, Any], meta: dict) -> str:
    """Write validated ``arrays`` durably to the final file name of episode ``eid``.

    The data goes to a temp file in the same folder, which is flushed, fsynced, renamed with
    ``os.replace`` to its final name, and the folder is fsynced. The file is *not* committed
    until its index row exists. Returns the relative file name.
    """
    folder = root / EPISODE_DIR
    tmp = folder / f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.h5"
    rel = episode_filename(eid)
    try:
        with h5py.File(tmp, "w", locking=False) as f:
            _fill(f, eid, spec, arrays, meta)
            f.flush()
            fd = f.id.get_vfd_handle()
            os.fsync(fd)
        os.replace(tmp, root / rel)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)
    return rel


def _fill(f: h5py.File, eid: int, spec: StoreSpec, arrays: dict[str, Any], meta: dict) -> None:
    f.attrs["schema_version"] = SCHEMA_VERSION
    f.attrs["episode_id"] = eid
    f.attrs["meta"] = json.dumps(meta, sort_keys=True)
    g = f.create_group("obs")
    for key, value in arrays["obs"].items():
        if spec.is_image(key):
            g.create_dataset(
                key, data=value, chunks=(1, *value.shape[1:]), compression="gzip", compression_opts=1
            )
        else:
            g.create_dataset(key, data=value)
    for name in ("actions", "states", "rewards", "sources"):
        f.create_dataset(name, data=arrays[name])
    f["sources"].attrs["vocabulary"] = json.dumps(list(SOURCES))


def read_episode_file(
    path: Path, spec: StoreSpec, length: int, obs_keys: Sequence[str] | None = None
) -> dict:
    """Read an episode file and check it against the index row (``length``) and ``spec``.

    Args:
        obs_keys: subset of observation keys to read (default: all spec keys).

    Returns:
        dict with ``obs`` (key -> ``[T, ...]``), ``actions``, ``states``, ``rewards``, ``sources``.

    Raises:
        StoreError: if the file is missing, unreadable or inconsistent with the index.
    """
    keys = list(spec.obs) if obs_keys is None else list(obs_keys)
    unknown = sorted(set(keys) - set(spec.obs))
    if unknown:
        raise StoreError(f"obs_keys: unknown key(s) {unknown}; store has {sorted(spec.obs)}")
    try:
        with h5py.File(path, "r", locking=False) as f:
            out = {"obs": {k: f["obs"][k][()] for k in keys}}
            for name in ("actions", "states", "rewards", "sources"):
                out[name] = f[name][()]
    except (OSError, KeyError) as exc:
        raise StoreError(f"{path}: cannot read committed episode file ({exc})") from exc
    for name, arr in [*((f"obs[{k!r}]", v) for k, v in out["obs"].items()), *out.items()]:
        if isinstance(arr, np.ndarray) and arr.shape[:1] != (length,):
            raise StoreError(f"{path}: {name} has {arr.shape[:1]} steps, index says {length}")
    return out
