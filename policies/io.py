"""Policy weights on disk: ``model.safetensors`` + ``config.json`` in one folder, never pickle.

(Vocabulary: these are *policy weights*. A *rewind checkpoint* is a safe episode state; the two
are unrelated.)

``config.json``::

    {"format": "rewind-policy-weights", "format_version": 1,
     "policy_type": "diffusion",                # registry name
     "config": {...},                           # the policy's config dataclass as a dict
     "shape_meta": {"obs": {key: {"shape": [...], "dtype": "..."}}, "action_dim": Da},
     "used_obs_keys": [...],                    # keys the policy reads
     "versions": {"torch": ..., "diffusers": ..., ...},
     "weights_file": "model.safetensors", "weights_sha256": "<hex>",
     "extra": {...}}                            # caller's extra_meta (JSON-serializable)

``model.safetensors`` holds the full ``state_dict`` (network + normalizer buffers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rewind.policies.base import ActionChunkPolicy
from rewind.policies.registry import make_policy, policy_name_of
from rewind.policies.shape_meta import layout_mismatches, normalize_shape_meta

logger = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
FORMAT = "rewind-policy-weights"
FORMAT_VERSION = 1


class PolicyWeightsError(ValueError):
    """Unreadable, corrupted or incompatible policy weights; the message names the file or key."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("rewind", "torch", "diffusers", "safetensors", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _write_atomic(path: Path, write: Any) -> None:
    """``write(tmp_path)`` then rename over ``path`` (no half-written file under the final name)."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def save_policy_weights(
    policy: ActionChunkPolicy, folder: str | Path, extra_meta: Mapping[str, Any] | None = None
) -> Path:
    """Write ``folder/model.safetensors`` and ``folder/config.json`` (see the module docstring).

    ``policy`` must be registered and expose ``config`` and ``shape_meta``. Returns ``folder``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = policy_name_of(policy)
    state = {k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    weights = folder / WEIGHTS_FILE
    _write_atomic(weights, lambda p: save_file(state, str(p), metadata={"format": FORMAT}))
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy_type": name,
        "config": dataclasses.asdict(policy.config),
        "shape_meta": policy.shape_meta,
        "used_obs_keys": list(getattr(policy, "used_obs_keys", policy.shape_meta["obs"])),
        "versions": _versions(),
        "weights_file": WEIGHTS_FILE,
        "weights_sha256": _sha256(weights),
        "extra": dict(extra_meta or {}),
    }
    text = json.dumps(meta, indent=2, sort_keys=True)
    _write_atomic(folder / CONFIG_FILE, lambda p: p.write_text(text))
    logger.info("saved %s policy weights to %s (sha256 %s)", name, folder, meta["weights_sha256"][:12])
    return folder


def read_policy_meta(folder: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` of a weights folder (errors name the file)."""
    path = Path(folder) / CONFIG_FILE
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise PolicyWeightsError(f"{path}: missing (not a policy weights folder?)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyWeightsError(f"{path}: unreadable or not valid JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise PolicyWeightsError(f"{path}: not a {FORMAT} file")
    if meta.get("format_version") != FORMAT_VERSION:
        raise PolicyWeightsError(
            f"{path}: format_version {meta.get('format_version')}, this code reads {FORMAT_VERSION}"
        )
    return meta


def weights_hash(folder: str | Path) -> str:
    """sha256 (hex) of ``folder/model.safetensors``, computed from the file."""
    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise PolicyWeightsError(f"{path}: missing")
    return _sha256(path)


def _check_state(policy: ActionChunkPolicy, state: Mapping[str, torch.Tensor], path: Path) -> None:
    """Raise naming the first keys whose presence or shape differ between file and policy."""
    expected = policy.state_dict()
    problems = [f"{k}: missing from the file" for k in expected if k not in state]
    problems += [f"{k}: not in this policy" for k in state if k not in expected]
    problems += [
        f"{k}: file has shape {list(state[k].shape)}, the policy expects {list(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if problems:
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        raise PolicyWeightsError(f"{path}: weights do not fit the policy: " + "; ".join(problems[:5]) + more)


def load_policy_weights(
    folder: str | Path, device: str | torch.device = "cpu", expect_shape_meta: Mapping[str, Any] | None = None
) -> ActionChunkPolicy:
    """Rebuild a saved policy (registry + config), load its weights on ``device``, set eval mode.

    ``expect_shape_meta``: the layout the caller will feed (e.g. the env's); a difference on a key
    the policy uses, or in ``action_dim``, raises :class:`PolicyWeightsError` naming the key and
    both shapes. A missing/corrupted file (sha256 mismatch, bad safetensors) raises naming it.
    """
    folder = Path(folder)
    meta = read_policy_meta(folder)
    path = folder / meta.get("weights_file", WEIGHTS_FILE)
    if not path.is_file():
        raise PolicyWeightsError(f"{path}: missing")
    if _sha256(path) != meta.get("weights_sha256"):
        raise PolicyWeightsError(f"{path}: corrupted (sha256 differs from {folder / CONFIG_FILE})")
    saved_meta = normalize_shape_meta(meta["shape_meta"])
    if expect_shape_meta is not None:
        used = list(meta.get("used_obs_keys", saved_meta["obs"]))
        problems = layout_mismatches(saved_meta, normalize_shape_meta(expect_shape_meta), used)
        if problems:
            raise PolicyWeightsError(f"{folder}: weights made for another layout: " + "; ".join(problems))
    policy = make_policy(meta["policy_type"], meta["config"], saved_meta)
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise PolicyWeightsError(f"{path}: unreadable safetensors ({exc})") from exc
    _check_state(policy, state, path)
    policy.load_state_dict(state, strict=True)
    logger.info("loaded %s policy weights from %s", meta["policy_type"], folder)
    return policy.to(device).eval()
