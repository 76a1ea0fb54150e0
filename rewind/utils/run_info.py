"""Provenance of a run: which code (git revision, dirty flag), where, when, with which versions.

Nothing a run records reveals a secret: config keys named in :data:`SECRET_KEYS` (``token``) are
written as ``"***"`` in ``config.yaml`` (:func:`redact_config`) and on the recorded command line
(:func:`redact_argv`).
"""

from __future__ import annotations

import datetime as _dt
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import rewind

UNKNOWN = "unknown"
_VERSIONED = ("rewind", "torch", "mujoco", "numpy", "hydra-core", "wandb")
SECRET_KEYS = frozenset({"token"})
REDACTED = "***"


def _is_secret_key(key: object) -> bool:
    """True for ``token`` and for a dotted key ending in it (``teleop.token``)."""
    return isinstance(key, str) and key.rsplit(".", 1)[-1] in SECRET_KEYS


def redact_config(tree: Any) -> Any:
    """A copy of a JSON-like config tree with the value of every secret key replaced by ``"***"``.

    Unset values (``None``, ``""``) stay as they are: they reveal nothing and show that no secret was given.
    """
    if isinstance(tree, Mapping):
        return {
            k: REDACTED if _is_secret_key(k) and v not in (None, "") else redact_config(v)
            for k, v in tree.items()
        }
    if isinstance(tree, (list, tuple)):
        return [redact_config(v) for v in tree]
    return tree


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every ``token=...`` override (also ``+token=``, ``a.token=``) hidden."""
    out = []
    for word in argv:
        key, sep, value = word.partition("=")
        secret = sep and not word.startswith("-") and _is_secret_key(key.lstrip("+~")) and value
        out.append(f"{key}={REDACTED}" if secret else word)
    return out


def code_root() -> Path:
    """Folder that holds the ``rewind`` package (the repository root for an editable install)."""
    return Path(rewind.__file__).resolve().parent.parent


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_revision(root: Path | None = None) -> tuple[str, bool | None]:
    """``(commit sha, dirty)`` of the git repository the code runs from.

    Returns ``("unknown", None)`` when the code is not inside a git work tree whose top level is
    ``root`` (e.g. an installed wheel, or a venv nested inside some other repository).
    Untracked files do not count as dirty.
    """
    root = (root or code_root()).resolve()
    top = _git(["rev-parse", "--show-toplevel"], root)
    if top is None or Path(top).resolve() != root:
        return UNKNOWN, None
    sha = _git(["rev-parse", "HEAD"], root)
    status = _git(["status", "--porcelain", "--untracked-files=no"], root)
    if sha is None:
        return UNKNOWN, None
    return sha, (bool(status) if status is not None else None)


def package_versions(names: tuple[str, ...] = _VERSIONED) -> dict[str, str]:
    """Installed distribution versions (read from metadata; nothing heavy is imported)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = UNKNOWN
    return versions


def run_info(argv: list[str] | None = None) -> dict[str, Any]:
    """Everything ``run.json`` records about a run (``token=`` values hidden: :func:`redact_argv`)."""
    import shlex

    sha, dirty = git_revision()
    argv = redact_argv(sys.argv if argv is None else argv)
    return {
        "git_revision": sha,
        "git_dirty": dirty,
        "command_line": shlex.join([Path(argv[0]).name, *argv[1:]]) if argv else "",
        "argv": argv,
        "start_time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": package_versions(),
    }
