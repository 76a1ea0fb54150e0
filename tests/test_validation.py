"""One validation style: each fact (a device name, a rewind mode, the tracking settings) is checked by one
function, so every schema that has the option reports it with the same one-line message."""

from __future__ import annotations

from typing import Any

import pytest

from rewind.config import ConfigError, check_choice, check_range, require, to_dataclass
from rewind.envs.wrappers import PerturbationConfig
from rewind.eval.config import EvalConfig
from rewind.loop.config import LoopConfig, RecoveryConfig
from rewind.monitor.calibrate import CalibrateConfig
from rewind.monitor.episode import RewindConfig
from rewind.monitor.factory import MonitorConfig, TrackingConfig
from rewind.monitor.monitor_eval import MonitorEvalConfig
from rewind.policies.diffusion import DiffusionConfig
from rewind.teleop.config import TeleopConfig
from rewind.train import TrainConfig

SCHEMAS: dict[type, dict[str, Any]] = {
    TrainConfig: {"data": {"path": "x"}, "policy": {"name": "diffusion"}},
    EvalConfig: {"policy_path": "x"},
    CalibrateConfig: {"policy_path": "x", "data_path": "x"},
    MonitorEvalConfig: {"policy_path": "x", "data_path": "x"},
    LoopConfig: {},
    TeleopConfig: {"store": "x"},
}


@pytest.mark.parametrize("schema", list(SCHEMAS), ids=lambda c: c.__name__)
def test_every_device_option_is_checked_by_the_one_device_check(schema: type) -> None:
    node = {"out_dir": "o", **SCHEMAS[schema]}
    to_dataclass(node, schema)  # the minimal node is valid
    with pytest.raises(ConfigError, match=r"^device must be one of \[auto, cpu, cuda, mps\]; got 'gpu'$"):
        to_dataclass({**node, "device": "gpu"}, schema)


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: RewindConfig(mode="teleport"), "rewind.mode"),
        (lambda: RecoveryConfig(rewind_mode="teleport"), "recovery.rewind_mode"),
        (
            lambda: to_dataclass({"out_dir": "o", "store": "x", "rewind_mode": "teleport"}, TeleopConfig),
            "rewind_mode",
        ),
    ],
)
def test_every_rewind_mode_option_has_the_same_check(build: Any, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key} must be one of \[restore, drive\]; got 'teleport'$"):
        build()


def test_tracking_settings_are_checked_once_for_monitor_and_teleop() -> None:
    assert (
        (MonitorConfig().min_similarity, MonitorConfig().patience)
        == (0.7, 3)
        == (
            TrackingConfig().min_similarity,
            TrackingConfig().patience,
        )
    )
    with pytest.raises(ConfigError, match=r"^monitor.min_similarity must be in \[-1, 1\]; got 2"):
        MonitorConfig(min_similarity=2.0)
    with pytest.raises(ConfigError, match=r"^tracking.patience must be >= 1; got 0$"):
        TrackingConfig(patience=0)


def test_helpers_and_library_configs_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="^a must be one of \\[x, y\\]; got 'z'$"):
        check_choice("a", "z", ("x", "y"))
    with pytest.raises(ConfigError, match="^b must be <= 2; got 3$"):
        check_range("b", 3, hi=2)
    with pytest.raises(ConfigError, match="^c$"):
        require(False, "c")
    with pytest.raises(ConfigError, match="^scheduler must be one of"):  # a policy config
        DiffusionConfig(scheduler="euler")
    with pytest.raises(ConfigError, match=r"^nudge_prob must be in \[0, 1\]; got 2"):  # the wrappers' config
        PerturbationConfig(nudge_prob=2.0)


@pytest.mark.parametrize("schema", [EvalConfig, CalibrateConfig, MonitorEvalConfig], ids=lambda c: c.__name__)
def test_every_sampler_option_has_the_same_check(schema: type) -> None:
    """The commands that load a policy for rollouts switch its sampler the same way (docs/policies.md)."""
    node = {"out_dir": "o", **SCHEMAS[schema]}
    cfg = to_dataclass({**node, "sampler": "ddim", "inference_steps": 20, "ddim_eta": 1.0}, schema)
    assert (cfg.sampler, cfg.inference_steps, cfg.ddim_eta) == ("ddim", 20, 1.0)
    for bad, match in (
        ({"sampler": "euler"}, r"^sampler must be one of \[policy, ddim, ddpm\]; got 'euler'$"),
        ({"inference_steps": 0}, r"^inference_steps must be >= 1; got 0$"),
        ({"ddim_eta": 1.5}, r"^ddim_eta must be in \[0, 1\]; got 1.5$"),
    ):
        with pytest.raises(ConfigError, match=match):
            to_dataclass({**node, **bad}, schema)
