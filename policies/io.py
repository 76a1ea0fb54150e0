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

Loading trusts nothing in the folder: :func:`read_policy_meta` checks every field of ``config.json``
(types, a registered ``policy_type``, a config the policy's dataclass accepts, a well-formed
``shape_meta``) and that ``weights_file`` names a file inside the folder (no absolute path, no ``..``,
no symlink leading out) before anything else is opened; :func:`load_policy_weights` then checks the
sha256, compares the tensor shapes in the file's header with a policy built on the ``meta`` device
(no memory is allocated for a layout the file does not hold) and refuses non-finite values. Every
failure is one :class:`PolicyWeightsError` naming the file and the problem.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from rewind.policies.base import ActionChunkPolicy
from rewind.policies.registry import POLICIES, get_policy_classes, make_config, make_policy, policy_name_of
from rewind.policies.shape_meta import layout_mismatches, normalize_shape_meta
from rewind.utils.io import file_sha256

logger = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
FORMAT = "rewind-policy-weights"
FORMAT_VERSION = 1


class PolicyWeightsError(ValueError):
    """Unreadable, corrupted or incompatible policy weights; the message names the file or key."""


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
        "weights_sha256": file_sha256(weights),
        "extra": dict(extra_meta or {}),
    }
    text = json.dumps(meta, indent=2, sort_keys=True)
    _write_atomic(folder / CONFIG_FILE, lambda p: p.write_text(text))
    logger.info("saved %s policy weights to %s (sha256 %s)", name, folder, meta["weights_sha256"][:12])
    return folder


def read_policy_meta(folder: str | Path) -> dict[str, Any]:
    """The parsed and checked ``config.json`` of a weights folder (see :func:`check_policy_meta`).

    Raises:
        PolicyWeightsError: the file is missing, unreadable, not JSON, or a field is invalid (named).
    """
    folder = Path(folder)
    path = folder / CONFIG_FILE
    try:
        inside_folder(folder, CONFIG_FILE, f"{path}: the file")
        meta = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise PolicyWeightsError(f"{path}: missing (not a policy weights folder?)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyWeightsError(f"{path}: unreadable or not valid JSON ({exc})") from exc
    check_policy_meta(meta, folder)
    return meta


def check_policy_meta(meta: Any, folder: Path) -> None:
    """Check every field of a parsed ``config.json`` of ``folder`` without opening any other file.

    Raises:
        PolicyWeightsError: ``<folder>/config.json: <field>: <problem>`` for the first invalid field.
    """
    path = folder / CONFIG_FILE

    def fail(message: str) -> NoReturn:
        raise PolicyWeightsError(f"{path}: {message}")

    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fail(f"not a {FORMAT} file")
    version = meta.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        fail(f"format_version {version!r}, this code reads {FORMAT_VERSION}")
    for key, kind in (("policy_type", str), ("config", dict), ("shape_meta", dict), ("weights_sha256", str)):
        if key not in meta:
            fail(f"{key}: missing")
        if not isinstance(meta[key], kind):
            fail(f"{key} must be a {'JSON object' if kind is dict else 'string'}; got {meta[key]!r}")
    try:
        get_policy_classes(meta["policy_type"])
    except KeyError:
        fail(f"unknown policy_type {meta['policy_type']!r}; valid: {', '.join(sorted(POLICIES))}")
    try:
        make_config(meta["policy_type"], meta["config"])
    except (KeyError, ValueError) as exc:
        fail(f"config ({meta['policy_type']}): {exc.args[0] if exc.args else exc}")
    _check_shape_meta(meta["shape_meta"], fail)
    used = meta.get("used_obs_keys", list(meta["shape_meta"]["obs"]))
    if not isinstance(used, list) or not all(isinstance(k, str) for k in used):
        fail(f"used_obs_keys must be a list of strings; got {used!r}")
    unknown = [k for k in used if k not in meta["shape_meta"]["obs"]]
    if unknown:
        fail(f"used_obs_keys {unknown} are not in shape_meta.obs {sorted(meta['shape_meta']['obs'])}")
    sha = meta["weights_sha256"]
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        fail(f"weights_sha256 must be 64 lowercase hex digits; got {sha!r}")
    if not isinstance(meta.get("extra", {}), dict):
        fail(f"extra must be a JSON object; got {meta['extra']!r}")
    weights_path(folder, meta)


def _check_shape_meta(shape_meta: dict[str, Any], fail: Callable[[str], NoReturn]) -> None:
    """``shape_meta`` of a ``config.json``: ``obs`` maps keys to ``{"shape": [positive ints], "dtype":
    numpy dtype name}``, ``action_dim`` is a positive int (``fail(message)`` raises)."""

    def positive(value: Any) -> bool:
        return type(value) is int and value >= 1

    obs = shape_meta.get("obs")
    if not isinstance(obs, dict) or not obs:
        fail(f"shape_meta.obs must be a non-empty JSON object; got {obs!r}")
    for key, entry in obs.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(positive(d) for d in shape):
            fail(f"shape_meta.obs.{key}.shape must be a list of positive ints; got {shape!r}")
        dtype = entry.get("dtype", "float32")
        try:
            np.dtype(dtype if isinstance(dtype, str) else object())
        except TypeError:
            fail(f"shape_meta.obs.{key}.dtype must be a numpy dtype name; got {dtype!r}")
    if not positive(shape_meta.get("action_dim")):
        fail(f"shape_meta.action_dim must be a positive int; got {shape_meta.get('action_dim')!r}")


def inside_folder(folder: Path, name: Any, what: str) -> Path:
    """``folder / name`` after checking that it stays inside ``folder``: ``name`` is a plain relative
    path (not absolute, no ``..``) and, symlinks resolved, still lies in the resolved folder. Nothing
    is opened. ``what`` starts the error message (the referring file and field)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise PolicyWeightsError(f"{what} must be a file name inside {folder}; got {name!r}")
    if name.startswith(("/", "\\")) or Path(name).is_absolute():
        raise PolicyWeightsError(f"{what} {name!r} is an absolute path; it must name a file inside {folder}")
    if ".." in Path(name).parts:
        raise PolicyWeightsError(f"{what} {name!r} contains '..'; it must name a file inside {folder}")
    path = folder / name
    root, resolved = folder.resolve(), path.resolve()
    if resolved == root:
        raise PolicyWeightsError(f"{what} {name!r} names the folder itself, not a file inside it")
    if not resolved.is_relative_to(root):
        raise PolicyWeightsError(f"{what} {name!r} leads outside {folder} (to {resolved})")
    return path


def weights_path(folder: str | Path, meta: Mapping[str, Any]) -> Path:
    """The weights file that ``config.json`` names (``weights_file``), checked to lie inside ``folder``."""
    folder = Path(folder)
    name = meta.get("weights_file", WEIGHTS_FILE)
    return inside_folder(folder, name, f"{folder / CONFIG_FILE}: weights_file")


def weights_hash(folder: str | Path) -> str:
    """sha256 (hex) of the weights file of ``folder`` (computed from the file)."""
    path = weights_path(folder, read_policy_meta(folder))
    if not path.is_file():
        raise PolicyWeightsError(f"{path}: missing")
    return file_sha256(path)


def read_weights_state(folder: str | Path, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The ``state_dict`` in the weights file of ``folder`` after checking its sha256 against ``meta``
    (the folder's checked ``config.json``) and that every floating tensor is finite."""
    return _load_state(_verified_weights(Path(folder), meta))


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a (verified) safetensors file; a non-finite floating tensor is refused."""
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise PolicyWeightsError(f"{path}: unreadable safetensors ({exc})") from exc
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise PolicyWeightsError(f"{path}: non-finite values (nan/inf) in {', '.join(sorted(bad)[:5])}")
    return state


def _verified_weights(folder: Path, meta: Mapping[str, Any]) -> Path:
    """The weights file of ``folder``, present and with the sha256 that ``config.json`` records."""
    path = weights_path(folder, meta)
    if not path.is_file():
        raise PolicyWeightsError(f"{path}: missing")
    if file_sha256(path) != meta.get("weights_sha256"):
        raise PolicyWeightsError(f"{path}: corrupted (sha256 differs from {folder / CONFIG_FILE})")
    return path


def verify_policy_weights(folder: str | Path) -> dict[str, Any]:
    """Check a weights folder as loading it would (``config.json`` fields, the file's sha256, the
    tensor names and shapes against the policy its config builds) without building the real policy;
    returns the ``config.json``. Used after a save, before the save is made the newest."""
    folder = Path(folder)
    meta = read_policy_meta(folder)
    path = _verified_weights(folder, meta)
    _check_state(_header_shapes(path), _policy_shapes(meta, folder, device="meta"), path)
    return meta


def _header_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor names and shapes from a safetensors header (no tensor data is read)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as exc:
        raise PolicyWeightsError(f"{path}: unreadable safetensors ({exc})") from exc


def _build(meta: Mapping[str, Any], folder: Path, device: str = "cpu") -> ActionChunkPolicy:
    """The policy that ``config.json`` describes; ``device="meta"`` allocates no memory."""
    try:
        with torch.device(device):
            return make_policy(meta["policy_type"], meta["config"], meta["shape_meta"])
    except (KeyError, ValueError) as exc:
        raise PolicyWeightsError(f"{folder / CONFIG_FILE}: {exc.args[0] if exc.args else exc}") from exc


def _policy_shapes(meta: Mapping[str, Any], folder: Path, device: str) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in _build(meta, folder, device).state_dict().items()}


def _check_state(state: Mapping[str, list[int]], expected: Mapping[str, list[int]], path: Path) -> None:
    """Raise naming the first keys whose presence or shape differ between file and policy."""
    problems = [f"{k}: missing from the file" for k in expected if k not in state]
    problems += [f"{k}: not in this policy" for k in state if k not in expected]
    problems += [
        f"{k}: file has shape {list(state[k])}, the policy expects {list(v)}"
        for k, v in expected.items()
        if k in state and list(state[k]) != list(v)
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
    path = _verified_weights(folder, meta)
    saved_meta = normalize_shape_meta(meta["shape_meta"])
    if expect_shape_meta is not None:
        used = list(meta.get("used_obs_keys", saved_meta["obs"]))
        problems = layout_mismatches(saved_meta, normalize_shape_meta(expect_shape_meta), used)
        if problems:
            raise PolicyWeightsError(f"{folder}: weights made for another layout: " + "; ".join(problems))
    _check_state(_header_shapes(path), _policy_shapes(meta, folder, device="meta"), path)
    state = _load_state(path)
    policy = _build(meta, folder)
    policy.load_state_dict(state, strict=True)
    logger.info("loaded %s policy weights from %s", meta["policy_type"], folder)
    return policy.to(device).eval()
