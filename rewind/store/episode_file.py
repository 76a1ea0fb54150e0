"""One HDF5 file per episode: durable write (temp name + fsync + rename) and checked read.

Layout of ``episodes/ep_<id>.h5``::

    /obs/<key>   [T, *shape]  spec dtype (images: chunks (1, H, W, C), gzip level 1)
    /actions     [T, Da]      float32
    /states      [T, Ds]      float64
    /rewards     [T]          float32
    /sources     [T]          uint8 codes; attr "vocabulary" = JSON list of SOURCES
    attrs: schema_version, episode_id, meta (JSON of the per-episode metadata), content_sha256
    every dataset: attr sha256 (its array digest, see ``rewind.store.integrity``)

Files written before schema 2 have no hashes; they are read as "unverified".
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

from rewind.store.integrity import (
    ARRAY_HASH_ATTR,
    CONTENT_HASH_ATTR,
    array_digest,
    content_digest,
    episode_digests,
)
from rewind.store.schema import SCHEMA_VERSION, SOURCES, EpisodeInfo, StoreError, StoreSpec

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


def write_episode_file(
    root: Path, eid: int, spec: StoreSpec, arrays: dict[str, Any], meta: dict
) -> tuple[str, str]:
    """Write validated ``arrays`` durably to the final file name of episode ``eid``.

    The data goes to a temp file in the same folder, which is flushed, fsynced, renamed with
    ``os.replace`` to its final name, and the folder is fsynced. The file is *not* committed
    until its index row exists. Never replaces an existing episode file (the caller holds the
    writer lock, so nothing else creates one meanwhile).

    Returns:
        ``(relative file name, content hash)``.
    """
    folder = root / EPISODE_DIR
    rel = episode_filename(eid)
    if (root / rel).exists():
        raise StoreError(f"episode {eid}: {root / rel} already exists; refusing to overwrite it")
    digests = episode_digests(arrays)
    content = content_digest(eid, meta, digests)
    tmp = folder / f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.h5"
    try:
        with h5py.File(tmp, "w", locking=False) as f:
            _fill(f, eid, spec, arrays, meta, digests)
            f.attrs[CONTENT_HASH_ATTR] = content
            f.flush()
            fd = f.id.get_vfd_handle()
            os.fsync(fd)
        os.replace(tmp, root / rel)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)
    return rel, content


def _fill(
    f: h5py.File, eid: int, spec: StoreSpec, arrays: dict[str, Any], meta: dict, digests: dict[str, str]
) -> None:
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
    for name, digest in digests.items():
        f[name].attrs[ARRAY_HASH_ATTR] = digest


class _Bad(Exception):
    """Internal: one problem found in an episode file (turned into a StoreError naming the episode)."""


def read_episode_file(
    root: Path,
    info: EpisodeInfo,
    spec: StoreSpec,
    obs_keys: Sequence[str] | None = None,
    verify: bool = True,
) -> tuple[dict[str, Any], bool]:
    """Read committed episode ``info`` and check it against its index row and ``spec``.

    Always checks that every array read has the spec shape and dtype, ``info.length`` steps,
    finite floats and known source codes. With ``verify`` (the default) it also checks that the
    file holds this episode id and the index row's metadata, and recomputes the content hash
    (see :mod:`rewind.store.integrity`) from the arrays read plus the stored digests of the rest.

    Args:
        obs_keys: subset of observation keys to read (default: all spec keys).

    Returns:
        ``(data, verified)``: ``data`` has ``obs`` (key -> ``[T, ...]``), ``actions``, ``states``,
        ``rewards``, ``sources``; ``verified`` is False when nothing was hash-checked (``verify``
        off, or an episode written before schema 2, which carries no hash).

    Raises:
        StoreError: one line ``episode <id> (<file>): <problem>``.
    """
    keys = list(spec.obs) if obs_keys is None else list(obs_keys)
    unknown = sorted(set(keys) - set(spec.obs))
    if unknown:
        raise StoreError(f"obs_keys: unknown key(s) {unknown}; store has {sorted(spec.obs)}")
    path = root / info.file
    try:
        with h5py.File(path, "r", locking=False) as f:
            attrs = dict(f.attrs)
            data: dict[str, Any] = {"obs": {k: f["obs"][k][()] for k in keys}}
            for name in ("actions", "states", "rewards", "sources"):
                data[name] = f[name][()]
            stored = _stored_digests(f, spec) if verify else {}
        if verify:
            _check_identity(attrs, info)
        _check_layout(data, spec, info.length)
        verified = verify and _check_hashes(attrs, info, data, stored)
    except FileNotFoundError:
        raise StoreError(f"episode {info.id} ({path}): the episode file is missing") from None
    except (OSError, KeyError) as exc:
        raise StoreError(f"episode {info.id} ({path}): cannot read the episode file ({exc})") from exc
    except _Bad as exc:
        raise StoreError(f"episode {info.id} ({path}): {exc}") from None
    return data, verified


def probe_episode_file(root: Path, info: EpisodeInfo) -> str | None:
    """Cheap check of one committed episode file (attributes only, no array data).

    Returns:
        ``None`` if the file exists and holds episode ``info.id`` with a content hash,
        ``"unverified"`` if it holds the episode but has no hash (written before schema 2), else a
        one-line problem.
    """
    path = root / info.file
    try:
        with h5py.File(path, "r", locking=False) as f:
            attrs = dict(f.attrs)
        _check_identity(attrs, info)
    except FileNotFoundError:
        return "the episode file is missing"
    except (OSError, KeyError) as exc:
        return f"cannot read the episode file ({exc})"
    except _Bad as exc:
        return str(exc)
    if attrs.get(CONTENT_HASH_ATTR) is None and info.content_sha256 is None:
        return "unverified"
    return None


def _stored_digests(f: h5py.File, spec: StoreSpec) -> dict[str, str | None]:
    names = [f"obs/{k}" for k in spec.obs] + ["actions", "states", "rewards", "sources"]
    out: dict[str, str | None] = {}
    for name in names:
        value = f[name].attrs.get(ARRAY_HASH_ATTR)
        out[name] = None if value is None else str(value)
    return out


def _check_identity(attrs: dict[str, Any], info: EpisodeInfo) -> None:
    """The file must name this episode and carry the index row's metadata."""
    if "episode_id" not in attrs:
        raise _Bad("the file has no episode_id attribute (not a rewind episode file)")
    held = int(attrs["episode_id"])
    if held != info.id:
        raise _Bad(f"the file holds episode {held}, not {info.id} (episode files swapped or renamed)")
    try:
        meta = json.loads(str(attrs["meta"]))
    except (KeyError, ValueError) as exc:
        raise _Bad(f"the file's meta attribute is missing or not JSON ({exc})") from None
    if meta != info.meta():
        changed = sorted(k for k in set(meta) | set(info.meta()) if meta.get(k) != info.meta().get(k))
        raise _Bad(f"metadata {changed} in the file differ from the index row")


def _check_layout(data: dict[str, Any], spec: StoreSpec, length: int) -> None:
    """Every array read must have the spec shape and dtype, finite floats and known source codes."""
    want = {f"obs/{k}": ((length, *spec.obs[k][0]), spec.obs[k][1]) for k in data["obs"]}
    want["actions"] = ((length, spec.action_dim), "float32")
    want["states"] = ((length, spec.state_dim), "float64")
    want["rewards"] = ((length,), "float32")
    want["sources"] = ((length,), "uint8")
    arrays = {**{f"obs/{k}": v for k, v in data["obs"].items()}, **{k: data[k] for k in want if k in data}}
    for name, (shape, dtype) in want.items():
        arr = arrays[name]
        if arr.shape != shape or arr.dtype != np.dtype(dtype):
            raise _Bad(f"{name} is {arr.dtype}{list(arr.shape)}, expected {dtype}{list(shape)}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            step = int(np.argwhere(~np.isfinite(arr))[0][0])
            raise _Bad(f"{name} contains NaN or inf at step {step}")
    bad = data["sources"] >= len(SOURCES)
    if bad.any():
        raise _Bad(f"sources has unknown code {int(data['sources'][bad][0])} at step {int(np.argmax(bad))}")


def _check_hashes(
    attrs: dict[str, Any], info: EpisodeInfo, data: dict[str, Any], stored: dict[str, str | None]
) -> bool:
    """Recompute the content hash; False when the episode predates hashes (unverifiable)."""
    file_hash = attrs.get(CONTENT_HASH_ATTR)
    file_hash = None if file_hash is None else str(file_hash)
    if file_hash is None and info.content_sha256 is None:
        return False
    if file_hash is None:
        raise _Bad("the file has no content hash but its index row has one (file replaced?)")
    if info.content_sha256 is not None and file_hash != info.content_sha256:
        raise _Bad("the file's content hash differs from its index row (file replaced or swapped)")
    read = {f"obs/{k}": v for k, v in data["obs"].items()}
    read.update({k: data[k] for k in ("actions", "states", "rewards", "sources")})
    digests = dict(stored)
    for name, arr in read.items():
        digest = array_digest(name, arr)
        if stored.get(name) is None:
            raise _Bad(f"{name} has no {ARRAY_HASH_ATTR} attribute although the file has a content hash")
        if digest != stored[name]:
            raise _Bad(f"{name}: content hash mismatch (data changed after commit)")
        digests[name] = digest
    missing = sorted(k for k, v in digests.items() if v is None)
    if missing:
        raise _Bad(f"datasets {missing} have no {ARRAY_HASH_ATTR} attribute")
    if content_digest(info.id, info.meta(), digests) != file_hash:
        raise _Bad("content hash mismatch (metadata or array digests changed after commit)")
    return True
