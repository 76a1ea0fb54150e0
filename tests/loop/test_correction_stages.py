"""bench/correction_stages.py: per correction segment, its rewind target and the stage it starts in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rewind.envs.registry import make_env
from rewind.store import ReplayStore

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "correction_stages.py"


def test_segments_are_paired_with_their_rewinds_and_staged_from_the_physics(tmp_path: Path, tiny_run) -> None:
    """Two correction segments in each demo copy (steps 2..5 after an alarm and a rewind to ``start``,
    the last 4 after a stall and a rewind to ``after_grasp``), one in an undone segment (never counted):
    the script's counts are the env's stages at those steps, per rewind target and per trigger."""
    env = make_env("lift").unwrapped
    names = [*env.stage_names, "done"]
    store, expect, by_trigger, steps = tmp_path / "round", {}, {}, 0
    with ReplayStore.open(tiny_run["store"]) as src, ReplayStore.create(store, src.spec) as dst:
        for info in src.episodes():
            ep = src.load(info.id)
            n = len(ep.actions)
            labels = ["policy"] * n
            for t in [*range(2, 6), *range(n - 4, n)]:
                labels[t] = "correction"
            labels[n // 2] = "correction"  # in the undone segment below
            events = [
                e
                for trig, c in (("alarm", "start"), ("stall", "after_grasp"))
                for e in ({"kind": "intervention", "trigger": trig}, {"kind": "rewind", "checkpoint": c})
            ]
            extra = {"events": events, "segment_starts": [0, n // 2, n // 2 + 1], "undone_segments": [1]}
            dst.add_episode(ep.obs, ep.actions, ep.states, labels, meta={"extra": extra})
            for t, target, trig in ((2, "start", "alarm"), (n - 4, "after_grasp", "stall")):
                env.set_physics_state(ep.states[t])
                key = f"{target} -> {names[env.stage()]}"
                expect[key] = expect.get(key, 0) + 1
                row = by_trigger.setdefault(f"{trig} -> {names[env.stage()]}", {"segments": 0, "steps": 0})
                row["segments"] += 1
                row["steps"] += 4
            steps += 8
    out = tmp_path / "stages.json"
    cmd = [sys.executable, str(SCRIPT), "--task", "lift", f"r1={store}", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())["stores"]["r1"]
    assert got["by_start"] == dict(sorted(expect.items()))
    assert got["by_trigger"] == dict(sorted(by_trigger.items()))
    assert got["segments"] == 2 * len(list(tiny_run["store"].glob("episodes/*.h5"))) > 0
    assert got["steps"] == sum(got["steps_by_stage"].values()) == steps
    assert "r1 | all (" in out.with_suffix(".md").read_text()


def test_a_store_argument_without_a_name_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "NAME=STORE_PATH" in proc.stderr
