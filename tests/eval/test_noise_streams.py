"""``noise_streams`` of ``rewind-eval`` without a monitor, on the tiny policy in real MuJoCo: with
``episode`` every episode draws its own stream as the monitored runner does, so a plain run executes
the same actions as a monitored run with rewinds off and one TIDE sample (the two runners can be
paired episode by episode); ``batch`` (the default) keeps one generator per lockstep batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.monitor import MAX_STEPS, OFTEN, TinyMonitor
from helpers.train import run_cli

from rewind.config import ConfigError, to_dataclass
from rewind.eval import EvalConfig
from rewind.scripts.eval import main as eval_main
from rewind.store import ReplayStore


def _common(tiny_run: dict[str, Path], out: Path) -> list[str]:
    return [
        f"policy_path={tiny_run['train']}",
        "env=lift",
        f"env.max_steps={MAX_STEPS}",
        "device=cpu",
        "num_threads=1",
        "progress=false",
        "wandb.mode=disabled",
        "episodes=4",
        "ddim_eta=1.0",  # noise at every denoising step: any difference in the noise shows
        f"out_dir={out}",
        f"store_out={out / 'store'}",
    ]


def _actions(out: Path) -> dict[int, np.ndarray]:
    """Episode seed -> the actions its rollout executed (from ``store_out``)."""
    with ReplayStore.open(out / "store") as store:
        return {i.seed: store.load(i.id).actions for i in store.episodes()}


def _plain(tiny_run: dict[str, Path], out: Path, *overrides: str) -> dict[int, np.ndarray]:
    assert run_cli(eval_main, [*_common(tiny_run, out), *overrides]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "monitor" not in summary
    return _actions(out)


def test_episode_streams_match_a_monitored_run_with_rewinds_off(
    tiny_run: dict[str, Path], tiny_monitor: TinyMonitor, tmp_path: Path
) -> None:
    monitored_args = [
        "monitor=tide",
        f"monitor.calibration={tiny_monitor.calibrations[OFTEN]}",
        "rewind.max_rewinds=0",
        "rollout.batch_size=4",
        "rollout.inference_rows=4",
    ]
    assert run_cli(eval_main, [*_common(tiny_run, tmp_path / "mon"), *monitored_args]) == 0
    summary = json.loads((tmp_path / "mon" / "summary.json").read_text())
    assert summary["monitor"]["episodes_with_alarm"] > 0 and summary["monitor"]["rewinds"] == 0
    monitored = _actions(tmp_path / "mon")

    episode = _plain(tiny_run, tmp_path / "ep", "noise_streams=episode", "num_envs=4")
    batch = _plain(tiny_run, tmp_path / "batch", "num_envs=4")
    assert sorted(episode) == sorted(monitored) == [0, 1, 2, 3]
    for seed in monitored:
        np.testing.assert_array_equal(episode[seed], monitored[seed])
        assert not np.array_equal(batch[seed], monitored[seed])  # the default draws other noise


def test_episode_streams_do_not_depend_on_the_batch_split(tiny_run: dict[str, Path], tmp_path: Path) -> None:
    """The noise an episode draws is its own: 4 episodes in batches of 2 execute the same first chunk as
    in one batch of 4 (later steps may differ at float precision with the batch's shape); with
    ``batch`` the second batch of 2 draws other noise."""
    runs = {}
    for streams in ("episode", "batch"):
        for n in (2, 4):
            runs[streams, n] = _plain(
                tiny_run,
                tmp_path / f"{streams}{n}",
                f"noise_streams={streams}",
                f"num_envs={n}",
                "n_action_steps=7",
            )
    first = slice(0, 7)
    for seed in (0, 1, 2, 3):
        np.testing.assert_allclose(
            runs["episode", 2][seed][first], runs["episode", 4][seed][first], atol=1e-5
        )
    assert not np.allclose(runs["batch", 2][2][first], runs["batch", 4][2][first], atol=1e-3)


def test_an_unknown_noise_streams_names_the_valid_ones(tmp_path: Path) -> None:
    node = {"out_dir": str(tmp_path), "policy_path": "x", "noise_streams": "global"}
    with pytest.raises(ConfigError, match=r"noise_streams must be one of \[batch, episode\]; got 'global'"):
        to_dataclass(node, EvalConfig)
