"""The loop's stages get typed configs derived from the loop's own: every option of the loop's ``env``
node (``max_steps``, ``rgb``, ``image_size``, ``camera``), its device, threads and progress reach a round's
training and evaluation (they used to be lost on the way through hand-built dicts)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from helpers.loop import loop_config

from rewind.loop import stages
from rewind.train import DataConfig

ENV = {"name": "lift", "max_steps": 50, "rgb": True, "image_size": 32, "camera": "top"}


def test_every_env_option_reaches_a_rounds_evaluation(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "o", env=ENV, device="cpu", num_threads=1)
    ecfg = stages.eval_config(cfg, tmp_path / "w", tmp_path / "eval")
    for f in dataclasses.fields(cfg.env):
        assert getattr(ecfg.env, f.name) == getattr(cfg.env, f.name), f.name
    assert (ecfg.env.rgb, ecfg.env.image_size, ecfg.env.camera) == (True, 32, "top")
    assert (ecfg.episodes, ecfg.seed, ecfg.num_envs) == (cfg.eval.episodes, cfg.eval.seed, cfg.eval.num_envs)
    assert (ecfg.device, ecfg.num_threads, ecfg.progress) == (cfg.device, cfg.num_threads, cfg.progress)
    assert not ecfg.monitor.enabled and ecfg.wandb.mode == "disabled"


def test_evaluation_with_rewind_takes_the_loops_monitor(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "o", env=ENV, monitor={"score": "tide", "alpha": 0.3, "tide_window": 3})
    ecfg = stages.eval_config(cfg, tmp_path / "w", tmp_path / "eval_rewind", str(tmp_path / "cal"))
    assert ecfg.monitor == dataclasses.replace(cfg.monitor, calibration=str(tmp_path / "cal"))
    assert (ecfg.rewind.mode, ecfg.rewind.max_rewinds) == ("restore", 3)
    assert ecfg.env == cfg.env


def test_a_rounds_training_gets_the_loops_env_and_settings(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "o", env=ENV)
    optim = stages.optim_config(steps=10, batch_size=8, lr=1e-3, warmup=50)
    tcfg = stages.train_config(cfg, tmp_path / "t", DataConfig(path="s"), {"name": "diffusion"}, 7, optim)
    assert tcfg.env == cfg.env and tcfg.seed == 7 and tcfg.out_dir == str(tmp_path / "t")
    assert (tcfg.train.warmup_steps, tcfg.train.save_every, tcfg.train.val_every) == (9, 10, 0)
    assert (tcfg.device, tcfg.num_threads, tcfg.progress) == (cfg.device, cfg.num_threads, cfg.progress)


def test_a_rounds_calibration_gets_the_loops_monitor_and_settings(tmp_path: Path) -> None:
    cfg = loop_config(
        tmp_path / "o",
        env=ENV,
        monitor={"score": "tide", "alpha": 0.3, "tide_window": 3, "labeler": "gripper"},
        calibration={"episodes": 7, "seed": 123, "max_demos": 5},
    )
    ccfg = stages.calibrate_config(cfg, tmp_path / "w", "demos", tmp_path / "cal")
    assert ccfg.monitor == cfg.monitor and ccfg.monitor is not cfg.monitor
    assert ccfg.env == cfg.env
    assert (ccfg.episodes, ccfg.seed, ccfg.max_demos) == (7, 123, 5)
    assert (ccfg.policy_path, ccfg.data_path, ccfg.out_dir) == (
        str(tmp_path / "w"),
        "demos",
        str(tmp_path / "cal"),
    )
    assert (ccfg.device, ccfg.num_threads, ccfg.progress) == (cfg.device, cfg.num_threads, cfg.progress)
    assert ccfg.n_action_steps is None  # as trained, like the round's evaluation


def test_the_loops_ddim_eta_reaches_every_rollout(tmp_path: Path, tiny_run) -> None:
    """``ddim_eta`` samples every rollout of a loop from an existing base with that eta (its weights
    say 0): calibration and evaluation configs, and the base's evaluation as run."""
    import json

    from rewind.loop import run_loop

    cfg = loop_config(tmp_path / "o", env=ENV, ddim_eta=1.0)
    assert stages.eval_config(cfg, tmp_path / "w", tmp_path / "e").ddim_eta == 1.0
    assert stages.calibrate_config(cfg, tmp_path / "w", "d", tmp_path / "c").ddim_eta == 1.0
    assert loop_config(tmp_path / "p").ddim_eta is None
    run_loop(loop_config(tmp_path / "run", base=tiny_run, rounds=0, ddim_eta=1.0))
    summary = json.loads((tmp_path / "run" / "round_00" / "eval" / "summary.json").read_text())
    assert summary["ddim_eta"] == 1.0
