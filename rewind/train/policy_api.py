"""The training and evaluation side of the policy API, in one place.

Everything ``rewind.train``, ``rewind.monitor``, ``rewind.eval``, ``rewind.loop`` and ``rewind.teleop``
need from ``rewind.policies`` (registry, weights I/O, normalizer fitting, EMA, the loss with an
explicit generator) goes through these functions, so a change in the policies package touches this
module only. Policy weights for an env are loaded in one way, :func:`load_policy`, from any path
:func:`resolve_weights` accepts (a ``step_XXXXXX`` folder, a ``weights`` folder or a training run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewind.config import ConfigError, check_choice
from rewind.policies.base import ActionChunkPolicy
from rewind.store import StoreSpec, store_spec_for
from rewind.store.windows import ReplayBuffer
from rewind.train.state import WEIGHTS_DIR, read_pointer, step_name

LossFn = Callable[[dict[str, Any], torch.Generator], torch.Tensor]


def policy_config_class(name: str) -> type:
    """The config dataclass of policy ``name``; an unknown name lists the valid ones."""
    from rewind.policies.registry import get_policy_classes

    try:
        return get_policy_classes(name)[0]
    except KeyError as exc:
        raise ConfigError(f"policy.name: {exc.args[0]}") from exc


def build_policy(name: str, config: Any, spec: StoreSpec) -> ActionChunkPolicy:
    """A freshly initialised policy (unfitted normalizer) for the layout of ``spec``."""
    from rewind.policies.registry import make_policy, shape_meta_from_spec

    return make_policy(name, config, shape_meta_from_spec(spec))


def fit_normalizer(policy: ActionChunkPolicy, buffer: ReplayBuffer) -> None:
    """Fit the policy's normalizer to the training episodes (``action`` and ``obs/<key>`` arrays)."""
    policy.fit_normalizer(buffer.data)


def loss_function(policy: ActionChunkPolicy, compile: bool = False) -> LossFn:
    """``loss(batch, generator)``; the generator is passed when ``compute_loss`` accepts one."""
    fn = torch.compile(policy.compute_loss) if compile else policy.compute_loss
    if "generator" in inspect.signature(policy.compute_loss).parameters:
        return lambda batch, gen: fn(batch, generator=gen)
    return lambda batch, gen: fn(batch)


def make_ema(policy: ActionChunkPolicy) -> Any:
    """EMA of the policy's parameters (``rewind.policies.ema``; settings: the config's ``ema_*`` fields)."""
    from rewind.policies.ema import make_ema as _make_ema

    return _make_ema(policy)


def ema_update(ema: Any, policy: ActionChunkPolicy) -> None:
    """One EMA step after an optimizer step."""
    ema.step(policy.parameters())


def ema_weights(ema: Any, policy: ActionChunkPolicy) -> contextlib.AbstractContextManager[ActionChunkPolicy]:
    """Context manager that temporarily loads the EMA weights into ``policy``."""
    from rewind.policies.ema import ema_weights as _ema_weights

    return _ema_weights(ema, policy)


def save_weights(policy: ActionChunkPolicy, folder: Path, extra_meta: dict[str, Any]) -> None:
    """Policy weights (safetensors + JSON config) into ``folder``."""
    from rewind.policies.io import save_policy_weights

    save_policy_weights(policy, folder, extra_meta=extra_meta)


def verify_weights(folder: Path) -> None:
    """Read back a weights folder just written: config, sha256 and tensor shapes as loading checks them."""
    from rewind.policies.io import verify_policy_weights

    verify_policy_weights(folder)


def load_weights(
    folder: Path, device: torch.device, spec: StoreSpec, env: str
) -> tuple[ActionChunkPolicy, dict[str, Any]]:
    """Policy (eval mode) and its ``extra_meta`` from a weights folder, checked against the env's
    layout ``spec``: a mismatch raises :class:`ConfigError` naming both envs and the keys."""
    from rewind.policies.io import PolicyWeightsError, load_policy_weights, read_policy_meta
    from rewind.policies.shape_meta import shape_meta_from_spec

    extra = read_policy_meta(folder).get("extra", {})
    try:
        policy = load_policy_weights(folder, device=device, expect_shape_meta=shape_meta_from_spec(spec))
    except PolicyWeightsError as exc:
        if "another layout" not in str(exc):
            raise
        trained = extra.get("env_id", "another env")
        raise ConfigError(
            f"policy weights {folder} (trained on {trained}) do not fit env={env} ({spec.env_id}) as "
            "configured: " + str(exc).split("another layout: ", 1)[-1]
        ) from exc
    return policy, {"policy": read_policy_meta(folder)["policy_type"], **extra}


def weights_version(folder: Path) -> str:
    """``<policy>/<first 16 hex of the weights' sha256>``: the ``policy_version`` of rollouts."""
    from rewind.policies.io import read_policy_meta, weights_hash

    return f"{read_policy_meta(folder)['policy_type']}/{weights_hash(folder)[:16]}"


def resolve_weights(path: str | Path, key: str = "policy_path") -> Path:
    """A policy weights folder from ``path``: the folder itself, or the newest save (``last.json``) of a
    ``weights`` folder or of a training run folder.

    Raises:
        ConfigError: ``path`` does not exist (``<key> does not exist: <path>``).
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{key} does not exist: {p}")
    for folder in (p, p / WEIGHTS_DIR):
        step = read_pointer(folder) if folder.is_dir() else None
        if step is not None:
            return folder / step_name(step)
    return p


@dataclass
class LoadedPolicy:
    """Policy weights loaded for an env: the policy, its folder, ``policy_version`` and sha256."""

    policy: ActionChunkPolicy
    folder: Path
    version: str
    weights_hash: str


def load_policy(
    policy_path: str | Path,
    env: Any,
    env_name: str,
    device: torch.device,
    n_action_steps: int | None = None,
    noise_mode: str = "fresh",
    sampler: str = "policy",
    inference_steps: int | None = None,
    ddim_eta: float | None = None,
) -> LoadedPolicy:
    """Load the newest weights under ``policy_path`` for ``env``'s layout (eval mode), with the
    inference-time settings ``n_action_steps``, ``noise_mode`` and the sampler (:func:`set_sampler`)
    applied: the one way every command loads a policy."""
    from rewind.policies.io import weights_hash

    folder = resolve_weights(policy_path)
    policy, _ = load_weights(folder, device, store_spec_for(env), env_name)
    apply_inference_settings(policy, n_action_steps, noise_mode)
    if sampler != "policy" or inference_steps is not None or ddim_eta is not None:
        set_sampler(policy, sampler, inference_steps, eta=ddim_eta)
    return LoadedPolicy(policy, folder, weights_version(folder), weights_hash(folder))


def apply_inference_settings(policy: ActionChunkPolicy, n_action_steps: int | None, noise_mode: str) -> None:
    """Set ``n_action_steps`` (``None``: keep) and the sampling ``noise_mode`` (policies that sample).

    Raises:
        ConfigError: a value the policy does not accept.
    """
    try:
        if n_action_steps is not None:
            policy.set_n_action_steps(n_action_steps)
        if hasattr(policy, "set_noise_mode"):
            policy.set_noise_mode(noise_mode)
        elif noise_mode != "fresh":
            raise ValueError(f"{type(policy).__name__} does not sample noise; noise_mode must be 'fresh'")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


#: Samplers a policy can be switched to at inference (:func:`set_sampler`).
SAMPLERS = ("policy", "ddim", "ddpm")


def check_sampler_settings(sampler: str, inference_steps: int | None, ddim_eta: float | None) -> None:
    """The ``sampler`` / ``inference_steps`` / ``ddim_eta`` fields of a command config (one-line
    :class:`ConfigError` naming the field); whether the policy accepts them is checked at load."""
    check_choice("sampler", sampler, SAMPLERS)
    if inference_steps is not None and inference_steps < 1:
        raise ConfigError(f"inference_steps must be >= 1; got {inference_steps}")
    if ddim_eta is not None and not 0.0 <= ddim_eta <= 1.0:
        raise ConfigError(f"ddim_eta must be in [0, 1]; got {ddim_eta}")


def denoising_steps(policy: ActionChunkPolicy) -> int:
    """Denoising (or Euler) steps one sampling of ``policy`` takes (0: a policy that does not sample)."""
    from rewind.policies.diffusion.modeling_diffusion import DiffusionPolicy

    cfg = getattr(policy, "config", None)
    if isinstance(policy, DiffusionPolicy):
        return int(policy.config.inference_steps)
    return int(getattr(cfg, "num_inference_steps", 0) or 0)


def set_sampler(
    policy: ActionChunkPolicy, sampler: str, steps: int | None, key: str = "", eta: float | None = None
) -> int:
    """Switch ``policy`` to ``sampler`` (``policy``: its own; ``ddim`` / ``ddpm``: diffusion policies)
    with ``steps`` denoising steps (``None``: the policy's own for ``policy``, else the sampler's
    default: 10 for DDIM, every training step for DDPM) and DDIM's ``eta`` (``None``: keep; DDPM: 0);
    returns the steps now used. An
    inference-time choice: the weights are unchanged.

    Raises:
        ConfigError: naming ``{key}sampler`` / ``{key}inference_steps``: an unknown sampler, a policy
            that does not sample this way, or steps the sampler does not accept.
    """
    from rewind.policies.diffusion.modeling_diffusion import DiffusionPolicy, make_scheduler

    check_choice(f"{key}sampler", sampler, SAMPLERS)
    if sampler == "policy" and steps is None and eta is None:
        return denoising_steps(policy)
    if not isinstance(policy, DiffusionPolicy) and (sampler != "policy" or eta is not None):
        what = f"sampler={sampler}" if sampler != "policy" else "ddim_eta"
        raise ConfigError(f"{key}{what} needs a diffusion policy; got {type(policy).__name__}")
    cfg = getattr(policy, "config", None)
    if cfg is None or not hasattr(cfg, "num_inference_steps"):
        raise ConfigError(f"{key}inference_steps: {type(policy).__name__} does not sample in steps")
    kind = cfg.scheduler if sampler == "policy" else sampler
    if steps is None and sampler == "policy":
        steps = cfg.num_inference_steps  # only eta changes: keep the policy's own steps
    try:
        if isinstance(policy, DiffusionPolicy):
            keep = cfg.ddim_eta if kind == "ddim" else 0.0
            new = dataclasses.replace(
                cfg, scheduler=kind, num_inference_steps=steps, ddim_eta=keep if eta is None else eta
            )
        else:
            new = dataclasses.replace(cfg, num_inference_steps=steps)
    except ConfigError as exc:
        what = f"{key}sampler={sampler}, inference_steps={steps}" + (
            "" if eta is None else f", ddim_eta={eta}"
        )
        raise ConfigError(f"{what}: {exc}") from exc
    policy.config = new
    if isinstance(policy, DiffusionPolicy):
        policy.sampler = make_scheduler(new, kind)
    return denoising_steps(policy)


def sampler_tag(policy: ActionChunkPolicy) -> str:
    """How ``policy`` samples chunks now, e.g. ``ddim:10:eta=1`` (``""``: a policy that does not
    sample in steps); what a calibration records and checks (:mod:`rewind.monitor.factory`)."""
    cfg = getattr(policy, "config", None)
    if not hasattr(cfg, "num_inference_steps"):
        return ""
    kind = getattr(cfg, "scheduler", type(policy).__name__.lower())
    eta = getattr(cfg, "ddim_eta", None)
    return f"{kind}:{denoising_steps(policy)}" + ("" if eta is None else f":eta={eta:g}")
