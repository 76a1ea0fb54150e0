"""bench/heldout_eval.py: the result file from each policy's evaluation summary (with its Wilson
interval), resuming from finished folders, and clear errors on malformed arguments or a folder that
holds other seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "heldout_eval.py"


def _summary(folder: Path, first_seed: int, episodes: int, successes: int) -> None:
    folder.mkdir(parents=True)
    records = [{"seed": first_seed + i, "success": i < successes} for i in range(episodes)]
    data = {
        "episodes": episodes,
        "successes": successes,
        "success_rate": successes / episodes,
        "records": records,
    }
    (folder / "summary.json").write_text(json.dumps(data))


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--root",
        str(tmp_path / "root"),
        "--out",
        str(tmp_path / "r.json"),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_finished_folders_are_read_back_with_their_interval(tmp_path: Path) -> None:
    weights = tmp_path / "w"
    weights.mkdir()
    _summary(tmp_path / "root" / "stack3_70000" / "a", 70000, 20, 5)
    proc = _run(tmp_path, "--env", "stack3", "--seed", "70000", "--episodes", "20", f"a={weights}")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "r.json").read_text())
    row = res["results"]["a"]
    assert res["env"] == "stack3" and res["seed"] == 70000 and row["success"] == 0.25
    lo, hi = row["ci95"]
    assert 0.08 < lo < 0.25 < hi < 0.5


def test_a_folder_with_other_seeds_is_an_error(tmp_path: Path) -> None:
    weights = tmp_path / "w"
    weights.mkdir()
    _summary(tmp_path / "root" / "stack3_70000" / "a", 10000, 20, 5)
    proc = _run(tmp_path, "--env", "stack3", "--seed", "70000", "--episodes", "20", f"a={weights}")
    assert proc.returncode != 0 and "from seed 10000, not 20 from 70000" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_malformed_policy_arguments_are_named(tmp_path: Path) -> None:
    proc = _run(tmp_path, "no_equals_sign")
    assert proc.returncode != 0 and "expected NAME=WEIGHTS" in proc.stderr
    proc = _run(tmp_path, f"a={tmp_path / 'missing'}")
    assert proc.returncode != 0 and "a: no such weights path" in proc.stderr
    proc = _run(tmp_path, f"a={tmp_path}", f"a={tmp_path}")
    assert proc.returncode != 0 and "given twice" in proc.stderr


def test_ddim_eta_reads_its_own_folder_and_refuses_another_eta(tmp_path: Path) -> None:
    weights = tmp_path / "w"
    weights.mkdir()
    _summary(tmp_path / "root" / "stack3_70000_eta1" / "a", 70000, 20, 7)
    summary = tmp_path / "root" / "stack3_70000_eta1" / "a" / "summary.json"
    data = json.loads(summary.read_text())
    summary.write_text(json.dumps({**data, "ddim_eta": 1.0}))
    args = ("--env", "stack3", "--seed", "70000", "--episodes", "20", "--ddim-eta", "1", f"a={weights}")
    proc = _run(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["ddim_eta"] == 1.0 and res["results"]["a"]["success"] == 0.35
    summary.write_text(json.dumps({**data, "ddim_eta": 0.0}))
    (tmp_path / "r.json").unlink()
    proc = _run(tmp_path, *args)
    assert proc.returncode != 0 and "sampled with ddim_eta=0.0, not 1.0" in proc.stderr
    assert not (tmp_path / "r.json").exists()
    proc = _run(tmp_path, "--ddim-eta", "2", f"a={weights}")
    assert proc.returncode != 0 and "--ddim-eta must be in [0, 1]" in proc.stderr
