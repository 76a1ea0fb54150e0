"""bench/pool_arms.py: a loop's two arms pooled over loop seeds and seed ranges, and clear errors for a
missing round or held-out name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pool_arms.py"


def _loop(tmp_path: Path) -> Path:
    def rnd(r: int, main: float, ctl: float) -> dict:
        return {
            "round": r,
            "success_rate": main,
            "candidate_success": main,
            "control_success": ctl,
            "control_candidate_success": ctl,
        }

    runs = [
        {"out_dir": f"loop_s{s}", "summary": {"rounds": [rnd(0, 0.2, None), rnd(1, m, c)]}}
        for s, (m, c) in enumerate([(0.30, 0.20), (0.40, 0.30)])
    ]
    path = tmp_path / "loop.json"
    path.write_text(json.dumps({"runs": runs}))
    return path


def _held(tmp_path: Path) -> Path:
    res = {
        n: {"summary": {"successes": k, "episodes": 100}}
        for n, k in [("m0", 10), ("c0", 20), ("m1", 50), ("c1", 40)]
    }
    path = tmp_path / "held.json"
    path.write_text(json.dumps({"results": res}))
    return path


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--loop",
        str(_loop(tmp_path)),
        "--out",
        str(tmp_path / "p.json"),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


def _pooled(tmp_path: Path, *main: str) -> list[str]:
    """Round 1 pooled with the held-out file, ``main`` as the main arm's names, c0 c1 the control's."""
    return ["--round", "1", "--heldout", str(_held(tmp_path)), "--main", *main, "--control", "c0", "c1"]


def test_pool_arms_sums_eval_and_heldout_per_arm(tmp_path: Path) -> None:
    proc = _run(tmp_path, *_pooled(tmp_path, "m0", "m1"))
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "p.json").read_text())
    pooled = res["pooled"]
    assert (pooled["main"]["successes"], pooled["main"]["episodes"]) == (30 + 10 + 40 + 50, 400)
    assert (pooled["control"]["successes"], pooled["control"]["episodes"]) == (20 + 20 + 30 + 40, 400)
    assert abs(pooled["difference_points"] - 100 * (130 - 110) / 400) < 1e-9
    lo, hi = pooled["main"]["ci95"]
    assert lo < pooled["main"]["success"] < hi
    assert res["per_seed"][0]["main"]["successes"] == 40 and res["per_seed"][1]["control"]["successes"] == 70


def test_pool_arms_without_heldout_uses_the_eval_seeds_only(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--round", "1", "--eval-episodes", "50")
    assert proc.returncode == 0, proc.stderr
    pooled = json.loads((tmp_path / "p.json").read_text())["pooled"]
    assert pooled["main"]["successes"] == 15 + 20 and pooled["control"]["episodes"] == 100


def test_pool_arms_names_a_missing_round_and_a_missing_name(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--round", "2")
    assert proc.returncode != 0 and "has no round 2" in proc.stderr
    proc = _run(tmp_path, *_pooled(tmp_path, "m0", "mX"))
    assert proc.returncode != 0 and "['mX'] not in" in proc.stderr
    assert not (tmp_path / "p.json").exists()


def _rejected_round2(tmp_path: Path) -> list[str]:
    """A loop seed whose round-2 candidate (50%) was rejected (round 1's 30% deployed), held-out files
    for round 1's and round 2's policies; the pool_arms command line up to the arm names."""
    rounds = [
        {"round": 0, "success_rate": 0.2},
        {"round": 1, "success_rate": 0.30, "candidate_success": None, "control_success": 0.20},
        {"round": 2, "success_rate": 0.30, "candidate_success": 0.50, "control_success": 0.25},
    ]
    loop = {"runs": [{"out_dir": "loop_s0", "summary": {"rounds": rounds}}]}
    (tmp_path / "loop.json").write_text(json.dumps(loop))
    held1 = {"results": {"m_r1": {"summary": {"successes": 33, "episodes": 100}}}}
    held2 = {
        "results": {
            n: {"summary": {"successes": k, "episodes": 100}} for n, k in [("m_r2", 60), ("c_r2", 21)]
        }
    }
    (tmp_path / "h1.json").write_text(json.dumps(held1))
    (tmp_path / "h2.json").write_text(json.dumps(held2))
    return [
        sys.executable,
        str(SCRIPT),
        "--loop",
        str(tmp_path / "loop.json"),
        "--round",
        "2",
        "--out",
        str(tmp_path / "p.json"),
        "--heldout",
        str(tmp_path / "h1.json"),
        str(tmp_path / "h2.json"),
    ]


def test_pool_arms_deployed_replaces_a_rejected_candidate(tmp_path: Path) -> None:
    base = _rejected_round2(tmp_path)
    cand = subprocess.run([*base, "--main", "m_r2", "--control", "c_r2"], capture_output=True, text=True)
    assert cand.returncode == 0, cand.stderr
    res = json.loads((tmp_path / "p.json").read_text())
    assert res["arms"] == "candidates" and res["pooled"]["main"]["successes"] == 50 + 60
    dep = subprocess.run(
        [*base, "--deployed", "--main", "m_r1", "--control", "c_r2"], capture_output=True, text=True
    )
    assert dep.returncode == 0, dep.stderr
    res = json.loads((tmp_path / "p.json").read_text())
    assert res["arms"] == "deployed" and res["pooled"]["main"]["successes"] == 30 + 33
    assert res["pooled"]["control"]["successes"] == 25 + 21


def test_pool_arms_refuses_a_name_in_two_heldout_files(tmp_path: Path) -> None:
    base = _rejected_round2(tmp_path)
    other = {"results": {"m_r1": {"summary": {"successes": 99, "episodes": 100}}}}
    (tmp_path / "h3.json").write_text(json.dumps(other))
    clash = subprocess.run(
        [*base, str(tmp_path / "h3.json"), "--main", "m_r1", "--control", "c_r2"],
        capture_output=True,
        text=True,
    )
    assert clash.returncode != 0 and "m_r1 is in two --heldout files" in clash.stderr


def test_control_loop_supplies_the_control_arm_and_checks_the_seeds(tmp_path: Path) -> None:
    def run(seed: int, main: float, ctl: float | None) -> dict:
        rnd = {
            "round": 1,
            "success_rate": main,
            "candidate_success": main,
            "control_success": ctl,
            "control_candidate_success": ctl,
        }
        return {
            "out_dir": f"l{seed}",
            "command_line": f"rewind-loop seed={seed}",
            "summary": {"rounds": [rnd]},
        }

    (tmp_path / "nc.json").write_text(json.dumps({"runs": [run(0, 0.5, None), run(1, 0.6, None)]}))
    (tmp_path / "c.json").write_text(json.dumps({"runs": [run(0, 0.9, 0.3), run(1, 0.9, 0.4)]}))
    base = [sys.executable, str(SCRIPT), "--loop", str(tmp_path / "nc.json"), "--round", "1"]
    out = ["--out", str(tmp_path / "p.json")]
    proc = subprocess.run(base + out, capture_output=True, text=True)
    assert proc.returncode != 0 and "has no control arm" in proc.stderr
    proc = subprocess.run(
        base + ["--control-loop", str(tmp_path / "c.json"), *out], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    pooled = json.loads((tmp_path / "p.json").read_text())["pooled"]
    assert pooled["main"]["successes"] == 110 and pooled["control"]["successes"] == 70
    (tmp_path / "c.json").write_text(json.dumps({"runs": [run(1, 0.9, 0.4), run(0, 0.9, 0.3)]}))
    proc = subprocess.run(
        base + ["--control-loop", str(tmp_path / "c.json"), *out], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "loop seed 1" in proc.stderr


def test_the_recorded_loop_seed_is_checked_when_the_command_line_has_none(tmp_path: Path) -> None:
    # loop_result.py records each folder's seed from its resolved config; a loop run on its default
    # seed has no seed= on its command line, and the check must still catch swapped loops
    def run(seed: int, ctl: float | None) -> dict:
        rnd = {"round": 1, "success_rate": 0.5, "control_success": ctl}
        return {
            "out_dir": f"l{seed}",
            "command_line": "rewind-loop",
            "seed": seed,
            "summary": {"rounds": [rnd]},
        }

    (tmp_path / "nc.json").write_text(json.dumps({"runs": [run(0, None), run(1, None)]}))
    (tmp_path / "c.json").write_text(json.dumps({"runs": [run(1, 0.4), run(0, 0.3)]}))
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--loop",
        str(tmp_path / "nc.json"),
        "--round",
        "1",
        "--control-loop",
        str(tmp_path / "c.json"),
        "--out",
        str(tmp_path / "p.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "has loop seed 1" in proc.stderr and "l0 has 0" in proc.stderr
