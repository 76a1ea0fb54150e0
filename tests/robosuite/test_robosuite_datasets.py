"""robomimic datasets of robosuite tasks: env_meta builds the env, replay from stored initial states
reproduces each demo's success, the store import keeps the states, bad env_meta lists what exists."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from _robosuite_helpers import needs_robosuite

pytestmark = needs_robosuite


@pytest.mark.parametrize(
    ("task", "seeds", "limits"), [("Lift", [0, 1, 2], [None, 12, None]), ("Can", [3, 4], [None, 40])]
)
def test_replay_from_initial_states_reproduces_success(tmp_path: Path, task: str, seeds, limits) -> None:
    from rewind.envs.robosuite.datasets import (
        demo_success,
        env_from_dataset,
        replay_demo,
        write_operator_demos,
    )

    path = tmp_path / f"{task}.hdf5"
    written = write_operator_demos(path, task, seeds, max_steps=limits)
    assert written == [limit is None for limit in limits]  # the cut-short demo is a failure
    env = env_from_dataset(path)
    assert env.task.name == task
    with h5py.File(path, "r") as f:
        demos = [f["data"][f"demo_{i}"] for i in range(len(seeds))]
        assert [demo_success(d) for d in demos] == written
        assert [replay_demo(env, d) for d in demos] == written  # from each demo's model_file
        assert replay_demo(env, demos[0], use_model_file=False) == written[0]


def test_store_import_keeps_states(tmp_path: Path) -> None:
    from rewind.envs.robosuite.datasets import env_from_dataset, write_operator_demos
    from rewind.store.robomimic_io import import_robomimic

    path = tmp_path / "lift.hdf5"
    write_operator_demos(path, "Lift", [5], max_steps=20)
    store = import_robomimic(path, tmp_path / "store")
    ep = store.load(0)
    assert store.spec.env_id == "Lift" and ep.states.shape[0] == 20
    env = env_from_dataset(path)
    env.set_physics_state(ep.states[7])
    obs = env.observation()
    for key, value in obs.items():
        assert np.allclose(value, ep.obs[key][7]), key


def _meta(**changes):
    meta = {
        "env_name": "Lift",
        "env_version": "1.5.2",
        "type": 1,
        "env_kwargs": {"robots": ["Panda"], "control_freq": 20, "controller_configs": None},
    }
    for key, value in changes.items():
        (meta["env_kwargs"] if key in ("robots", "controller_configs") else meta)[key] = value
    return meta


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"env_name": "ToolHang"},
            r"'ToolHang' is not supported; supported tasks: Lift .*PickPlaceCan .*NutAssemblySquare",
        ),
        ({"type": 2}, r"type 2 is not robosuite"),
        (
            {"controller_configs": {"type": "JOINT_VELOCITY"}},
            r"'JOINT_VELOCITY' is not supported; supported arm controllers: OSC_POSE",
        ),
        (
            {"controller_configs": {"type": "BASIC", "body_parts": {"right": {"type": "IK_POSE"}}}},
            r"'IK_POSE' is not supported.*OSC_POSE",
        ),
        ({"robots": ["Sawyer"]}, r"supported: one of \['Panda'\]"),
    ],
)
def test_unsupported_env_meta_lists_the_supported(changes, match: str) -> None:
    from rewind.envs.robosuite.controller import UnsupportedEnvMeta
    from rewind.envs.robosuite.datasets import env_from_meta

    with pytest.raises(UnsupportedEnvMeta, match=match):
        env_from_meta(_meta(**changes))


def test_robosuite_14_part_config_is_converted() -> None:
    """robomimic's v1.4 datasets give the arm's OSC_POSE part config; it becomes robosuite 1.5's BASIC."""
    from rewind.envs.robosuite.datasets import env_from_meta

    osc = {
        "type": "OSC_POSE",
        "input_max": 1,
        "input_min": -1,
        "output_max": [0.05] * 3 + [0.5] * 3,
        "output_min": [-0.05] * 3 + [-0.5] * 3,
        "kp": 150,
        "damping_ratio": 1,
        "impedance_mode": "fixed",
        "kp_limits": [0, 300],
        "damping_ratio_limits": [0, 10],
        "position_limits": None,
        "orientation_limits": None,
        "uncouple_pos_ori": True,
        "control_delta": True,
        "interpolation": None,
        "ramp_ratio": 0.2,
    }
    env = env_from_meta(_meta(env_name="PickPlaceCan", env_version="1.4.1", controller_configs=osc))
    cfg = env.env_kwargs["controller_configs"]
    assert cfg["type"] == "BASIC" and cfg["body_parts"]["right"]["type"] == "OSC_POSE"
    assert env.task.name == "Can" and env.action_space.shape == (7,)
