"""One result file from finished ``rewind-loop`` folders: what bench/results holds for a loop run.

For each folder: its command line, git revision, package versions and wall time (``run.json``), its
loop seed (the resolved ``config.yaml``), its summary (``summary.json``), and each round's stage
timings, policy version, candidate results and collection counts (``round_NN/round.json``:
interventions by trigger, operator steps). Nothing is run; the numbers are the runs' own.

    .venv/bin/python bench/loop_result.py runs/issue14/default_parallel --note "..." \
        --out bench/results/default_loop_parallel_control.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import yaml

from rewind.utils.io import atomic_write_text

log = logging.getLogger("loop_result")


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise SystemExit(f"{path} is missing: is {path.parent} a finished rewind-loop folder?")
    return json.loads(path.read_text())


#: The collection counts a round's result keeps (what triggered the source, what it cost).
COLLECTION = (
    "success_rate",
    "interventions",
    "triggers",
    "stalls",
    "failed_interventions",
    "operator_steps",
    "kept",
)


def _round(path: Path) -> dict[str, Any]:
    rec = _read(path)
    ctl, collection = rec.get("control") or {}, rec.get("collection")
    return {
        "timings_s": rec.get("timings_s", {}),
        "policy_version": rec["policy"]["version"],
        "success": rec["eval"]["success_rate"],
        "promotion": rec.get("promotion"),
        "control_version": (ctl.get("policy") or {}).get("version"),
        "control_success": (ctl.get("eval") or {}).get("success_rate"),
        "control_promotion": ctl.get("promotion"),
        "collection": {k: collection.get(k) for k in COLLECTION} if collection else None,
    }


def _loop_seed(folder: Path) -> int | None:
    """The loop seed in the folder's resolved config (``None`` for a folder without one)."""
    path = folder / "config.yaml"
    if not path.exists():
        return None
    cfg = yaml.safe_load(path.read_text())
    if not isinstance(cfg, dict):
        raise SystemExit(f"{path} is not a mapping: is it a rewind-loop config?")
    return cfg.get("seed")


def loop_result(folder: Path) -> dict[str, Any]:
    """The result record of one finished loop folder."""
    run, summary = _read(folder / "run.json"), _read(folder / "summary.json")
    rounds = {p.parent.name: _round(p) for p in sorted(folder.glob("round_*/round.json"))}
    return {
        "out_dir": str(folder),
        "command_line": run.get("command_line"),
        "seed": _loop_seed(folder),
        "git_revision": run.get("git_revision"),
        "git_dirty": run.get("git_dirty"),
        "start_time": run.get("start_time"),
        "versions": run.get("versions"),
        "wall_s": run.get("duration_s"),
        "rounds": rounds,
        "summary": summary,
    }


def main() -> None:
    """Write the result file of the given loop folders."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--note", default="", help="what the runs are, for whoever reads the file")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = {"note": a.note, "runs": [loop_result(f) for f in a.folders]}
    atomic_write_text(a.out, json.dumps(out, indent=2) + "\n")
    for r in out["runs"]:
        log.info(
            "%s: %s s, success %s -> %s",
            r["out_dir"],
            r["wall_s"],
            r["summary"].get("success_before"),
            r["summary"].get("success_after"),
        )
    log.info("wrote %s", a.out)


if __name__ == "__main__":
    main()
