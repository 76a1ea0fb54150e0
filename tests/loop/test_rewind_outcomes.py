"""bench/rewind_outcomes.py: a monitored evaluation's failures counted by how they ended."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "rewind_outcomes.py"


def _rec(success: bool, rewinds: int, kinds: list[str], max_stage: int) -> dict:
    events = [{"kind": k, "step": i} for i, k in enumerate(kinds)]
    return {"success": success, "rewinds": rewinds, "events": events, "max_stage": max_stage}


def _run(tmp_path: Path, summary: dict) -> subprocess.CompletedProcess:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(summary))
    cmd = [sys.executable, str(SCRIPT), str(run), "--out", str(tmp_path / "o.json")]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_failures_are_counted_by_ending_and_stage(tmp_path: Path) -> None:
    records = [
        _rec(True, 1, ["alarm", "rewind"], 2),  # a success: not counted
        _rec(False, 2, ["alarm", "rewind", "alarm", "rewind"], 1),  # budget spent
        _rec(False, 1, ["alarm", "rewind", "checkpoint"], 1),  # no alarm after its last rewind
        _rec(False, 0, [], 0),  # never alarmed
        _rec(False, 1, ["alarm", "rewind", "alarm"], 0),  # an alarm left unused
    ]
    records[2]["events"][0]["reason"] = "progress"  # raised by the progress watchdog
    summary = {"stage_names": ["a", "b"], "records": records, "monitor": {"rewind": {"max_rewinds": 2}}}
    proc = _run(tmp_path, summary)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "o.json").read_text())["runs"]
    assert row["failures"] == 4 and row["episodes"] == 5
    assert row["endings"] == {
        "alarm_unused": {"a": 1},
        "no_alarm_last_attempt": {"a": 1, "b": 1},
        "spent": {"b": 1},
    }
    assert row["alarms"] == {"progress": 1, "score": 5}
    assert row["alarmed_episodes"] == {"success": {"score": 1}, "failure": {"progress": 1, "score": 2}}


def test_a_run_without_a_monitor_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, {"stage_names": ["a"], "records": []})
    assert proc.returncode != 0 and "not a monitored evaluation" in proc.stderr
