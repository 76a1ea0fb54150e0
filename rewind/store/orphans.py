"""Episode files without an index row: moved aside, never deleted, and their ids never reused.

An ``episodes/ep_<id>.h5`` without a row is either left by a writer killed between renaming the
file and inserting its row, or a *committed* episode whose row was lost because the index was
rolled back (a restored backup, or a power cut with ``synchronous=NORMAL``). The two cannot be
told apart, so a writer opening the store moves every such file into a new folder
``orphans/<UTC time>-<pid>/`` (never over an existing file) and never gives a new episode an id
that a file in ``episodes/`` or ``orphans/`` already uses. ``rewind-store info`` lists them.
Temp files (``episodes/.tmp-*``) are half-written and never committed; they are deleted.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewind.store.episode_file import EPISODE_DIR, TMP_PREFIX, fsync_dir

logger = logging.getLogger(__name__)

ORPHAN_DIR = "orphans"
_EP_RE = re.compile(r"^ep_(\d+)\.h5$")


@dataclass
class OrphanReport:
    """What :func:`move_orphans` did: files moved (and where), temp files deleted."""

    moved: list[str] = field(default_factory=list)
    folder: Path | None = None
    temp_removed: int = 0


def move_orphans(root: Path, committed: set[str]) -> OrphanReport:
    """Move every ``episodes/*.h5`` whose name is not in ``committed`` to a new orphans folder.

    Call only under the writer lock (no writer can be mid-commit). Each step is a rename inside
    the store, so a kill part-way leaves every file either still in ``episodes/`` (moved by the
    next writer) or in the new folder.
    """
    report = OrphanReport()
    folder = root / EPISODE_DIR
    strays = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith(TMP_PREFIX):
            p.unlink(missing_ok=True)
            report.temp_removed += 1
        elif p.suffix == ".h5" and p.name not in committed:
            strays.append(p)
    if strays:
        report.folder = _new_orphan_folder(root)
        for p in strays:
            dest = report.folder / p.name
            if dest.exists():  # cannot happen in a fresh folder; never overwrite all the same
                raise FileExistsError(f"{dest} already exists")
            os.rename(p, dest)
            report.moved.append(p.name)
        fsync_dir(report.folder)
        fsync_dir(folder)
        logger.warning(
            "%s: moved %d episode file(s) without an index row (%s) to %s; they were left by a killed "
            "writer or by an index rolled back (restored backup, power cut); their ids are not reused",
            root,
            len(strays),
            ", ".join(report.moved),
            report.folder,
        )
    if report.temp_removed:
        logger.info("%s: removed %d temp file(s) of killed writers", root, report.temp_removed)
    return report


def _new_orphan_folder(root: Path) -> Path:
    base = root / ORPHAN_DIR / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    base.parent.mkdir(exist_ok=True)
    for n in range(1000):
        candidate = base if n == 0 else base.with_name(f"{base.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        fsync_dir(base.parent)
        return candidate
    raise FileExistsError(f"cannot create a new folder next to {base}")


def max_file_id(root: Path) -> int:
    """Largest episode id used by a file in ``episodes/`` or ``orphans/*/`` (-1 if none)."""
    best = -1
    dirs = [root / EPISODE_DIR]
    if (root / ORPHAN_DIR).is_dir():
        dirs += [d for d in (root / ORPHAN_DIR).iterdir() if d.is_dir()]
    for d in dirs:
        for p in d.iterdir():
            m = _EP_RE.match(p.name)
            if m:
                best = max(best, int(m.group(1)))
    return best


def orphan_summary(root: Path) -> dict[str, Any]:
    """``{"files": n, "folders": {relative folder: [file names]}}`` of everything moved aside so far."""
    out: dict[str, Any] = {"files": 0, "folders": {}}
    base = root / ORPHAN_DIR
    if not base.is_dir():
        return out
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        names = sorted(p.name for p in d.iterdir() if p.suffix == ".h5")
        if names:
            out["folders"][f"{ORPHAN_DIR}/{d.name}"] = names
            out["files"] += len(names)
    return out
