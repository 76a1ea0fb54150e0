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


def write_result(out: Path, result: dict[str, Any]) -> None:
    """Write a driver's result record to ``out`` (JSON, parent folders created) and log where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    log.info("wrote %s", out)
