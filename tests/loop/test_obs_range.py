"""bench/obs_range.py on a real store and policy: the training demos lie inside the normalizer's
range, a label filter selects steps, and bad arguments are named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "obs_range.py"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "r.json"), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_demos_lie_inside_a_normalizer_refit_to_them(tiny_run: dict[str, Path], tmp_path: Path) -> None:
    store, weights = str(tiny_run["store"]), str(tiny_run["train"])
    proc = _run(
        tmp_path, "--weights", weights, f"all={store}", f"none={store}:correction", "--refit-on", store
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "r.json").read_text())["data"]
    refit = res["all"]["refit_normalizer"]
    assert "action" in refit and any(k.startswith("obs/") for k in refit)
    assert all(v["max_abs"] <= 1.001 and v["frac_over"] == 0.0 for v in refit.values())
    assert res["all"]["policy_normalizer"]["action"]["steps"] > 0
    assert res["none"]["policy_normalizer"] == {}  # demos only: no correction steps
    assert "no steps labelled ['correction']" in proc.stderr


def test_bad_arguments_are_named(tiny_run: dict[str, Path], tmp_path: Path) -> None:
    weights, store = str(tiny_run["train"]), str(tiny_run["store"])
    proc = _run(tmp_path, "--weights", weights, f"x={store}:not_a_label")
    assert proc.returncode != 0 and "unknown step label(s) ['not_a_label']" in proc.stderr
    proc = _run(tmp_path, "--weights", weights, "no_equals")
    assert proc.returncode != 0 and "expected NAME=STORE" in proc.stderr
    assert not (tmp_path / "r.json").exists()
