"""Store summaries for humans and tools (backs the ``rewind-store info PATH`` command)."""

from __future__ import annotations

import os
from typing import Any

from rewind.store.schema import SCHEMA_VERSION
from rewind.store.store import ReplayStore


def store_info(path: str | os.PathLike) -> dict[str, Any]:
    """Open the store at ``path`` read-only and summarise it.

    Returns:
        JSON-serialisable dict: ``path``, ``schema_version``, ``env_id``, ``action_dim``,
        ``state_dim``, ``obs`` (key -> shape/dtype) plus everything from
        :meth:`ReplayStore.summary` (``episodes``, ``steps``, ``steps_by_source``, ``successes``,
        ``failures``, ``success_rate``, ``n_operator_steps``, ``per_env``).

    Raises:
        StoreError: if there is no readable store at ``path``.
    """
    with ReplayStore.open(path, mode="r") as store:
        spec = store.spec
        return {
            "path": str(store.path),
            "schema_version": SCHEMA_VERSION,
            "env_id": spec.env_id,
            "action_dim": spec.action_dim,
            "state_dim": spec.state_dim,
            "obs": {k: {"shape": list(s), "dtype": d} for k, (s, d) in spec.obs.items()},
            **store.summary(),
        }


def format_store_info(info: dict[str, Any]) -> str:
    """Render :func:`store_info` output as a short human-readable text block."""
    rate = info["success_rate"]
    lines = [
        f"store       {info['path']}  (schema {info['schema_version']}, env {info['env_id']})",
        f"episodes    {info['episodes']}",
        f"steps       {info['steps']}",
        f"success     {info['successes']}/{info['episodes']}"
        + ("" if rate is None else f"  ({100.0 * rate:.1f}%)"),
        f"operator    {info['n_operator_steps']} steps",
        "steps by source:",
    ]
    lines += [f"  {name:<17}{n}" for name, n in info["steps_by_source"].items()]
    if len(info["per_env"]) > 1:
        lines.append("per env:")
        lines += [
            f"  {env}: {d['episodes']} episodes, {d['steps']} steps, {d['successes']} successes"
            for env, d in info["per_env"].items()
        ]
    return "\n".join(lines)
