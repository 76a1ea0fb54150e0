"""bench/monitor_results.py's tables: the failure cut per mode, and no number where the reference
has no failures to cut."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _summary(rate: float) -> dict:
    return {"success_rate": rate, "success_ci95": [rate, rate], "records": []}


def test_failure_cut_and_a_reference_without_failures() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from monitor_results import tables
    finally:
        sys.path.remove(str(BENCH))
    success = {
        "base_none": _summary(1.0),
        "restore_none": _summary(1.0),
        "drive_none": _summary(0.9),
        "base_nudge": _summary(0.6),
        "restore_nudge": _summary(0.8),
        "drive_nudge": _summary(0.6),
    }
    text = tables([{"task": "pick_place", "success": success, "detectors": None}], episodes=100)
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| pick_place")}
    assert rows["none"].endswith("| - / - |") and "nan" not in text
    assert rows["nudge"].endswith("| +50% / +0% |")
