"""Exponential moving average of policy weights (diffusers ``EMAModel``) and its safetensors format.

The trainer owns the loop::

    ema = make_ema(policy)
    ...; optimizer.step(); ema.step(policy.parameters())
    with ema_weights(ema, policy):          # evaluate / save the averaged weights
        save_policy_weights(policy, folder)

On disk (:func:`save_ema_state`): ``ema.safetensors`` holds the shadow parameters under the names of
``policy.named_parameters()`` and ``ema.json`` the scalars of ``EMAModel.state_dict()``; no pickle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from diffusers.training_utils import EMAModel
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

EMA_WEIGHTS_FILE = "ema.safetensors"
EMA_META_FILE = "ema.json"


def make_ema(policy: nn.Module, cfg: Any | None = None) -> EMAModel:
    """An ``EMAModel`` over ``policy.parameters()`` configured by ``cfg`` (default ``policy.config``):
    ``ema_decay`` (max), ``ema_min_decay``, ``ema_update_after_step``, ``ema_use_warmup``,
    ``ema_inv_gamma``, ``ema_power``."""
    cfg = policy.config if cfg is None else cfg
    return EMAModel(
        policy.parameters(),
        decay=cfg.ema_decay,
        min_decay=cfg.ema_min_decay,
        update_after_step=cfg.ema_update_after_step,
        use_ema_warmup=cfg.ema_use_warmup,
        inv_gamma=cfg.ema_inv_gamma,
        power=cfg.ema_power,
    )


@contextmanager
def ema_weights(ema: EMAModel, policy: nn.Module) -> Iterator[nn.Module]:
    """Temporarily load the averaged weights into ``policy`` (restored on exit)."""
    ema.store(policy.parameters())
    ema.copy_to(policy.parameters())
    try:
        yield policy
    finally:
        ema.restore(policy.parameters())


def save_ema_state(ema: EMAModel, policy: nn.Module, folder: str | Path) -> None:
    """Write ``ema.safetensors`` (shadow params by parameter name) and ``ema.json`` (scalars)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = [n for n, _ in policy.named_parameters()]
    state = ema.state_dict()
    shadow = state.pop("shadow_params")
    if len(shadow) != len(names):
        raise ValueError(f"EMA has {len(shadow)} shadow params, the policy has {len(names)} parameters")
    save_file(
        {n: p.detach().contiguous().cpu() for n, p in zip(names, shadow, strict=True)},
        folder / EMA_WEIGHTS_FILE,
    )
    (folder / EMA_META_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))


def load_ema_state(ema: EMAModel, policy: nn.Module, folder: str | Path) -> None:
    """Load :func:`save_ema_state` files into ``ema`` (shadow params onto the policy's devices)."""
    folder = Path(folder)
    try:
        tensors = load_file(folder / EMA_WEIGHTS_FILE)
        scalars = json.loads((folder / EMA_META_FILE).read_text())
    except (OSError, SafetensorError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read EMA state in {folder}: {exc}") from exc
    shadow = []
    for name, param in policy.named_parameters():
        if name not in tensors:
            raise KeyError(f"{folder / EMA_WEIGHTS_FILE}: no shadow parameter {name!r}")
        if tensors[name].shape != param.shape:
            raise ValueError(
                f"{folder / EMA_WEIGHTS_FILE}: {name!r} has shape {list(tensors[name].shape)}, "
                f"the policy expects {list(param.shape)}"
            )
        shadow.append(tensors[name].to(param.device, param.dtype))
    ema.load_state_dict({**scalars, "shadow_params": shadow})
