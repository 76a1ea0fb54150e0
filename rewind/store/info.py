"""Store summaries for humans and tools (backs the ``rewind-store info PATH`` command)."""

from __future__ import annotations

import os
from typing import Any

from rewind.store.episode_file import probe_episode_file
from rewind.store.orphans import orphan_summary
from rewind.store.schema import SCHEMA_VERSION
from rewind.store.store import ReplayStore


def store_info(path: str | os.PathLike) -> dict[str, Any]:
    """Open the store at ``path`` read-only and summarise it.

    Besides the index it opens every episode file's header (attributes only, no array data):
    a missing, unreadable or swapped file is listed under ``file_problems``; content hashes are
    checked by ``rewind-store verify`` (:func:`rewind.store.verify.verify_store`), not here.

    Returns:
        JSON-serialisable dict: ``path``, ``schema_version``, ``env_id``, ``action_dim``,
        ``state_dim``, ``obs`` (key -> shape/dtype), everything from :meth:`ReplayStore.summary`
        (``episodes``, ``steps``, ``steps_by_source``, ``successes``, ``failures``,
        ``success_rate``, ``n_operator_steps``, ``per_env``), ``unverified`` (ids of episodes
        without a content hash, written before schema 2), ``file_problems`` (id -> problem) and
        ``orphans`` (episode files without an index row moved aside, see ``rewind.store.orphans``).

    Raises:
        StoreError: if there is no readable store at ``path`` (or an index row is damaged).
    """
    with ReplayStore.open(path, mode="r") as store:
        spec = store.spec
        unverified, problems = [], {}
        for ep in store.episodes():
            problem = probe_episode_file(store.path, ep)
            if problem == "unverified":
                unverified.append(ep.id)
            elif problem is not None:
                problems[str(ep.id)] = problem
        return {
            "path": str(store.path),
            "schema_version": SCHEMA_VERSION,
            "env_id": spec.env_id,
            "action_dim": spec.action_dim,
            "state_dim": spec.state_dim,
            "obs": {k: {"shape": list(s), "dtype": d} for k, (s, d) in spec.obs.items()},
            **store.summary(),
            "unverified": unverified,
            "file_problems": problems,
            "orphans": orphan_summary(store.path),
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
    lines += _health_lines(info)
    return "\n".join(lines)


def _health_lines(info: dict[str, Any]) -> list[str]:
    lines = []
    if info.get("unverified"):
        lines.append(f"unverified  {len(info['unverified'])} episode(s) without a content hash (schema 1)")
    problems = info.get("file_problems") or {}
    if problems:
        verify = f"rewind-store verify {info['path']}"
        lines.append(f"PROBLEMS    {len(problems)} episode file(s); run `{verify}`:")
        lines += [f"  episode {eid}: {text}" for eid, text in problems.items()]
    orphans = info.get("orphans") or {}
    if orphans.get("files"):
        lines.append(f"orphans     {orphans['files']} episode file(s) without an index row, moved aside:")
        lines += [f"  {folder}/: {', '.join(names)}" for folder, names in orphans["folders"].items()]
    return lines
