"""Starting a training run from existing policy weights (``init.from_weights``): fine-tuning.

The new run's policy is built from its own ``policy`` node, which must equal the weights' saved
policy config, then the saved ``state_dict`` is loaded into it (all of it, or with
``init.load_weights=false`` only the normalizer's statistics). Whether the normalizer is then refit
to the new data is the trainer's choice (``init.normalizer``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rewind.config import ConfigError
from rewind.policies.base import ActionChunkPolicy
from rewind.train.config import InitConfig
from rewind.train.policy_api import resolve_weights
from rewind.utils.io import as_json, changed_keys

#: Prefix of the normalizer's entries in a policy ``state_dict``.
NORMALIZER_PREFIX = "normalizer."


def check_policy_config(folder: Path, name: str, config: Any) -> dict[str, Any]:
    """The weights' ``config.json`` after checking that ``name``/``config`` equal what was saved.

    Raises:
        ConfigError: unreadable weights, another policy, or config keys that differ (named).
    """
    from rewind.policies.io import PolicyWeightsError, read_policy_meta
    from rewind.policies.registry import config_with_defaults

    try:
        meta = read_policy_meta(folder)
    except PolicyWeightsError as exc:
        raise ConfigError(f"init.from_weights: {exc}") from exc
    if meta["policy_type"] != name:
        raise ConfigError(
            f"init.from_weights: {folder} holds '{meta['policy_type']}' weights; policy.name={name}"
        )
    changed = changed_keys(config_with_defaults(name, meta["config"]), as_json(dataclasses.asdict(config)))
    if changed:
        shown = ", ".join(f"policy.{k}" for k in changed[:6])
        raise ConfigError(
            f"init.from_weights: the policy config differs from the weights' in {shown}; "
            f"pass the same policy settings as the run that made {folder}"
        )
    return meta


def load_init(policy: ActionChunkPolicy, cfg: InitConfig, name: str, config: Any) -> dict[str, Any]:
    """Load ``cfg.from_weights`` into ``policy`` (everything, or only the normalizer); return its lineage:
    ``{"init_from": folder, "init_weights_sha256": ..., "init_load_weights": bool}``.

    Raises:
        ConfigError: unreadable, corrupted or mismatching weights (the file and the problem named).
    """
    from rewind.policies.io import PolicyWeightsError, read_weights_state

    folder = resolve_weights(str(cfg.from_weights), key="init.from_weights")
    meta = check_policy_config(folder, name, config)
    try:
        state = read_weights_state(folder, meta)  # the file inside the folder, sha256-checked, finite
    except PolicyWeightsError as exc:
        raise ConfigError(f"init.from_weights: {exc}") from exc
    if not cfg.load_weights:
        state = {k: v for k, v in state.items() if k.startswith(NORMALIZER_PREFIX)}
    try:
        missing, unexpected = policy.load_state_dict(state, strict=cfg.load_weights)
    except RuntimeError as exc:
        raise ConfigError(f"init.from_weights: {folder}: weights do not fit the policy ({exc})") from exc
    if not cfg.load_weights and (unexpected or not any(k.startswith(NORMALIZER_PREFIX) for k in state)):
        raise ConfigError(f"init.from_weights: {folder}: no normalizer statistics to take")
    sha = str(meta["weights_sha256"])
    return {"init_from": str(folder), "init_weights_sha256": sha, "init_load_weights": cfg.load_weights}
