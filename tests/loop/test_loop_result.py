"""bench/loop_result.py: one result file from a loop folder's own records, and a clear error on a
folder that is not a finished loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "loop_result.py"


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_loop_result_gathers_the_runs_records(tmp_path: Path) -> None:
    run = tmp_path / "loop"
    _write(
        run / "run.json", {"command_line": "rewind-loop rounds=1", "git_revision": "abc", "duration_s": 12.5}
    )
    _write(run / "summary.json", {"success_before": 0.3, "success_after": 0.5})
    (run / "config.yaml").write_text("rounds: 1\nseed: 7\n")  # the loop's resolved config
    for r, (version, success) in enumerate([("v0", 0.3), ("v1", 0.5)]):
        rec = {
            "policy": {"version": version},
            "eval": {"success_rate": success},
            "timings_s": {"eval": r + 1.0},
        }
        if r:
            rec["control"] = {"policy": {"version": "c1"}, "eval": {"success_rate": 0.4}}
            rec["collection"] = {
                "interventions": 3,
                "triggers": {"progress": 1, "stall": 2},
                "per_episode": [],
            }
        _write(run / f"round_0{r}" / "round.json", rec)
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(SCRIPT), str(run), "--note", "n", "--out", str(out)], check=True)
    res = json.loads(out.read_text())["runs"][0]
    assert res["wall_s"] == 12.5 and res["command_line"] == "rewind-loop rounds=1" and res["seed"] == 7
    assert (
        res["rounds"]["round_01"]["control_version"] == "c1"
        and res["rounds"]["round_00"]["control_version"] is None
    )
    assert res["rounds"]["round_01"]["timings_s"] == {"eval": 2.0} and res["summary"]["success_after"] == 0.5
    collection = res["rounds"]["round_01"]["collection"]
    assert collection["triggers"] == {"progress": 1, "stall": 2} and collection["interventions"] == 3
    assert "per_episode" not in collection and res["rounds"]["round_00"]["collection"] is None


def test_loop_result_names_a_missing_record(tmp_path: Path) -> None:
    _write(tmp_path / "loop" / "run.json", {})
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "loop"), "--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "summary.json is missing" in proc.stderr
    assert not (tmp_path / "r.json").exists()
