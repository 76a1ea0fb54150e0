"""bench/gate_floor.py: recorded promotion decisions replayed under ``promotion.floor=base``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gate_floor.py"


def _sel(rate: float) -> dict:
    """A recorded selection result (``EvalOutcome.to_json``) at ``rate``."""
    return {
        "episodes": 100,
        "successes": round(100 * rate),
        "success_rate": rate,
        "success_ci95": [0, 1],
        "max_stage_histogram": {},
        "mean_length": 50.0,
    }


def _gate(cand: float, dep: float, promoted: bool) -> dict:
    """A recorded gate decision (``PromotionOutcome.to_json``), made without the floor."""
    policy = {"version": "diffusion/0", "weights": "w", "sha256": "0", "parent": None}
    return {
        "rule": "not_worse",
        "tolerance": 0.05,
        "promoted": promoted,
        "candidate": policy,
        "candidate_selection": _sel(cand),
        "deployed_selection": _sel(dep),
    }


def _loop_file(tmp_path: Path) -> Path:
    """Two gated loops from a base at 50%: one drifts 50 -> 46 -> 41 (each step within the tolerance),
    the other 50 -> 47 -> 46; and a file that is not a loop result."""
    runs = [
        {
            "out_dir": f"loop_{name}",
            "rounds": {
                "round_00": {},
                "round_01": {"promotion": _gate(r1, 0.5, True), "control_promotion": _gate(0.5, 0.5, True)},
                "round_02": {"promotion": _gate(r2, r1, True), "control_promotion": None},
            },
        }
        for name, r1, r2 in (("drifts", 0.46, 0.41), ("holds", 0.47, 0.46))
    ]
    (tmp_path / "other.json").write_text(json.dumps({"results": {}}))
    path = tmp_path / "loops.json"
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_the_replay_finds_the_decision_the_floor_changes(tmp_path: Path) -> None:
    loops = _loop_file(tmp_path)
    out = tmp_path / "replay.json"
    cmd = [
        sys.executable,
        str(SCRIPT),
        str(loops),
        str(loops),
        str(tmp_path / "other.json"),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(out.read_text())
    assert result["files"] == [str(loops)] and result["loops"] == 2  # a loop listed twice counts once
    assert result["decisions"] == 6
    (changed,) = result["changed"]
    assert changed["out_dir"] == "loop_drifts" and changed["round"] == "round_02" and changed["arm"] == "main"
    assert changed["promoted"] and not changed["with_floor"]
    assert (changed["candidate"], changed["deployed"], changed["base"]) == (0.41, 0.46, 0.5)
