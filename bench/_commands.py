"""Shared by the result drivers in ``bench/``: run a rewind command once into its own folder.

A finished step is one whose ``summary.json`` exists, so an interrupted driver resumes where it
stopped. Imported as ``from _commands import ...`` (the drivers run as ``python bench/<name>.py``).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench")


def rewind_bin(name: str) -> str:
    """The console script ``name`` of the running interpreter's environment."""
    return str(Path(sys.executable).with_name(name))


def run_once(
    cmd: list[str], folder: Path, no_run: bool = False, log_mode: str = "w"
) -> dict[str, Any] | None:
    """Run ``cmd`` unless ``folder/summary.json`` exists; return that summary (``None`` when it is
    missing and ``no_run``). Output goes to ``folder/../<folder>.log``."""
    summary = folder / "summary.json"
    if not summary.exists():
        if no_run:
            return None
        log.info("$ %s", " ".join(cmd))
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f"{folder.name}.log", log_mode) as fh:
            subprocess.run(cmd, check=True, stdout=fh, stderr=subprocess.STDOUT)
    return json.loads(summary.read_text())


def write_result(out: Path, result: dict[str, Any], table: str | None = None) -> None:
    """Write a driver's result record to ``out`` atomically (JSON, parent folders created) and log where;
    with ``table``, also that Markdown to ``out`` with the suffix ``.md``, logged too."""
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    log.info("wrote %s", out)
    if table is not None:
        atomic_write_text(out.with_suffix(".md"), table)
        log.info("wrote %s\n%s", out.with_suffix(".md"), table)


def named_paths(items: list[str], form: str, noun: str) -> dict[str, str]:
    """``NAME=PATH`` arguments as a mapping (``form`` names the PATH in messages, ``noun`` what it is);
    raises ``ValueError`` naming a malformed item, a name given twice, or a path that does not exist."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path or "/" in name:
            raise ValueError(f"expected NAME={form} (NAME without '/'), got {item!r}")
        if name in out:
            raise ValueError(f"the name {name!r} is given twice")
        if not Path(path).exists():
            raise ValueError(f"{name}: no such {noun} path: {path}")
        out[name] = path
    return out


def _same_arg(ours: str, ran: str) -> bool:
    """Two ``key=value`` overrides are the same: equal text, or both values name one existing path."""
    if ours == ran:
        return True
    (k1, _, v1), (k2, _, v2) = ours.partition("="), ran.partition("=")
    return (
        k1 == k2
        and bool(v1)
        and Path(v1).exists()
        and Path(v2).exists()
        and Path(v1).resolve() == Path(v2).resolve()
    )


def _weights_unchanged(summary: dict[str, Any]) -> bool:
    """The policy weights a finished step ran (``policy_path``) still hash to its ``policy_version``."""
    from rewind.train.policy_api import weights_version

    path, version = summary.get("policy_path"), summary.get("policy_version")
    return bool(path and version and Path(path).is_dir() and weights_version(Path(path)) == version)


def reuse_step(cmd: list[str], folder: Path, root: Path, source: Path) -> bool:
    """Link ``folder`` (a step under ``root``) to the same step under ``source``, another driver root,
    when that step finished by running ``cmd`` into its own folder, on policy weights that have not
    changed since. Every other path ``cmd`` names must be the one that step used (a calibration
    folder under ``root`` must therefore be linked to the one it used, e.g. reused first). Returns
    whether it linked; a step that cannot be reused is logged with the reason and left to run."""
    other = source / folder.relative_to(root)
    if folder.exists() or folder.is_symlink() or not (other / "summary.json").exists():
        return False
    try:
        run = json.loads((other / "run.json").read_text())
        ran, out_dir = run["argv"][1:], Path(run["out_dir"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.info("not reusing %s: its run.json cannot be read (%s)", other, exc)
        return False
    ours = [a for a in cmd[1:] if not a.startswith("out_dir=")]
    ran = [a for a in ran if not a.startswith("out_dir=")]
    differ = [f"{a} / {b}" for a, b in zip(ours, ran, strict=False) if not _same_arg(a, b)]
    if len(ours) != len(ran) or differ or out_dir.resolve() != other.resolve():
        log.info("not reusing %s: it ran another command (%s)", other, "; ".join(differ) or "arguments")
        return False
    if not _weights_unchanged(json.loads((other / "summary.json").read_text())):
        log.info("not reusing %s: its policy weights changed or are gone", other)
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(other.resolve(), target_is_directory=True)
    log.info("reusing %s for %s", other, folder)
    return True
