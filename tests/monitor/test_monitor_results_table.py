"""bench/monitor_results.py's tables: the failure cut per mode, and no number where the reference
has no failures to cut."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_tables():
    """``paired_table`` and ``tables`` of bench/monitor_results.py (bench/ is not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        from monitor_results import paired_table, tables
    finally:
        sys.path.remove(str(BENCH))
    return paired_table, tables


def _summary(rate: float) -> dict:
    return {"success_rate": rate, "success_ci95": [rate, rate], "records": []}


def test_failure_cut_and_a_reference_without_failures() -> None:
    _, tables = _bench_tables()
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


def _records(outcomes: list[tuple[bool, int]]) -> dict:
    recs = [{"seed": 10000 + i, "success": ok, "alarms": a} for i, (ok, a) in enumerate(outcomes)]
    rate = sum(ok for ok, _ in outcomes) / len(outcomes)
    return {"success_rate": rate, "success_ci95": [rate, rate], "records": recs}


def test_paired_table_counts_fixed_broken_and_alarmed_episodes() -> None:
    paired_table, _ = _bench_tables()
    # reference: seeds 0, 1 fail (0 alarmed), 2, 3 succeed (3 alarmed)
    ref = _records([(False, 2), (False, 0), (True, 0), (True, 1)])
    restore = _records([(True, 1), (False, 0), (True, 0), (False, 3)])  # fixes seed 0, breaks seed 3
    drive = _records([(False, 2), (False, 0), (True, 0), (True, 1)])
    success = {"norewind_none": ref, "restore_none": restore, "drive_none": drive}
    lines = paired_table([{"task": "stack3", "success": success}])
    row = next(line for line in lines if line.startswith("| stack3 | none"))
    cells = row.split(" | ")
    assert cells[3] == "1 / 2, 1 / 2"  # alarmed: failures, successes
    assert cells[4].endswith("(1 / 1)") and cells[5].endswith("(0 / 0)")
    assert row.endswith("| +0% / +0% |")


def test_restore_only_runs_leave_the_drive_cells_empty() -> None:
    paired_table, tables = _bench_tables()
    ref = _records([(False, 2), (False, 1), (True, 0), (True, 0)])
    restore = _records([(True, 1), (False, 2), (True, 0), (True, 0)])  # fixes seed 0
    success = {"base_none": ref, "norewind_none": ref, "restore_none": restore}  # --modes restore
    text = tables([{"task": "stack3", "success": success, "detectors": None}], episodes=4)
    rows = [line for line in text.splitlines() if line.startswith("| stack3 | none")]
    assert len(rows) == 2 and "nan" not in text
    assert rows[0].endswith("| 75% [0.75, 0.75] | - | +50% / - |")
    paired = next(line for line in paired_table([{"task": "stack3", "success": success}]) if "| none" in line)
    assert paired.endswith("(1 / 0) | - | +50% / - |")


def test_a_drive_only_run_fills_its_columns() -> None:
    """``--modes drive`` alone: rows with ``-`` for restore, not an empty table."""
    paired_table, tables = _bench_tables()
    ref = _records([(False, 1), (True, 0)])
    drive = _records([(True, 1), (True, 0)])
    success = {"base_none": _summary(0.5), "norewind_none": ref, "drive_none": drive}
    text = tables([{"task": "stack3", "success": success, "detectors": None}], episodes=2)
    (row,) = [line for line in text.splitlines() if line.startswith("| stack3 | none")][:1]
    assert "| - |" in row and row.endswith("| - / +100% |")
    (paired,) = [line for line in paired_table([{"task": "stack3", "success": success}]) if "stack3" in line]
    assert paired.split(" | ")[4] == "-" and paired.split(" | ")[5].endswith("(1 / 0)")
