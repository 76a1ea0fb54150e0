"""The loop's ``rollout`` node (``rewind-loop rollout.workers=N rollout.batch_size=B
rollout.backend=local|ray``): it reaches the calibration and every evaluation of a round, and a tiny
loop run with env workers records the same round as one run in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.loop import loop_config

from rewind.config import ConfigError
from rewind.loop import run_loop, stages
from rewind.loop.lineage import RECORD, check_identity, round_dir
from rewind.monitor.calibrate import CalibrationRollouts
from rewind.rollout.workers import EnvWorkers

ROLLOUT = {"workers": 2, "batch_size": 2, "step_timeout_s": 30.0}


def test_the_rollout_node_reaches_calibration_and_evaluation(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "o", rollout=ROLLOUT)
    ccfg = stages.calibrate_config(cfg, tmp_path / "w", "demos", tmp_path / "cal")
    ecfg = stages.eval_config(cfg, tmp_path / "w", tmp_path / "eval")
    rcfg = stages.eval_config(cfg, tmp_path / "w", tmp_path / "eval_rewind", str(tmp_path / "cal"))
    for rollout in (ccfg.rollout, ecfg.rollout, rcfg.rollout):
        assert rollout == cfg.rollout and rollout is not cfg.rollout
        assert (rollout.workers, rollout.batch_size, rollout.step_timeout_s) == (2, 2, 30.0)
    ray = loop_config(tmp_path / "r", rollout={"backend": "ray", "actors": 3})
    assert stages.eval_config(ray, tmp_path / "w", tmp_path / "eval").rollout.backend == "ray"
    assert stages.eval_config(ray, tmp_path / "w", tmp_path / "eval").rollout.actors == 3
    assert stages.calibrate_config(ray, tmp_path / "w", "d", tmp_path / "cal").rollout.backend == "local"
    with pytest.raises(
        ConfigError, match=r"^rollout.workers needs rollout.backend=local; use rollout.actors$"
    ):
        loop_config(tmp_path / "bad", rollout={"backend": "ray", "workers": 2})


def test_a_resumed_loop_may_change_where_rollouts_run_but_not_inference_rows(tmp_path: Path) -> None:
    out = tmp_path / "loop"
    assert check_identity(out, loop_config(out)) is False
    assert check_identity(out, loop_config(out, rollout=ROLLOUT)) is True
    assert check_identity(out, loop_config(out, rollout={"backend": "ray"})) is True
    with pytest.raises(ConfigError, match=r"rollout\.inference_rows\).*but rollout\.inference_rows"):
        check_identity(out, loop_config(out, rollout={"inference_rows": 4}))


def _round0(out: Path) -> dict[str, Any]:
    """Round 0's record without its timings (seconds per stage, the monitor's milliseconds per step)."""
    record = json.loads((round_dir(out, 0) / RECORD).read_text())
    record.pop("timings_s")
    record["eval_rewind"]["monitor"].pop("monitor_ms_per_step")
    return record


def test_a_loop_with_env_workers_records_the_same_round_as_in_process(
    tmp_path: Path, tiny_run: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tiny policy never succeeds: count every calibration rollout as a success, so that the round
    # calibrates (alpha 0.5: the threshold is the 2nd largest of the 3 rollouts' largest scores)
    monkeypatch.setattr(CalibrationRollouts, "successful_traces", property(lambda run: run.traces))
    pools: list[int] = []
    start = EnvWorkers.__init__

    def counted(self: EnvWorkers, *args: Any, **kwargs: Any) -> None:
        start(self, *args, **kwargs)
        pools.append(self.num_workers)

    monkeypatch.setattr(EnvWorkers, "__init__", counted)
    common = {"rounds": 0, "monitor": {"alpha": 0.5}, "eval": {"episodes": 3, "num_envs": 3, "rewind": True}}
    run_loop(loop_config(tmp_path / "here", tiny_run, **common))
    assert pools == []
    run_loop(loop_config(tmp_path / "there", tiny_run, rollout=ROLLOUT, **common))
    assert pools == [2, 2, 2, 2]  # calibration, evaluation, evaluation with rewind, selection
    here, there = _round0(tmp_path / "here"), _round0(tmp_path / "there")
    assert here["calibration"]["calibrated"] and here["calibration"]["threshold"] is not None
    assert here["eval_rewind"]["monitor"]["rewinds"] > 0  # the monitored evaluation rewound
    assert there == here
