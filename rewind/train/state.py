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
leaves the previous complete save in force. Only the newest training state is kept.
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
from safetensors.torch import load_file, save_file

from rewind.config import ConfigError
from rewind.utils.io import atomic_write_json

log = logging.getLogger(__name__)

WEIGHTS_DIR = "weights"
STATE_DIR = "training_state"
POINTER = "last.json"
TMP_PREFIX = ".tmp-"


def step_name(step: int) -> str:
    """Folder name of a save: ``step_000500``."""
    return f"step_{step:06d}"


# ----------------------------------------------------------------------------- atomic folders
@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success rename it to ``final`` (replacing an old one)."""
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_pointer(folder: Path) -> int | None:
    """Step of the newest complete save in ``folder`` (``weights`` or ``training_state``), or None."""
    pointer = folder / POINTER
    if not pointer.is_file():
        return None
    data = json.loads(pointer.read_text())
    if not (folder / data["path"]).is_dir():
        raise ConfigError(f"{pointer}: points at missing folder {data['path']}")
    return int(data["step"])


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
    """Atomically write the training state of ``step`` and point ``training_state/last.json`` at it."""
    root = out_dir / STATE_DIR
    with atomic_dir(root / step_name(step)) as tmp:
        skeletons = {name: save_state_dict(tmp, name, c.state_dict()) for name, c in state.components.items()}
        rng = {f"generator.{k}": g.get_state() for k, g in state.generators.items()}
        rng["torch_cpu"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["torch_cuda"] = torch.cuda.get_rng_state()
        save_file(rng, str(tmp / "rng.safetensors"))
        payload = {"step": step, "numpy_rng": state.numpy_state(), "components": skeletons, **meta}
        atomic_write_json(tmp / "state.json", payload)
    write_pointer(root, step)
    for old in sorted(root.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return root / step_name(step)


def read_state_meta(out_dir: Path) -> dict[str, Any] | None:
    """``state.json`` of the newest complete training state of ``out_dir`` (None: there is none)."""
    root = out_dir / STATE_DIR
    step = read_pointer(root)
    if step is None:
        return None
    return json.loads((root / step_name(step) / "state.json").read_text())


def load_training_state(out_dir: Path, state: TrainingState) -> dict[str, Any] | None:
    """Restore the newest training state of ``out_dir`` into ``state``; return its ``state.json``.

    Returns None when the run has no complete training state yet.
    """
    payload = read_state_meta(out_dir)
    if payload is None:
        return None
    folder = out_dir / STATE_DIR / step_name(int(payload["step"]))
    for name, component in state.components.items():
        if name not in payload["components"]:
            raise ConfigError(f"{folder}: no saved '{name}' state (was the run started with other settings?)")
        component.load_state_dict(load_state_dict(folder, name, payload["components"][name]))
    rng = load_file(str(folder / "rng.safetensors"))
    for name, gen in state.generators.items():
        gen.set_state(rng[f"generator.{name}"])
    torch.set_rng_state(rng["torch_cpu"])
    if "torch_cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["torch_cuda"])
    state.set_numpy_state(payload["numpy_rng"])
    return payload
