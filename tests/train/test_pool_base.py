"""bench/pool_base.py: base-recipe evaluations pooled over training seeds, and clear errors for a missing
row, a malformed entry and rows on different evaluation seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pool_base.py"


def _result(
    tmp_path: Path, name: str, variant: str, success: float, seed: int, eval_seed: int = 70000
) -> str:
    row = {"variant": variant, "success": success, "episodes": 100, "eval_seed": eval_seed}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"train_seed": seed, "rows": [row]}))
    return f"{path}:{variant}"


def _run(tmp_path: Path, *arms: str) -> subprocess.CompletedProcess:
    args = [a for arm in arms for a in ("--arm", arm)]
    cmd = [sys.executable, str(SCRIPT), *args, "--out", str(tmp_path / "p.json")]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_pools_each_arm_over_its_seeds(tmp_path: Path) -> None:
    a0 = _result(tmp_path, "a0", "x_act2", 0.42, 0)
    a1 = _result(tmp_path, "a1", "x_act2", 0.36, 1)
    b0 = _result(tmp_path, "b0", "act2", 0.30, 0)
    b1 = _result(tmp_path, "b1", "act2", 0.25, 1)
    res = _run(tmp_path, f"new={a0},{a1}", f"old={b0},{b1}")
    assert res.returncode == 0, res.stderr
    arms = {a["arm"]: a for a in json.loads((tmp_path / "p.json").read_text())["arms"]}
    assert (arms["new"]["successes"], arms["new"]["episodes"]) == (78, 200)
    assert (arms["old"]["successes"], arms["old"]["episodes"]) == (55, 200)
    assert [r["train_seed"] for r in arms["new"]["runs"]] == [0, 1]
    lo, hi = arms["new"]["ci95"]
    assert lo < 0.39 < hi
    assert arms["old"]["minus_first_points"] == -11.5
    table = (tmp_path / "p.md").read_text()
    assert "78/200" in table and "seed 1: 25%" in table


def test_missing_row_names_the_rows_found(tmp_path: Path) -> None:
    a0 = _result(tmp_path, "a0", "x_act2", 0.42, 0)
    res = _run(tmp_path, f"new={a0.rsplit(':', 1)[0]}:nope")
    assert res.returncode != 0
    assert "no row 'nope'" in res.stderr and "x_act2" in res.stderr


def test_malformed_entry_and_mixed_eval_seeds_are_refused(tmp_path: Path) -> None:
    a0 = _result(tmp_path, "a0", "x_act2", 0.42, 0)
    b0 = _result(tmp_path, "b0", "act2", 0.30, 0, eval_seed=10000)
    assert "expected NAME=FILE:VARIANT" in _run(tmp_path, a0).stderr
    res = _run(tmp_path, f"new={a0}", f"old={b0}")
    assert res.returncode != 0 and "different evaluation seeds" in res.stderr
    assert not (tmp_path / "p.json").exists()


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    res = _run(tmp_path, f"new={bad}:x_act2")
    assert res.returncode != 0 and "bad.json: not a readable base_ablation.py result file" in res.stderr
    res = _run(tmp_path, f"new={tmp_path / 'missing.json'}:x_act2")
    assert res.returncode != 0 and "missing.json: not a readable" in res.stderr


def test_choose_takes_the_most_successes_and_a_tie_keeps_the_first(tmp_path: Path) -> None:
    inc = _result(tmp_path, "inc", "act2", 0.50, 0)
    tie = _result(tmp_path, "tie", "act2_inf50", 0.50, 0)
    best = _result(tmp_path, "best", "act2_ddpm", 0.53, 0)
    cmd = [sys.executable, str(SCRIPT), "--arm", f"inc={inc}", "--arm", f"tie={tie}", "--choose"]
    res = subprocess.run([*cmd, "--out", str(tmp_path / "t.json")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "inc"
    assert json.loads((tmp_path / "t.json").read_text())["chosen"] == "inc"
    res = subprocess.run(
        [*cmd, "--arm", f"best={best}", "--out", str(tmp_path / "b.json")], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "best"
    assert "**best**" in (tmp_path / "b.md").read_text()
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--arm", f"inc={inc}", "--out", str(tmp_path / "n.json")],
        capture_output=True,
        text=True,
    )
    assert res.stdout == "" and "chosen" not in json.loads((tmp_path / "n.json").read_text())


def test_arms_may_span_several_seed_ranges_when_every_arm_spans_them(tmp_path: Path) -> None:
    a = [_result(tmp_path, f"a{e}", "x_act2", p, 0, eval_seed=e) for e, p in ((70000, 0.40), (110000, 0.60))]
    b = [_result(tmp_path, f"b{e}", "act2", 0.30, 0, eval_seed=e) for e in (70000, 110000)]
    res = _run(tmp_path, f"new={','.join(a)}", f"old={','.join(b)}")
    assert res.returncode == 0, res.stderr
    record = json.loads((tmp_path / "p.json").read_text())
    assert record["eval_seed"] == [70000, 110000]
    assert (record["arms"][0]["successes"], record["arms"][0]["episodes"]) == (100, 200)
    assert "seed 0 on 110000..: 60%" in (tmp_path / "p.md").read_text()
    res = _run(tmp_path, f"new={','.join(a)}", f"old={b[0]}")  # old lacks the second range
    assert res.returncode != 0 and "different evaluation seeds" in res.stderr
