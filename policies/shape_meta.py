"""``shape_meta``: the observation/action layout a policy is built for (JSON-friendly).

Layout (the same information as :class:`rewind.store.StoreSpec`)::

    {"obs": {"eef_pos": {"shape": [3], "dtype": "float32"},
             "rgb": {"shape": [96, 96, 3], "dtype": "uint8"}},
     "action_dim": 5}

A key is an **image** when its dtype is ``uint8`` and its per-step shape is ``[H, W, C]``;
every other key is **low-dim** (a vector ``[D]``; higher ranks are flattened by the encoder).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ShapeMeta = dict[str, Any]


def shape_meta_from_spec(spec: Any) -> ShapeMeta:
    """``shape_meta`` of a :class:`rewind.store.StoreSpec` (``spec.obs``: key -> (shape, dtype))."""
    obs = {
        k: {"shape": [int(d) for d in shape], "dtype": str(dtype)} for k, (shape, dtype) in spec.obs.items()
    }
    return {"obs": obs, "action_dim": int(spec.action_dim)}


def normalize_shape_meta(meta: Mapping[str, Any]) -> ShapeMeta:
    """Validated copy with plain lists/ints/strs; raises ``ValueError`` naming the bad entry."""
    if not isinstance(meta, Mapping) or "obs" not in meta or "action_dim" not in meta:
        raise ValueError(f"shape_meta must have 'obs' and 'action_dim'; got {meta!r}")
    obs = {}
    for key, entry in meta["obs"].items():
        try:
            obs[str(key)] = {
                "shape": [int(d) for d in entry["shape"]],
                "dtype": str(entry.get("dtype", "float32")),
            }
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(
                f"shape_meta['obs'][{key!r}] must be {{'shape': [...], 'dtype': str}}; got {entry!r}"
            ) from exc
    action_dim = int(meta["action_dim"])
    if action_dim < 1:
        raise ValueError(f"shape_meta['action_dim'] must be >= 1; got {action_dim}")
    return {"obs": obs, "action_dim": action_dim}


def is_image(entry: Mapping[str, Any]) -> bool:
    """True for a uint8 ``[H, W, C]`` entry of ``shape_meta['obs']``."""
    return entry["dtype"] == "uint8" and len(entry["shape"]) == 3


def low_dim_keys(meta: Mapping[str, Any]) -> list[str]:
    """Obs keys of ``meta`` that are not images, in insertion order."""
    return [k for k, e in meta["obs"].items() if not is_image(e)]


def layout_mismatches(
    saved: Mapping[str, Any], expected: Mapping[str, Any], used_keys: list[str]
) -> list[str]:
    """Human-readable differences between two layouts on the keys a policy uses (+ action_dim)."""
    problems = []
    if int(saved["action_dim"]) != int(expected["action_dim"]):
        problems.append(f"action_dim: weights have {saved['action_dim']}, expected {expected['action_dim']}")
    for key in used_keys:
        have = saved["obs"][key]
        want = expected["obs"].get(key)
        if want is None:
            problems.append(f"obs key {key!r}: used by the weights but missing from the expected layout")
        elif list(have["shape"]) != list(want["shape"]) or have["dtype"] != want["dtype"]:
            problems.append(
                f"obs key {key!r}: weights have shape {list(have['shape'])} {have['dtype']}, "
                f"expected {list(want['shape'])} {want['dtype']}"
            )
    return problems
