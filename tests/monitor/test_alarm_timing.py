"""bench/alarm_timing.py on real rewind-eval runs of the tiny policy with a monitor and no rewinds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.monitor import ALWAYS, monitored_eval_args
from helpers.train import run_cli

from rewind.scripts.eval import main as eval_main

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "alarm_timing.py"


def _eval(tiny_run, cal: Path, out: Path, max_rewinds: int) -> Path:
    args = [*monitored_eval_args(tiny_run, cal, 4), f"rewind.max_rewinds={max_rewinds}", f"out_dir={out}"]
    assert run_cli(eval_main, args) == 0
    return out


def test_a_score_over_its_threshold_everywhere_alarms_first_at_the_first_chunk_comparison(
    tiny_run, tiny_monitor, tmp_path
) -> None:
    """With a threshold every score exceeds, each episode's first alarm is at the first scored step
    (``n_action_steps``), before any checkpoint; the counts split the episodes by outcome."""
    run = _eval(tiny_run, tiny_monitor.calibrations[ALWAYS], tmp_path / "always", 0)
    summary = json.loads((run / "summary.json").read_text())
    out = tmp_path / "timing.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), f"always={run}", "--out", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())["runs"]["always"]
    n_success = sum(bool(r["success"]) for r in summary["records"])
    assert got["success"]["episodes"] == n_success and got["episodes"] == 4
    assert got["success"]["episodes"] + got["failure"]["episodes"] == 4
    for outcome in ("success", "failure"):
        n = got[outcome]["episodes"]
        assert got[outcome]["alarmed"] == got[outcome]["first_alarm_at_first_scored_step"] == n
        assert got[outcome]["first_alarm_at"] == ({"start": n} if n else {})
    assert "| always |" in out.with_suffix(".md").read_text()


def test_a_run_that_rewound_is_refused(tiny_run, tiny_monitor, tmp_path) -> None:
    run = _eval(tiny_run, tiny_monitor.calibrations[ALWAYS], tmp_path / "rewound", 1)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), f"r={run}", "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "rewind.max_rewinds=0" in proc.stderr
