"""The project's commands on the robosuite tasks, end to end with a tiny policy (issue 16, item 5):
rewind-collect (scripted-operator demos), rewind-train, rewind-eval plain and under the monitor with
rewind=restore, rewind-calibrate, and one round of rewind-loop (RaC: drive rewind + operator; and
HG-DAgger with the demos-only control arm). The budgets are seconds: the asserts are about what each
command writes, not about success rates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _robosuite_helpers import needs_robosuite
from helpers.train import TINY_POLICIES, run_cli

pytestmark = needs_robosuite

LIFT = ["env=robosuite_lift", "device=cpu", "progress=false"]
#: policy rollouts stop here (a Lift demo takes ~35 steps; the tiny policy never succeeds)
SHORT = "env.max_steps=20"


def _policy_args(prefix: str = "policy") -> list[str]:
    out = []
    for key, value in TINY_POLICIES["diffusion"].items():
        text = "[" + ",".join(map(str, value)) + "]" if isinstance(value, list) else str(value)
        out.append(f"{prefix}.{key}={text}")
    return out


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def lift_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two scripted Lift demos through rewind-collect and a tiny diffusion policy through rewind-train."""
    from rewind.scripts.collect import main as collect_main
    from rewind.scripts.train import main as train_main

    root = tmp_path_factory.mktemp("robosuite_cli")
    store = root / "store"
    assert (
        run_cli(
            collect_main,
            [
                "env=robosuite_lift",
                "progress=false",
                "episodes=2",
                f"out={store}",
                f"out_dir={root / 'collect'}",
            ],
        )
        == 0
    )
    train = [
        *LIFT,
        f"out_dir={root / 'train'}",
        "policy=diffusion",
        f"data.path={store}",
        "data.val_fraction=0",
    ]
    train += ["train.steps=20", "train.batch_size=8", "train.warmup_steps=2", "train.save_every=20"]
    train += ["train.val_every=20", "num_threads=1", "wandb.mode=disabled", *_policy_args()]
    assert run_cli(train_main, train) == 0
    return {"root": root, "store": store, "train": root / "train"}


def test_collect_stores_robomimic_low_dim_keys_and_states(lift_run) -> None:
    import gymnasium as gym

    from rewind.envs.robosuite.tasks import OBS_KEYS
    from rewind.store import ReplayStore

    summary = _summary(lift_run["root"] / "collect")
    assert (summary["env"], summary["succeeded"]) == ("robosuite_lift", 2)
    env = gym.make("rewind/robosuite-Lift-v0")
    with ReplayStore.open(lift_run["store"]) as st:
        assert st.spec.env_id == "rewind/robosuite-Lift-v0"
        assert sorted(st.spec.obs) == sorted(OBS_KEYS) and st.spec.action_dim == 7
        ep = st.load(st.episodes()[1].id)
    assert set(ep.source_names) == {"demo"} and ep.states.shape == (len(ep.actions), env.unwrapped.state_dim)
    for t in (0, len(ep.actions) // 2):  # each stored state gives back its stored observation
        env.unwrapped.set_physics_state(ep.states[t])
        obs = env.unwrapped.observation()
        assert all(np.allclose(obs[k], ep.obs[k][t], atol=1e-6) for k in OBS_KEYS)
    env.close()


def test_eval_and_its_config_errors(lift_run, tmp_path: Path, capsys) -> None:
    from rewind.scripts.eval import main as eval_main

    args = [*LIFT, SHORT, f"policy_path={lift_run['train']}", "episodes=2", "wandb.mode=disabled"]
    assert run_cli(eval_main, [*args, f"out_dir={tmp_path / 'ev'}", "video.episodes=1"]) == 0
    summary = _summary(tmp_path / "ev")
    assert summary["episodes"] == 2 and summary["env"] == "robosuite_lift" and len(summary["records"]) == 2
    assert all(r["length"] == 20 for r in summary["records"])  # the tiny policy runs to the step limit
    assert list((tmp_path / "ev").rglob("*.mp4"))
    capsys.readouterr()
    for bad, says in (("env.rgb=true", "low-dim only"), ("env.camera=front", "agentview")):
        assert run_cli(eval_main, [*args, bad, f"out_dir={tmp_path / 'bad'}"]) == 2
        assert says in capsys.readouterr().err


def test_calibrate_builds_the_checkpoint_library_then_states_the_minimum_n(
    lift_run, tmp_path, capsys
) -> None:
    from rewind.scripts.calibrate import main as calibrate_main

    args = [*LIFT, SHORT, f"policy_path={lift_run['train']}", f"data_path={lift_run['store']}", "episodes=1"]
    assert (
        run_cli(calibrate_main, [*args, f"out_dir={tmp_path / 'cal'}"]) == 2
    )  # the tiny policy never succeeds
    assert "needs at least 19 successful calibration rollouts; got 0" in capsys.readouterr().err
    library = json.loads((tmp_path / "cal" / "checkpoint_library.json").read_text())
    assert "after_grasp" in json.dumps(library)  # labelled by robosuite's own grasp predicate


@pytest.mark.parametrize("mode", ["restore", "drive"])
def test_monitored_eval_rewinds(lift_run, tmp_path: Path, mode: str) -> None:
    import gymnasium as gym
    import torch

    from rewind.monitor import Calibration
    from rewind.scripts.eval import main as eval_main
    from rewind.train.policy_api import load_policy

    env = gym.make("rewind/robosuite-Lift-v0")
    loaded = load_policy(str(lift_run["train"]), env, "robosuite_lift", torch.device("cpu"))
    env.close()
    cal = tmp_path / "cal"  # a threshold every score exceeds: each episode spends its rewinds
    n_act = loaded.policy.n_action_steps
    extra = {"score_params": {"dims": None}, "env": "robosuite_lift", "n_action_steps": n_act}
    Calibration("tide", 0.5, 1, 1e-12, loaded.weights_hash, **extra).save(cal)
    args = [*LIFT, SHORT, f"policy_path={lift_run['train']}", "episodes=2", "monitor=tide"]
    args += [f"monitor.calibration={cal}", f"rewind={mode}", "rewind.max_rewinds=1", "wandb.mode=disabled"]
    assert run_cli(eval_main, [*args, f"out_dir={tmp_path / 'ev'}"]) == 0
    summary = _summary(tmp_path / "ev")
    assert summary["episodes"] == 2 and summary["monitor"]["rewind"]["mode"] == mode
    assert summary["monitor"]["rewinds"] == 2
    for record in summary["records"]:
        rewinds = [e for e in record["events"] if e["kind"] == "rewind"]
        assert len(rewinds) == 1 and rewinds[0]["checkpoint"] == "start"
        # drive: the env's OSC_POSE controller takes the gripper back (steps); restore takes none
        assert (rewinds[0].get("drive_steps", 0) > 0) == (mode == "drive")


@pytest.mark.parametrize("recovery", ["operator", "dagger"])
def test_loop_round_with_the_scripted_operator(lift_run, tmp_path: Path, recovery: str) -> None:
    from rewind.scripts.loop import main as loop_main

    out = tmp_path / "loop"
    args = ["env=robosuite_lift", "env.max_steps=60", "device=cpu", "progress=false", "wandb.mode=disabled"]
    args += [f"base.policy_path={lift_run['train']}", f"base.demos_path={lift_run['store']}", "rounds=1"]
    args += ["episodes_per_round=2", f"recovery={recovery}", "recovery.stall_steps=8", "finetune.steps=4"]
    args += ["recovery.stall_from_demos=null"]  # the fixed 8-step trigger: the tiny policy is taken over
    args += [
        "finetune.batch_size=8",
        "finetune.warmup_steps=1",
        "calibration.episodes=1",
        "calibration.max_demos=2",
    ]
    args += ["promotion.rule=always", "eval.episodes=1", "eval.num_envs=1", "num_threads=1", f"out_dir={out}"]
    args += [f"control={str(recovery == 'dagger').lower()}"]
    assert run_cli(loop_main, args) == 0
    record = json.loads((out / "round_01" / "round.json").read_text())
    assert record["round"] == 1 and record["policy"]["version"].startswith("diffusion/")
    assert record["collection"]["episodes"] == 2 and record["collection"]["interventions"] >= 1
    counts = record["collection"]["source_counts"]  # of the kept episodes: the operator completed its stage
    assert record["collection"]["kept"] >= 1 and counts["correction"] > 0
    if recovery == "operator":  # RaC: the drive rewind's steps come first, stored as recovery
        assert counts["recovery"] > 0
    assert ("control" in record and record["control"] is not None) == (recovery == "dagger")
    assert _summary(out)["rounds_done"] == 1
