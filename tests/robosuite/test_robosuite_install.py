"""Without the extra: the ids exist, the base install never imports robosuite, and making an env
says how to get the extra."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from _robosuite_helpers import MISSING

from rewind.envs.robosuite import GYM_IDS
from rewind.envs.robosuite.compat import RobosuiteUnavailable, check_versions


def test_import_rewind_envs_does_not_import_robosuite() -> None:
    code = "import sys, rewind.envs; print('robosuite' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ids_are_registered() -> None:
    import rewind.envs  # noqa: F401

    for gym_id, _ in GYM_IDS.values():
        assert gym_id in gym.registry


@pytest.mark.skipif(MISSING is None, reason="robosuite is installed here")
def test_make_without_the_extra_names_it() -> None:
    import rewind.envs  # noqa: F401

    with pytest.raises(RobosuiteUnavailable, match=r"rewind\[robosuite\].*robosuite==1\.5\.2"):
        gym.make("rewind/robosuite-Lift-v0")


@pytest.mark.parametrize(
    ("robosuite", "mujoco", "pin"),
    [
        ("1.4.1", "3.9.0", "robosuite==1.5.2"),
        ("1.5.3", "3.9.0", "robosuite==1.5.2"),
        ("1.5.2", "3.10.0", "mujoco>=3.2,<3.10"),
        ("1.5.2", "3.1.6", "mujoco>=3.2,<3.10"),
    ],
)
def test_versions_outside_the_pin_name_it(robosuite: str, mujoco: str, pin: str) -> None:
    with pytest.raises(RobosuiteUnavailable, match=pin.replace(".", r"\.")):
        check_versions(robosuite, mujoco)


def test_versions_inside_the_pin_pass() -> None:
    check_versions("1.5.2", "3.9.0")
    check_versions("1.5.2", "3.3.7")


@pytest.mark.skipif(MISSING is None, reason="robosuite is installed here")
@pytest.mark.parametrize("env", ["robosuite_lift", "robosuite_can"])
def test_commands_without_the_extra_say_how_to_get_it(tmp_path, capsys, env: str) -> None:
    from helpers.train import run_cli

    from rewind.scripts.collect import main as collect_main

    assert run_cli(collect_main, [f"env={env}", "episodes=1", f"out_dir={tmp_path / 'c'}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"env {env}: robosuite is not installed" in err
    assert "rewind[robosuite]" in err and "bash .ci/robosuite_venv.sh" in err
