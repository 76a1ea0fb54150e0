"""The calibrated tiny monitor set-up shared by the monitored-rollout tests (the session fixture
``tiny_monitor`` in ``tests/conftest.py``): the ``tiny_run`` policy loaded for Lift, a checkpoint
library from its demos, a TIDE monitor that alarms often, and calibration folders the commands read."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewind.envs.registry import make_env
from rewind.monitor import Calibration, CheckpointLibrary, Monitor, RewindConfig, build_library, make_score
from rewind.monitor.checkpoints import CheckpointTracker, StageLabeler
from rewind.monitor.rollouts import run_monitored
from rewind.store import ReplayStore
from rewind.train.policy_api import LoadedPolicy, load_policy

#: Episode length of the monitored Lift rollouts of these tests.
MAX_STEPS = 30
#: TIDE thresholds: ``OFTEN`` alarms in most episodes of the tiny policy, ``ALWAYS`` at the first score.
OFTEN, ALWAYS = 2e-3, 1e-12


@dataclass(frozen=True)
class TinyMonitor:
    """The session's monitor set-up. Tests read it; a test that changes a calibration folder copies it.

    Attributes:
        loaded: the tiny policy (``tiny_run["train"]``) loaded for Lift on the CPU.
        library: rewind checkpoint templates from the 4 demos (stage labels).
        monitor: TIDE with threshold :data:`OFTEN` (in memory, no calibration folder).
        calibrations: threshold -> a calibration folder (``calibration.json`` only) for the weights.
    """

    loaded: LoadedPolicy
    library: CheckpointLibrary
    monitor: Monitor
    calibrations: dict[float, Path]


def save_calibration(folder: Path, loaded: LoadedPolicy, threshold: float) -> Path:
    """A TIDE calibration of ``loaded``'s weights for Lift with ``threshold``, saved in ``folder``."""
    Calibration(
        "tide",
        0.5,
        1,
        threshold,
        loaded.weights_hash,
        score_params={"dims": None},
        env="lift",
        n_action_steps=loaded.policy.n_action_steps,
    ).save(folder)
    return folder


def build_tiny_monitor(tiny_run: dict[str, Path], root: Path) -> TinyMonitor:
    """Load ``tiny_run``'s policy, build its checkpoint library from the demos, and save the
    :data:`OFTEN` and :data:`ALWAYS` calibrations under ``root``."""
    env = make_env("lift", max_steps=MAX_STEPS)
    try:
        loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
        with ReplayStore.open(tiny_run["store"]) as store:
            demos = [store.load(i.id) for i in store.episodes()]
        library = build_library(loaded.policy, demos, env.unwrapped, StageLabeler(), loaded.weights_hash)
    finally:
        env.close()
    monitor = Monitor(make_score("tide"), Calibration("tide", 0.5, 1, OFTEN, loaded.weights_hash))
    calibrations = {t: save_calibration(root / f"calibration_{t:g}", loaded, t) for t in (OFTEN, ALWAYS)}
    return TinyMonitor(loaded, library, monitor, calibrations)


def run_tiny_monitored(
    tiny: TinyMonitor,
    envs: Any,
    mode: str,
    seeds: Sequence[int],
    store: Any = None,
    rewind: RewindConfig | None = None,
    **kwargs: Any,
) -> tuple[list, list]:
    """:func:`~rewind.monitor.rollouts.run_monitored` of ``tiny``'s policy and monitor on ``envs``:
    checkpoint tracking that matches easily, rewinds in ``mode`` (at most 2, drives of at most 10
    steps; ``rewind`` replaces these settings), noise seed 7, no progress bar; ``kwargs`` go to
    ``run_monitored``. Returns the records (``monitor_ms`` zeroed: a timing) and the score traces."""
    records, traces = run_monitored(
        envs,
        tiny.loaded,
        tiny.monitor,
        CheckpointTracker(tiny.library, min_similarity=0.0, patience=1),
        rewind or RewindConfig(mode=mode, max_rewinds=2, drive_max_steps=10),
        seeds,
        7,
        store,
        progress=False,
        **kwargs,
    )
    return [dataclasses.replace(r, monitor_ms=0.0) for r in records], traces


def monitored_eval_args(tiny_run: dict[str, Path], calibration: Path, episodes: int) -> list[str]:
    """``rewind-eval`` overrides for ``tiny_run``'s policy on Lift (:data:`MAX_STEPS` steps, CPU, no
    progress bar, no W&B) under TIDE with ``calibration``; the rewind settings and ``out_dir`` are the
    caller's."""
    return [
        f"policy_path={tiny_run['train']}",
        "env=lift",
        f"env.max_steps={MAX_STEPS}",
        "device=cpu",
        "progress=false",
        "wandb.mode=disabled",
        f"episodes={episodes}",
        "monitor=tide",
        f"monitor.calibration={calibration}",
    ]


def tiny_calibration_rollouts(tiny_run: dict[str, Path], out_dir: Path, **monitor: Any) -> Any:
    """:func:`~rewind.monitor.calibrate.run_calibration_rollouts` of ``tiny_run``'s policy on Lift (3
    episodes of 20 steps, CPU, no progress bar) with TIDE and the ``monitor.*`` settings ``monitor``;
    the library and calibration files go to ``out_dir``."""
    from rewind.config import to_dataclass
    from rewind.monitor.calibrate import CalibrateConfig, run_calibration_rollouts

    node = {
        "out_dir": str(out_dir),
        "policy_path": str(tiny_run["train"]),
        "data_path": str(tiny_run["store"]),
        "env": {"name": "lift", "max_steps": 20},
        "episodes": 3,
        "device": "cpu",
        "progress": False,
        "monitor": {"score": "tide", **monitor},
    }
    return run_calibration_rollouts(to_dataclass(node, CalibrateConfig))


def run_tracked(
    tiny: TinyMonitor,
    monitor: Monitor,
    seeds: Sequence[int],
    rewind: RewindConfig,
    patience: int,
    batch: int = 1,
) -> tuple[list, list]:
    """``monitor`` over Lift episodes ``seeds`` (:data:`MAX_STEPS` steps, noise seed 7, ``batch`` envs)
    with checkpoint tracking of ``tiny``'s library that matches easily (``min_similarity=0``) after
    ``patience``; returns the records (``monitor_ms`` zeroed: a timing) and the score traces."""
    envs = [make_env("lift", max_steps=MAX_STEPS) for _ in range(batch)]
    try:
        tracker = CheckpointTracker(tiny.library, min_similarity=0.0, patience=patience)
        records, traces = run_monitored(envs, tiny.loaded, monitor, tracker, rewind, seeds, 7, progress=False)
    finally:
        for env in envs:
            env.close()
    return [dataclasses.replace(r, monitor_ms=0.0) for r in records], traces
