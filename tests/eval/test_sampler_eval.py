"""bench/sampler_eval.py: one policy under several samplers, rows with the steps each used, and a clear
error for a malformed sampler spec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "sampler_eval.py"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--task", "lift", "--root", str(tmp_path / "runs"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False)


def test_samplers_side_by_side(tmp_path: Path, tiny_run: dict[str, Path]) -> None:
    out = tmp_path / "res.json"
    args = ["--policy", f"tiny={tiny_run['train']}", "--samplers", "policy", "ddim:2@1", "ddim:2:1"]
    res = _run(tmp_path, *args, "--episodes", "2", "--max-steps", "15", "--out", str(out))
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["sampler"] for r in rows] == ["policy", "ddim:2@1", "ddim:2:1"]
    assert [r["ddim_eta"] for r in rows] == [0.0, 0.0, 1.0]
    assert rows[1]["denoising_steps"] == 2 != rows[0]["denoising_steps"]
    assert rows[1]["n_action_steps"] == 1 and rows[0]["policy_version"] == rows[1]["policy_version"]
    assert "| tiny | ddim:2@1 | 2 | 1 |" in out.with_suffix(".md").read_text()


def test_bad_sampler_spec(tmp_path: Path) -> None:
    for bad in ("ddim:ten", "ddpm:50", "ddim:10:2"):
        res = _run(tmp_path, "--policy", "x=nowhere", "--samplers", "policy", bad)
        assert res.returncode != 0 and f"bad sampler {bad!r}" in res.stderr
    assert not (tmp_path / "runs").exists()  # checked before anything ran
