"""Saving and restoring a training run: policy weights every ``save_every`` steps, and the full training
state (optimizer, lr schedule, EMA, step, RNG states) for an exact resume. Safetensors + JSON, no pickle.

Layout under the run's ``out_dir``::

    weights/step_000500/        policy weights (rewind.policies.io: safetensors + config.json)
    weights/last.json           {"step": 500, "path": "step_000500"}: the newest complete save
    training_state/step_000500/ model.safetensors (raw weights), ema.safetensors, optimizer.safetensors,
                                rng.safetensors (torch generator states), state.json (step, numpy
                                generator state, optimizer / scheduler / EMA settings, config)
    training_state/last.json    pointer used by ``resume=true``

Every folder is written under a temporary name and renamed into place, then the pointers are
replaced atomically (weights first, training state last), so killing the process at any moment
leaves the previous complete save in force. Only the newest training state is kept, and the previous
one is deleted only after the new one has been read back and verified.

``state.json`` records the sha256 of every ``.safetensors`` file of its folder (``"sha256"``); loading
checks them before any tensor is read, so a corrupted or truncated file stops a resume with one line
naming it (:class:`TrainingStateError`) instead of training on garbage. Loaded floating tensors must
be finite. States saved before the hashes existed still load (with a warning).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rewind.config import ConfigError
from rewind.utils.io import atomic_write_json, disk_full_error, file_sha256, fsync_dir, is_disk_full

log = logging.getLogger(__name__)

WEIGHTS_DIR = "weights"
STATE_DIR = "training_state"
POINTER = "last.json"
TMP_PREFIX = ".tmp-"
STATE_FILE = "state.json"


class TrainingStateError(ConfigError):
    """A training state (or a ``last.json`` pointer) that is missing, corrupted or does not fit this run;
    the message names the file. Reported as one line (exit status 2) by the commands."""


def step_name(step: int) -> str:
    """Folder name of a save: ``step_000500``."""
    return f"step_{step:06d}"


# ----------------------------------------------------------------------------- atomic folders
@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success rename it to ``final`` (replacing an old one).

    Raises:
        DiskFullError: the filesystem ran out of space while the folder was written (one line naming
            ``final``); the temporary folder is removed and ``final`` keeps what it held.
    """
    existed = final.exists()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        for path in tmp.iterdir():
            if path.is_file():
                with path.open("rb") as fh:
                    os.fsync(fh.fileno())
        if final.exists():
            old = final.parent / f"{TMP_PREFIX}old-{final.name}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(exc):
            raise disk_full_error(final, exc, existed) from exc
        raise


def _read_json(path: Path) -> Any:
    """Parsed JSON of ``path``; an unreadable or malformed file raises naming it."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise TrainingStateError(f"{path}: missing") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrainingStateError(f"{path}: unreadable or not valid JSON ({exc})") from exc


def read_pointer(folder: Path) -> int | None:
    """Step of the newest complete save in ``folder`` (``weights`` or ``training_state``), or None.

    Raises:
        TrainingStateError: ``last.json`` is malformed or points at a folder that is not there.
    """
    pointer = folder / POINTER
    if not pointer.is_file():
        return None
    data = _read_json(pointer)
    step = data.get("step") if isinstance(data, dict) else None
    if type(step) is not int or step < 0 or data.get("path") != step_name(step):
        raise TrainingStateError(
            f'{pointer}: malformed (expected {{"step": N, "path": "step_00000N"}}); got {data!r}'[:300]
        )
    if not (folder / data["path"]).is_dir():
        raise TrainingStateError(f"{pointer}: points at missing folder {data['path']}")
    return step


def write_pointer(folder: Path, step: int) -> None:
    """Atomically make ``step_XXXXXX`` the newest save of ``folder``."""
    atomic_write_json(folder / POINTER, {"step": step, "path": step_name(step)})


def clean_temporaries(out_dir: Path) -> None:
    """Remove half-written folders left by a killed process."""
    for sub in (WEIGHTS_DIR, STATE_DIR):
        for tmp in (out_dir / sub).glob(f"{TMP_PREFIX}*"):
            log.info("removing unfinished save %s", tmp)
            shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- tensors <-> JSON
def split_tensors(obj: Any, tensors: dict[str, torch.Tensor], prefix: str = "") -> Any:
    """JSON skeleton of a nested state dict; its tensors go into ``tensors`` under their path.

    Dicts with non-string keys and tuples are tagged so :func:`join_tensors` restores them exactly.
    """
    if isinstance(obj, torch.Tensor):
        tensors[prefix] = obj.detach().to("cpu").contiguous().clone()
        return {"__tensor__": prefix}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: split_tensors(v, tensors, f"{prefix}.{k}" if prefix else k) for k, v in obj.items()}
        items = [[k, split_tensors(v, tensors, f"{prefix}.{k}")] for k, v in obj.items()]
        return {"__items__": items}
    if isinstance(obj, tuple):
        return {"__tuple__": [split_tensors(v, tensors, f"{prefix}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [split_tensors(v, tensors, f"{prefix}.{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"training state at '{prefix}': cannot store a {type(obj).__name__} without pickle")


def join_tensors(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`split_tensors`."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__items__" in obj:
            return {k: join_tensors(v, tensors) for k, v in obj["__items__"]}
        if "__tuple__" in obj:
            return tuple(join_tensors(v, tensors) for v in obj["__tuple__"])
        return {k: join_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_tensors(v, tensors) for v in obj]
    return obj


def save_state_dict(folder: Path, name: str, state: Any) -> Any:
    """Write the tensors of ``state`` to ``<name>.safetensors``; return its JSON skeleton."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton = split_tensors(state, tensors)
    save_file(tensors, str(folder / f"{name}.safetensors"))
    return skeleton


def load_state_dict(folder: Path, name: str, skeleton: Any) -> Any:
    """Read ``<name>.safetensors`` and rebuild the state dict described by ``skeleton``."""
    return join_tensors(skeleton, load_file(str(folder / f"{name}.safetensors")))


# ----------------------------------------------------------------------------- training state
@dataclass
class TrainingState:
    """Everything an exact resume needs, as live objects.

    ``components`` maps a name (``model``, ``ema``, ``optimizer``, ``scheduler``) to an object with
    ``state_dict()`` / ``load_state_dict()``; ``generators`` maps a name to a ``torch.Generator``;
    ``numpy_state`` / ``set_numpy_state`` read and write the window sampler's generator state.
    """

    components: dict[str, Any]
    generators: dict[str, torch.Generator]
    numpy_state: Callable[[], dict[str, Any]]
    set_numpy_state: Callable[[dict[str, Any]], None]


def save_training_state(
    out_dir: Path, step: int, state: TrainingState, meta: dict[str, Any], keep: int = 1
) -> Path:
    """Atomically write the training state of ``step``, read it back and verify it, then point
    ``training_state/last.json`` at it and delete older states (``keep`` states are kept in all).

    Raises:
        TrainingStateError: the written state does not read back intact (the previous one is kept).
    """
    root = out_dir / STATE_DIR
    final = root / step_name(step)
    with atomic_dir(final) as tmp:
        skeletons = {name: save_state_dict(tmp, name, c.state_dict()) for name, c in state.components.items()}
        rng = {f"generator.{k}": g.get_state() for k, g in state.generators.items()}
        rng["torch_cpu"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["torch_cuda"] = torch.cuda.get_rng_state()
        save_file(rng, str(tmp / "rng.safetensors"))
        hashes = {p.name: file_sha256(p) for p in sorted(tmp.glob("*.safetensors"))}
        payload = {"step": step, "numpy_rng": state.numpy_state(), "components": skeletons, **meta}
        atomic_write_json(tmp / STATE_FILE, {**payload, "sha256": hashes})
    try:
        verify_training_state(final, step)
    except TrainingStateError:
        shutil.rmtree(final, ignore_errors=True)
        raise
    write_pointer(root, step)
    older = sorted(p for p in root.glob("step_*") if p != final)
    for old in older[: max(len(older) - (keep - 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_state_meta(out_dir: Path) -> dict[str, Any] | None:
    """``state.json`` of the newest complete training state of ``out_dir`` (None: there is none),
    with its structure checked (a malformed file raises :class:`TrainingStateError` naming it)."""
    root = out_dir / STATE_DIR
    step = read_pointer(root)
    if step is None:
        return None
    return _read_state_json(root / step_name(step), step)


def _read_state_json(folder: Path, step: int) -> dict[str, Any]:
    """``folder/state.json`` after checking the fields every training state has."""
    path = folder / STATE_FILE
    payload = _read_json(path)
    if not isinstance(payload, dict):
        raise TrainingStateError(f"{path}: not a training state (a JSON object is expected)")
    if payload.get("step") != step:
        raise TrainingStateError(
            f"{path}: step {payload.get('step')!r} differs from its folder {folder.name}"
        )
    for key in ("components", "numpy_rng"):
        if not isinstance(payload.get(key), dict):
            raise TrainingStateError(f"{path}: '{key}' is missing or not a JSON object")
    hashes = payload.get("sha256")
    if hashes is not None and not (
        isinstance(hashes, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items())
    ):
        raise TrainingStateError(f"{path}: 'sha256' must map file names to hex digests")
    return payload


def verify_training_state(folder: Path, step: int) -> dict[str, Any]:
    """Check that ``folder`` holds an intact training state of ``step``: its ``state.json`` parses and
    every ``.safetensors`` file it needs is there with the sha256 that ``state.json`` records.

    Returns the ``state.json``. A state saved before hashes were recorded passes with a warning.

    Raises:
        TrainingStateError: naming the first missing, extra-named or corrupted file.
    """
    payload = _read_state_json(folder, step)
    hashes = payload.get("sha256")
    if hashes is None:
        log.warning("%s: saved without content hashes (older rewind); its files are not verified", folder)
        return payload
    needed = {f"{name}.safetensors" for name in payload["components"]} | {"rng.safetensors"}
    for name in sorted(needed | set(hashes)):
        path = folder / name
        if name not in hashes:
            raise TrainingStateError(f"{path}: no sha256 recorded in {folder / STATE_FILE}")
        if os.sep in name or name.startswith(".") or path.is_symlink():
            raise TrainingStateError(f"{folder / STATE_FILE}: {name!r} is not a plain file of {folder}")
        if not path.is_file():
            raise TrainingStateError(f"{path}: missing")
        if file_sha256(path) != hashes[name]:
            raise TrainingStateError(f"{path}: corrupted (sha256 differs from {folder / STATE_FILE})")
    return payload


def load_training_state(out_dir: Path, state: TrainingState) -> dict[str, Any] | None:
    """Restore the newest training state of ``out_dir`` into ``state``; return its ``state.json``.

    Every file is verified (:func:`verify_training_state`) before any tensor is read. Returns None
    when the run has no complete training state yet.

    Raises:
        TrainingStateError: a corrupted or missing file, non-finite values, or a state that does not fit
            the live objects (another policy or optimizer); the message names the file.
    """
    step = read_pointer(out_dir / STATE_DIR)
    if step is None:
        return None
    folder = out_dir / STATE_DIR / step_name(step)
    payload = verify_training_state(folder, step)
    for name, component in state.components.items():
        if name not in payload["components"]:
            raise TrainingStateError(
                f"{folder}: no saved '{name}' state (was the run started with other settings?)"
            )
        path = folder / f"{name}.safetensors"
        tensors = _load_finite(path)
        with _naming(path, "does not fit this run"):
            component.load_state_dict(join_tensors(payload["components"][name], tensors))
    path = folder / "rng.safetensors"
    rng = _load_finite(path)
    with _naming(path, "does not fit this run"):
        for name, gen in state.generators.items():
            gen.set_state(rng[f"generator.{name}"])
        torch.set_rng_state(rng["torch_cpu"])
        if "torch_cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["torch_cuda"])
    with _naming(folder / STATE_FILE, "numpy_rng does not fit this run"):
        state.set_numpy_state(payload["numpy_rng"])
    return payload


@contextmanager
def _naming(path: Path, problem: str) -> Iterator[None]:
    """Turn an error while reading ``path`` or loading what it holds into one line naming it."""
    try:
        yield
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        detail = (str(exc).splitlines() or [""])[0][:200]
        raise TrainingStateError(f"{path}: {problem} ({type(exc).__name__}: {detail})") from exc


def _load_finite(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a (verified) safetensors file; non-finite floating values are refused."""
    with _naming(path, "unreadable"):
        tensors = load_file(str(path))
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise TrainingStateError(f"{path}: non-finite values (nan/inf) in {', '.join(sorted(bad)[:5])}")
    return tensors
