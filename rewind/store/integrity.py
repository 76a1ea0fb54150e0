"""Content hashes of episodes: what a commit records and what every read checks.

An episode's content hash binds together its id, its metadata and every array::

    array digest  = sha256(JSON [name, dtype.str, shape] + the array's C-order bytes)
    content hash  = sha256(JSON {"episode_id", "meta", "arrays": {name: array digest}})

Array names are ``actions``, ``states``, ``rewards``, ``sources`` and ``obs/<key>``. Each dataset of
an episode file carries its digest in the ``sha256`` attribute and the file carries the content
hash in ``content_sha256``; the index row holds the content hash too. Because the content hash is
computed from the per-array digests, a reader that loads only some observation keys still checks
the whole episode's hash: it recomputes the digests of what it read and takes the others from the
file. Pure functions: no file or database access here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

#: Per-dataset attribute holding the array digest.
ARRAY_HASH_ATTR = "sha256"
#: Episode-file attribute holding the content hash.
CONTENT_HASH_ATTR = "content_sha256"


def array_digest(name: str, arr: np.ndarray) -> str:
    """sha256 (hex) of one array: its name, dtype, shape and bytes."""
    arr = np.ascontiguousarray(arr)
    h = hashlib.sha256(json.dumps([name, arr.dtype.str, list(arr.shape)]).encode())
    h.update(memoryview(arr).cast("B"))
    return h.hexdigest()


def content_digest(episode_id: int, meta: Mapping[str, Any], digests: Mapping[str, str]) -> str:
    """sha256 (hex) of an episode from its id, metadata (JSON-able) and array digests."""
    payload = {"episode_id": int(episode_id), "meta": dict(meta), "arrays": dict(digests)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def named_arrays(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Flatten ``{"obs": {key: arr}, "actions": arr, ...}`` into ``{"obs/key": arr, "actions": arr, ...}``."""
    out = {f"obs/{k}": v for k, v in arrays["obs"].items()}
    out.update({name: arrays[name] for name in ("actions", "states", "rewards", "sources") if name in arrays})
    return out


def episode_digests(arrays: Mapping[str, Any]) -> dict[str, str]:
    """Array digest of every array of an episode (keys as in :func:`named_arrays`)."""
    return {name: array_digest(name, arr) for name, arr in named_arrays(arrays).items()}
