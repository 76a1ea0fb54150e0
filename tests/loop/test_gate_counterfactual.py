"""bench/gate_counterfactual.py: a loop's gate replayed under another tolerance, from its loop result record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gate_counterfactual.py"


def _outcome(k: int) -> dict:
    """A recorded result (``EvalOutcome.to_json``) of ``k`` successes in 100 episodes."""
    return {
        "episodes": 100,
        "successes": k,
        "success_rate": k / 100,
        "success_ci95": [0, 1],
        "max_stage_histogram": {},
        "mean_length": 50.0,
    }


def _gate(version: str, sel: int, ev: int, promoted: bool, deployed_sel: int) -> dict:
    """A recorded gate decision (``PromotionOutcome.to_json``) at the default tolerance with the base floor."""
    gate = {
        "rule": "not_worse",
        "tolerance": 0.05,
        "promoted": promoted,
        "candidate": {"version": version, "weights": "w", "sha256": "0", "parent": None},
        "candidate_selection": _outcome(sel),
        "deployed_selection": _outcome(deployed_sel),
        "floor": "base",
        "base_selection": _outcome(50),
    }
    if not promoted:
        gate["candidate_eval"] = _outcome(ev)
    return gate


def _loop(tmp_path: Path, name: str, main: list[tuple[int, int]], control: list[tuple[int, int]]) -> Path:
    """A ``bench/loop_result.py`` file of one loop: base at selection 50 / eval 40, then per round
    (selection, eval) of each arm's candidate, gated at the default tolerance 0.05 with the base floor.
    A round's ``success`` is the deployed policy's: a stand-in of 1% when the candidate was rejected,
    which the replay must not read."""
    rounds = {"round_00": {"policy_version": "base", "success": 0.40, "promotion": None}}
    dep = {"main": 50, "control": 50}
    for r, (m, c) in enumerate(zip(main, control, strict=True), start=1):
        rec: dict = {}
        for arm, (sel, ev) in (("main", m), ("control", c)):
            ok = sel >= dep[arm] - 5 and sel >= 45
            gate = _gate(f"{name}_{arm}_r{r}", sel, ev, ok, dep[arm])
            dep[arm] = sel if ok else dep[arm]
            prefix = "" if arm == "main" else "control_"
            rec[f"{prefix}promotion"] = gate
            rec[f"{prefix}success"] = ev / 100 if ok else 0.01
        rounds[f"round_{r:02d}"] = rec
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"runs": [{"out_dir": name, "rounds": rounds}]}))
    return path


def _held(tmp_path: Path, versions: dict[str, int]) -> Path:
    res = {
        v: {"summary": {"policy_version": v, "successes": k, "episodes": 100}} for v, k in versions.items()
    }
    path = tmp_path / "held.json"
    path.write_text(json.dumps({"results": res}))
    return path


def _run(tmp_path: Path, loops: list[Path], tolerance: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), *map(str, loops), "--tolerance", tolerance]
    cmd += ["--out", str(tmp_path / "gc.json"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_the_loops_own_tolerance_reproduces_their_decisions_and_a_zero_one_keeps_round_1(
    tmp_path: Path,
) -> None:
    # round 2's main candidate is 2 points below round 1's on the selection seeds: promoted at 0.05
    loop = _loop(tmp_path, "a", main=[(60, 55), (58, 30)], control=[(52, 45), (40, 35)])
    proc = _run(tmp_path, [loop], "0.05")
    assert proc.returncode == 0, proc.stderr
    row = json.loads((tmp_path / "gc.json").read_text())["loops"][0]
    assert row["main"]["decisions"] == row["main"]["real"] == [True, True]
    assert (row["main"]["version"], row["main"]["successes"]) == ("a_main_r2", 30)
    # the control's round-2 candidate was rejected: it keeps round 1's policy, whose eval is 45
    assert (row["control"]["version"], row["control"]["successes"]) == ("a_control_r1", 45)
    assert _run(tmp_path, [loop], "0").returncode == 0
    out = json.loads((tmp_path / "gc.json").read_text())
    assert out["loops"][0]["main"]["decisions"] == [True, False]
    assert (out["loops"][0]["main"]["version"], out["loops"][0]["main"]["successes"]) == ("a_main_r1", 55)
    assert out["pooled"]["difference_points"] == pytest.approx(10.0)  # 55 vs 45


def test_an_earlier_different_decision_diverges_and_leaves_the_pool(tmp_path: Path) -> None:
    kept = _loop(tmp_path, "a", main=[(60, 55), (61, 58)], control=[(52, 45), (53, 44)])
    # round 1's main candidate is 1 below the base: promoted at 0.05, rejected at 0, so round 2 is unknown
    gone = _loop(tmp_path, "b", main=[(49, 70), (60, 70)], control=[(52, 45), (53, 44)])
    assert _run(tmp_path, [kept, gone], "0").returncode == 0
    out = json.loads((tmp_path / "gc.json").read_text())
    assert out["loops"][1]["main"]["diverged"] == 1 and "version" not in out["loops"][1]["main"]
    assert out["pooled"]["loops"] == 1
    assert out["pooled"]["main"]["successes"] == 58 and out["pooled"]["control"]["successes"] == 44


def test_held_out_results_are_matched_by_version_and_a_missing_one_is_named(tmp_path: Path) -> None:
    loop = _loop(tmp_path, "a", main=[(60, 55)], control=[(52, 45)])
    held = _held(tmp_path, {"a_main_r1": 50, "a_control_r1": 41})
    assert _run(tmp_path, [loop], "0.05", "--heldout", str(held)).returncode == 0
    pooled = json.loads((tmp_path / "gc.json").read_text())["pooled"]
    assert (pooled["main"]["successes"], pooled["main"]["episodes"]) == (105, 200)
    assert pooled["control"]["successes"] == 86
    held = _held(tmp_path, {"a_main_r1": 50})
    proc = _run(tmp_path, [loop], "0.05", "--heldout", str(held))
    assert proc.returncode != 0 and "a_control_r1" in proc.stderr


def test_a_file_that_is_not_a_loop_result_or_a_bad_tolerance_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": {}}))
    proc = _run(tmp_path, [other], "0")
    assert proc.returncode != 0 and "other.json" in proc.stderr and "loop_result" in proc.stderr
    loop = _loop(tmp_path, "a", main=[(60, 55)], control=[(52, 45)])
    proc = _run(tmp_path, [loop], "1.5")
    assert proc.returncode != 0 and "--tolerance" in proc.stderr


def test_a_file_that_is_not_a_held_out_result_is_named(tmp_path: Path) -> None:
    loop = _loop(tmp_path, "a", main=[(60, 55)], control=[(52, 45)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"runs": []}))
    proc = _run(tmp_path, [loop], "0.05", "--heldout", str(other))
    assert proc.returncode != 0 and "other.json" in proc.stderr and "results" in proc.stderr
    other.write_text(json.dumps({"results": {"x": {"summary": {"successes": 1, "episodes": 2}}}}))
    proc = _run(tmp_path, [loop], "0.05", "--heldout", str(other))
    assert proc.returncode != 0 and "policy_version" in proc.stderr
