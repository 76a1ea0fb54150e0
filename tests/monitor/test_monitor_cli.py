"""The monitor commands end to end with a tiny policy: rewind-calibrate, rewind-eval with a monitor,
rewind-monitor-eval; and their refusals."""

import json
import shutil

import numpy as np
from helpers.monitor import ALWAYS
from helpers.train import run_cli

from rewind.envs.registry import make_env
from rewind.monitor import Calibration
from rewind.monitor.detection import ScoredEpisode, auroc, detection_metrics, first_alarm, point_of_no_return
from rewind.monitor.episode import MonitoredEpisode, rewindable
from rewind.scripts.calibrate import main as calibrate_main
from rewind.scripts.eval import main as eval_main
from rewind.scripts.monitor_eval import main as monitor_eval_main


def _common(tiny_run) -> list[str]:
    return [f"policy_path={tiny_run['train']}", "env=lift", "device=cpu", "progress=false"]


def test_calibrate_states_the_minimum_n(tiny_run, tmp_path, capsys) -> None:
    args = [*_common(tiny_run), f"data_path={tiny_run['store']}", "episodes=2", f"out_dir={tmp_path / 'cal'}"]
    assert run_cli(calibrate_main, args) == 2  # the tiny policy never succeeds
    err = capsys.readouterr().err
    assert "needs at least 19 successful calibration rollouts; got 0" in err
    assert (tmp_path / "cal" / "checkpoint_library.json").exists()  # the library was built first
    assert run_cli(calibrate_main, [*args[:-1], "monitor=none", f"out_dir={tmp_path / 'c2'}"]) == 2


def test_eval_with_monitor_rewinds_and_logs_events(tiny_run, tiny_monitor, tmp_path, capsys) -> None:
    cal_dir = shutil.copytree(tiny_monitor.calibrations[ALWAYS], tmp_path / "cal")  # replaced below
    store = tmp_path / "rollouts"
    args = [
        *_common(tiny_run),
        "episodes=2",
        "monitor=tide",
        f"monitor.calibration={cal_dir}",
        "rewind=restore",
        "rewind.max_rewinds=2",
        f"store_out={store}",
        "wandb.mode=disabled",
    ]
    assert run_cli(eval_main, [*args, f"out_dir={tmp_path / 'ev'}"]) == 0
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary["monitor"]["rewinds"] == 4 and summary["monitor"]["rewind"]["mode"] == "restore"
    plots = summary["monitor"]["plots"]
    assert len(plots) == 2 and all((tmp_path / "ev" / p.split("/")[-1]).stat().st_size > 0 for p in plots)
    events = summary["records"][0]["events"]
    assert [e["kind"] for e in events].count("rewind") == 2
    assert {"step", "score", "threshold", "checkpoint"} <= set(events[0])
    from rewind.store import ReplayStore

    with ReplayStore.open(store) as st:
        infos = st.episodes()
        assert len(infos) == 2 and infos[0].extra["rewinds"] == 2
    # a calibration records how the policy sampled; evaluating with another sampler is refused
    import torch

    from rewind.train.policy_api import load_policy, sampler_tag

    env = make_env("lift")
    tag = sampler_tag(load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu")).policy)
    env.close()
    cal = Calibration.load(cal_dir)
    cal.sampler = tag
    cal.save(cal_dir)
    assert tag.startswith("ddim:") and tag.endswith(":eta=0")
    assert run_cli(eval_main, [*args, f"out_dir={tmp_path / 'ev_same'}"]) == 0
    assert run_cli(eval_main, [*args, "ddim_eta=1.0", f"out_dir={tmp_path / 'ev_eta'}"]) == 2
    assert f"calibrated with the policy sampling {tag}" in capsys.readouterr().err
    # TIDE over the mean of S chunks: the calibration's S must be the evaluation's
    assert run_cli(eval_main, [*args, "monitor.tide_samples=4", f"out_dir={tmp_path / 'ev_s4'}"]) == 2
    assert "calibrated with monitor.tide_samples=1, but monitor.tide_samples=4" in capsys.readouterr().err
    Calibration("tide", 0.5, 1, 1e-12, "0" * 64).save(cal_dir)  # made for other weights
    assert run_cli(eval_main, [*args, f"out_dir={tmp_path / 'ev2'}"]) == 2
    assert "recalibrate" in capsys.readouterr().err
    assert run_cli(eval_main, [*args[:-3], "rewind.mode=rewire", f"out_dir={tmp_path / 'ev3'}"]) == 2


def test_monitor_eval_refuses_unknown_detector(tiny_run, tmp_path, capsys) -> None:
    args = [
        *_common(tiny_run),
        f"data_path={tiny_run['store']}",
        "detectors=[tide,vibes]",
        f"out_dir={tmp_path}",
    ]
    assert run_cli(monitor_eval_main, args) == 2
    assert "embedding_ood" in capsys.readouterr().err
    args = [
        *_common(tiny_run),
        f"data_path={tiny_run['store']}",
        "conditions=[earthquake]",
        f"out_dir={tmp_path}",
    ]
    assert run_cli(monitor_eval_main, args) == 2


def _ep(seed: int, success: bool, values: list[float]) -> ScoredEpisode:
    return ScoredEpisode(seed, success, len(values), {"s": list(values)})


def test_detection_metrics_on_known_traces() -> None:
    eps = [
        _ep(0, True, [0.1, 0.2]),
        _ep(1, True, [0.1, 0.9]),
        _ep(2, False, [0.1, 0.5, 2.0]),
        _ep(3, False, [0.3]),
    ]
    m = detection_metrics(eps, "s", 0.4, {2: 3, 3: None})
    assert m["tpr"] == 0.5 and m["fpr"] == 0.5 and m["balanced_accuracy"] == 0.5
    assert m["lead_times"] == [2]  # alarm at step 1, point of no return at step 3
    assert auroc([2.0, 0.3], [0.2, 0.9]) == 0.75  # 3 of the 4 (failure, success) pairs ordered
    assert first_alarm([None, 0.5, 0.1], [1.0, 0.4, 0.0]) == 1


def test_point_of_no_return_with_the_real_operator(tiny_monitor) -> None:
    """An object pushed off the table cannot be fetched: the search finds the step it happened."""
    from rewind.envs.registry import make_operator

    env = make_env("lift")
    ep = MonitoredEpisode(env, tiny_monitor.loaded.policy)
    ep.reset(2)
    base, snaps = env.unwrapped, []
    for t in range(0, 24, 4):
        if t == 12:
            base.nudge_object(base.object_names[0], np.array([0.6, 0.0]))
        snaps.append((t, rewindable(env).snapshot()))
        for _ in range(4):
            ep.policy_step()
    rec = ScoredEpisode(2, False, 24, {}, snaps)
    assert point_of_no_return(ep, make_operator("lift"), rec, budget=200) == 12
    env.close()


def _cal_node(tiny_run, tmp_path, max_steps: int, episodes: int, **extra) -> dict:
    """A ``CalibrateConfig`` node for the tiny run on a short Lift episode."""
    return {
        "out_dir": str(tmp_path / "cal"),
        "policy_path": str(tiny_run["train"]),
        "data_path": str(tiny_run["store"]),
        "env": {"name": "lift", "max_steps": max_steps},
        "episodes": episodes,
        "device": "cpu",
        "progress": False,
        **extra,
    }


def test_calibration_rollouts_use_the_sampler_asked_for(tiny_run, tmp_path) -> None:
    from rewind.config import to_dataclass
    from rewind.monitor.calibrate import CalibrateConfig, run_calibration_rollouts
    from rewind.train.policy_api import sampler_tag

    node = _cal_node(tiny_run, tmp_path, max_steps=10, episodes=1)
    plain = run_calibration_rollouts(to_dataclass(node, CalibrateConfig))
    eta = run_calibration_rollouts(to_dataclass({**node, "ddim_eta": 1.0}, CalibrateConfig))
    assert sampler_tag(plain.loaded.policy).endswith(":eta=0")
    assert sampler_tag(eta.loaded.policy).endswith(":eta=1")


def test_tide_samples_draws_that_many_chunks_and_is_recorded(tiny_run, tmp_path) -> None:
    """``monitor.tide_samples=3``: every inference samples 3 chunks (the score raises otherwise), the
    calibration's score settings record it, and 0 is refused with the field named."""
    import pytest

    from rewind.config import ConfigError, to_dataclass
    from rewind.monitor.calibrate import CalibrateConfig, run_calibration_rollouts

    node = _cal_node(
        tiny_run, tmp_path, max_steps=20, episodes=2, monitor={"score": "tide", "tide_samples": 3}
    )
    out = run_calibration_rollouts(to_dataclass(node, CalibrateConfig))
    assert out.score.num_samples == 3 and out.score.params()["samples"] == 3
    values = [v for trace in out.traces for v in trace if v is not None]
    assert values and all(np.isfinite(values))
    with pytest.raises(ConfigError, match="monitor.tide_samples must be >= 1"):
        to_dataclass({**node, "monitor": {"score": "tide", "tide_samples": 0}}, CalibrateConfig)
