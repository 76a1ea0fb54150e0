"""bench/paired_runs.py: two evaluations of the same seeds compared seed by seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "paired_runs.py"


def _run_folder(root: Path, name: str, outcomes: dict[int, bool]) -> Path:
    run = root / name
    run.mkdir()
    records = [{"seed": s, "success": ok} for s, ok in outcomes.items()]
    (run / "summary.json").write_text(json.dumps({"records": records}))
    return run


def _cli(tmp_path: Path, *pairs: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), *pairs, "--out", str(tmp_path / "o.json")]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_fixed_broken_and_the_sign_test(tmp_path: Path) -> None:
    a = _run_folder(tmp_path, "a", {0: True, 1: False, 2: False, 3: True, 4: False})
    b = _run_folder(tmp_path, "b", {0: True, 1: True, 2: True, 3: False, 4: False})
    proc = _cli(tmp_path, f"{a}:{b}")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "o.json").read_text())["pairs"]
    assert (row["control_successes"], row["treatment_successes"]) == (2, 3)
    assert (row["fixed"], row["broken"]) == (2, 1)
    assert row["sign_test_p"] == 1.0  # 2 vs 1 of 3 discordant pairs: (1 + 3) / 8, doubled


def test_several_pairs_are_pooled(tmp_path: Path) -> None:
    a = _run_folder(tmp_path, "a", {0: True, 1: False, 2: False, 3: True, 4: False})
    b = _run_folder(tmp_path, "b", {0: True, 1: True, 2: True, 3: False, 4: False})
    c = _run_folder(tmp_path, "c", {5: False, 6: False, 7: True})
    d = _run_folder(tmp_path, "d", {5: True, 6: True, 7: True})
    proc = _cli(tmp_path, f"{a}:{b}", f"{c}:{d}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "o.json").read_text())
    assert len(result["pairs"]) == 2
    p = result["pooled"]
    assert (p["pairs"], p["episodes"], p["control_successes"], p["treatment_successes"]) == (2, 8, 3, 6)
    assert (p["fixed"], p["broken"]) == (4, 1)
    assert abs(p["sign_test_p"] - 2 * (1 + 5) / 2**5) < 1e-12
    seeds = p["by_seed"]  # no seed in two pairs: the test by seed is the sign test
    assert (seeds["shared_seeds"], seeds["seeds_changed"], seeds["net_change"]) == (0, 5, 3)
    assert abs(seeds["sign_flip_p"] - p["sign_test_p"]) < 1e-12
    one = _cli(tmp_path, f"{a}:{b}")
    assert one.returncode == 0 and "pooled" not in json.loads((tmp_path / "o.json").read_text())


def test_pairs_over_the_same_seeds_are_tested_by_seed(tmp_path: Path) -> None:
    """The same episodes counted twice (e.g. a nominal and a nudged pair that agree on every seed):
    the pooled sign test doubles its evidence, the test by seed does not."""
    outcomes = {s: s % 3 != 0 for s in range(12)}  # the control: seeds 0, 3, 6, 9 fail
    treated = {**outcomes, 0: True, 3: True, 6: True, 9: True, 1: False}  # 4 fixed, 1 broken
    a = _run_folder(tmp_path, "a", outcomes)
    b = _run_folder(tmp_path, "b", treated)
    assert _cli(tmp_path, f"{a}:{b}").returncode == 0
    (single,) = json.loads((tmp_path / "o.json").read_text())["pairs"]
    proc = _cli(tmp_path, f"{a}:{b}", f"{a}:{b}")
    assert proc.returncode == 0, proc.stderr
    p = json.loads((tmp_path / "o.json").read_text())["pooled"]
    assert (p["fixed"], p["broken"]) == (8, 2) and p["sign_test_p"] < single["sign_test_p"]
    seeds = p["by_seed"]
    assert (seeds["shared_seeds"], seeds["seeds_changed"], seeds["net_change"]) == (12, 5, 6)
    assert abs(seeds["sign_flip_p"] - single["sign_test_p"]) < 1e-12
    assert "by seed (12 seeds in more than one pair)" in proc.stderr


def test_the_sign_flip_test_counts_every_signing() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from paired_runs import sign_flip_test

    # changes 2, 1, -1: signings with |sum| >= 2 are (+2, +1, -1), (+2, -1, +1), (-2, +1, -1),
    # (-2, -1, +1), (+2, +1, +1), (-2, -1, -1): 6 of 8
    assert abs(sign_flip_test([2, 1, -1, 0]) - 6 / 8) < 1e-12
    assert sign_flip_test([]) == 1.0 and abs(sign_flip_test([3]) - 1.0) < 1e-12
    assert abs(sign_flip_test([1] * 6) - 2 / 2**6) < 1e-12


def test_sign_test_matches_the_binomial_tail() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from paired_runs import sign_test

    assert abs(sign_test(9, 2) - 2 * (1 + 11 + 55) / 2**11) < 1e-12
    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0


def test_runs_over_other_seeds_are_refused(tmp_path: Path) -> None:
    a = _run_folder(tmp_path, "a", {0: True, 1: False})
    b = _run_folder(tmp_path, "b", {0: True, 2: False})
    proc = _cli(tmp_path, f"{a}:{b}")
    assert proc.returncode != 0 and "ran different seeds" in proc.stderr
    assert _cli(tmp_path, str(a)).returncode != 0


def test_a_side_may_be_a_run_kept_in_a_monitor_results_json(tmp_path: Path) -> None:
    a = _run_folder(tmp_path, "a", {0: True, 1: False, 2: False})
    b = _run_folder(tmp_path, "b", {0: False, 1: True, 2: True})
    rows = [{"task": "stack3", "success": {"restore_none": json.loads((b / "summary.json").read_text())}}]
    result = tmp_path / "monitor_results.json"
    result.write_text(json.dumps({"command": "x", "rows": rows}))
    proc = _cli(tmp_path, f"{a}:{result}#stack3/restore_none")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "o.json").read_text())["pairs"]
    assert (row["control_successes"], row["treatment_successes"], row["fixed"], row["broken"]) == (1, 2, 2, 1)
    missing = _cli(tmp_path, f"{a}:{result}#stack3/restore_nudge")
    assert (
        missing.returncode != 0
        and "no run 'restore_nudge'" in missing.stderr
        and "restore_none" in missing.stderr
    )
    other = _cli(tmp_path, f"{a}:{result}#pick_place/restore_none")
    assert other.returncode != 0 and "no task 'pick_place' (tasks: stack3)" in other.stderr
