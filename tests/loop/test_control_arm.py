"""The control arm in its own process (``parallel_control``): the same records as in-process, a failure
that names its cause, and no process left behind by an interrupted round."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from pathlib import Path

import pytest
from helpers.loop import loop_config

from rewind.loop import run_loop
from rewind.loop.control_arm import RESULT, ControlProcess
from rewind.loop.lineage import RECORD, load_record, round_dir


def _records(out: Path, rounds: int) -> list[dict]:
    recs = [json.loads((round_dir(out, r) / RECORD).read_text()) for r in range(rounds + 1)]
    return [{k: v for k, v in rec.items() if k != "timings_s"} for rec in recs]


def test_parallel_control_gives_the_in_process_records(tmp_path: Path, tiny_run) -> None:
    par, seq = tmp_path / "parallel", tmp_path / "sequential"
    run_loop(loop_config(par, tiny_run, control=True, parallel_control=True))
    run_loop(loop_config(seq, tiny_run, control=True, parallel_control=False))
    assert _records(par, 2) == _records(seq, 2)
    r2 = json.loads((round_dir(par, 2) / RECORD).read_text())
    assert r2["control"]["policy"]["parent"] != r2["policy"]["parent"]  # its own lineage, as in-process
    assert {"control_finetune", "control_eval", "finetune"} <= set(r2["timings_s"])
    assert "round 2 control" in (round_dir(par, 2) / "control" / "run.log").read_text()
    assert not (round_dir(seq, 2) / "control" / RESULT).exists()


def test_a_failed_control_process_names_the_round_and_its_cause(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "loop"
    cfg = loop_config(out, tiny_run, rounds=0, control=True)
    run_loop(cfg)
    base = load_record(out, 0)
    assert base is not None
    gone = dataclasses.replace(base, policy=dataclasses.replace(base.policy, weights="no/such/weights"))
    arm = ControlProcess(dataclasses.replace(cfg, rounds=1), out, 1, [gone])
    with pytest.raises(RuntimeError, match=r"round 1: the control arm's process failed \(.*no/such/weights"):
        arm.result({})
    assert "Traceback" in (round_dir(out, 1) / "control" / "run.log").read_text()


def test_an_interrupted_round_leaves_no_control_process(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "cut"

    def kill(r: int, stage: str) -> None:
        if (r, stage) == (1, "finetune"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_loop(loop_config(out, tiny_run, rounds=1, control=True), hook=kill)
    assert multiprocessing.active_children() == []
    summary = run_loop(loop_config(out, tiny_run, rounds=1, control=True))  # resumes, arm and all
    assert summary["rounds_done"] == 1 and load_record(out, 1).control is not None
