"""The loop's folder protocol: identity, rounds done atomically, resume.

Layout of a loop's ``out_dir``::

    loop.json            identity: the config keys a resumed loop must share, written at the first start
    stall.json           with recovery.stall_from_demos: the stall threshold from the demos (rewind.loop.stall)
    round_00/            the base: demos/ (when built), train/ (when built), calibration/, eval/
    round_01/            collect/ (the round's store), train/, calibration/, eval/ [eval_rewind/]
    round_NN/round.json  the round's record (lineage + metrics): written atomically as its last act
    report.md, *.png     the report, regenerated after every round

A round counts as done only when its ``round.json`` exists. A restarted loop keeps the done rounds,
deletes whatever an interrupted round left (except the store a person filled with ``rewind-teleop``,
which is data) and runs it again from its start, with the same seeds: the result is the same as an
uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from rewind.config import ConfigError, with_renamed_keys
from rewind.loop.record import PolicyRecord, RoundRecord
from rewind.policies.io import weights_hash
from rewind.train import policy_api
from rewind.utils.io import DiskFullError, as_json, atomic_write_json, changed_keys

log = logging.getLogger(__name__)

IDENTITY = "loop.json"
RECORD = "round.json"
#: Config keys a resumed loop may change.
RESUMABLE = ("out_dir", "rounds", "progress", "device", "num_threads", "parallel_control", "wandb")
#: The ``rollout`` settings that are part of a loop's results (the others only say where and how many
#: rollouts run at once, and may change on resume).
ROLLOUT_IDENTITY = ("inference_rows",)


def round_dir(out: Path, r: int) -> Path:
    """``out/round_NN``."""
    return out / f"round_{r:02d}"


def identity(cfg: Any) -> dict[str, Any]:
    """The part of the loop config a resumed loop must share (JSON-normalised)."""
    full = as_json(dataclasses.asdict(cfg))
    if isinstance(full.get("rollout"), dict):
        full["rollout"] = {k: v for k, v in full["rollout"].items() if k in ROLLOUT_IDENTITY}
    return {k: v for k, v in full.items() if k not in RESUMABLE}


def _with_policy_defaults(identity: dict[str, Any]) -> dict[str, Any]:
    """``identity`` with its base policy config as loading it gives (fields added since it was written
    at their defaults), so a loop started by an older version still resumes."""
    from rewind.policies.registry import config_with_defaults

    node = (identity.get("base") or {}).get("policy")
    if not (isinstance(node, dict) and "name" in node):
        return identity
    fields = config_with_defaults(node["name"], {k: v for k, v in node.items() if k != "name"})
    return {**identity, "base": {**identity["base"], "policy": {"name": node["name"], **fields}}}


def _with_added_keys(saved: Any, now: Any) -> Any:
    """``saved`` with the keys it lacks taken from ``now``: settings the loop schema gained after
    ``saved`` was written (a loop started before ``promotion`` existed resumes under today's)."""
    if not (isinstance(saved, dict) and isinstance(now, dict)):
        return saved
    return {**now, **{k: _with_added_keys(v, now.get(k)) for k, v in saved.items()}}


def check_identity(out: Path, cfg: Any) -> bool:
    """Write ``loop.json`` on a first start; on a restart refuse a config that differs in a key other
    than :data:`RESUMABLE` (or a ``rollout`` setting outside :data:`ROLLOUT_IDENTITY`). Returns ``True`` when the loop resumes."""
    path = out / IDENTITY
    now = identity(cfg)
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, now)
        return False
    # policy fields added since take their defaults (what loading the weights gives); other new keys today's
    # keys renamed since (finetune.source_weights -> sample_weights, ...) read under their new names
    saved = _with_added_keys(_with_policy_defaults(with_renamed_keys(json.loads(path.read_text()))), now)
    changed = changed_keys(saved, _with_policy_defaults(now))
    if changed:
        raise ConfigError(
            f"out_dir {out} holds a loop started with other settings ({', '.join(changed[:6])}); only "
            f"{', '.join(RESUMABLE)} and rollout (but rollout.inference_rows) may change on resume: use the "
            "same overrides or another out_dir"
        )
    return True


def load_record(out: Path, r: int) -> RoundRecord | None:
    """The record of round ``r`` if it is done, else ``None`` (older ``round.json`` versions load too)."""
    path = round_dir(out, r) / RECORD
    return RoundRecord.from_json(json.loads(path.read_text()), str(path)) if path.exists() else None


def clear_unfinished(out: Path, r: int, keep: tuple[str, ...] = ()) -> Path:
    """Remove what an interrupted round ``r`` left (except the sub-folders ``keep``); return its folder."""
    folder = round_dir(out, r)
    if folder.exists():
        leftovers = [p for p in folder.iterdir() if p.name not in keep]
        if leftovers:
            log.info(
                "round %d was interrupted: removing %s and running it again",
                r,
                ", ".join(p.name for p in leftovers),
            )
        for p in leftovers:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def mark_done(out: Path, r: int, record: RoundRecord) -> None:
    """Write round ``r``'s record atomically: from now on the round is done. On a full disk a one-line
    :class:`~rewind.utils.io.DiskFullError`: the round stays not done, and the loop run again redoes it."""
    try:
        atomic_write_json(round_dir(out, r) / RECORD, record.to_json())
    except DiskFullError as exc:
        raise DiskFullError(
            f"{exc}; round {r} is not done: free some space and run the loop again (same out_dir) to redo it"
        ) from exc


def rel(out: Path, path: str | Path) -> str:
    """``path`` relative to ``out`` when inside it (records stay comparable across out_dirs)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(out.resolve()))
    except ValueError:
        return str(p)


def abs_path(out: Path, path: str) -> Path:
    """A record's ``path`` (relative to ``out``, as :func:`rel` wrote it, or absolute) as a path."""
    p = Path(path)
    return p if p.is_absolute() else out / p


def policy_record(out: Path, weights: Path, parent: str | None) -> PolicyRecord:
    """The lineage record of ``weights`` (version, path relative to ``out``, file hash, parent version)."""
    return PolicyRecord(policy_api.weights_version(weights), rel(out, weights), weights_hash(weights), parent)
