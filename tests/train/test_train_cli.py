"""End to end through the console entry points: 4 Lift demos -> rewind-train (each policy) -> rewind-eval."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
import yaml
from helpers.train import run_cli, train_args

from rewind.metrics import read_metrics
from rewind.scripts.eval import main as eval_main
from rewind.scripts.train import main as train_main
from rewind.train import policy_config

EVAL_FIELDS = {
    "episodes",
    "successes",
    "success_rate",
    "success_ci95",
    "stage_names",
    "max_stage_histogram",
    "mean_length",
    "sim_errors",
    "records",
    "env",
    "policy_path",
    "policy_version",
    "seed",
    "videos",
}
RECORD_FIELDS = {"seed", "success", "length", "last_stage", "max_stage", "sim_error"}


@pytest.fixture()
def store(tiny_run: dict[str, Path]) -> Path:
    """The session's 4 Lift demos (only read)."""
    return tiny_run["store"]


@pytest.mark.parametrize("policy", ["diffusion", "flow", "act"])
def test_train_then_eval(tmp_path: Path, store: Path, policy: str) -> None:
    run = tmp_path / "train"
    assert run_cli(train_main, train_args(run, store, policy)) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["policy"] == policy and summary["steps"] == 30
    assert summary["final_val_loss"] is not None
    assert sorted(p.name for p in (run / "weights").iterdir()) == [
        "last.json",
        "step_000010",
        "step_000020",
        "step_000030",
    ]
    assert json.loads((run / "weights" / "last.json").read_text())["step"] == 30
    weights_meta = json.loads((run / "weights" / "step_000030" / "config.json").read_text())
    extra = weights_meta["extra"]
    assert extra["env_id"] == "rewind/Lift-v0" and extra["step"] == 30 and extra["git_revision"]
    assert extra["config"]["policy"]["name"] == policy
    assert yaml.safe_load((run / "config.yaml").read_text())["policy"]["name"] == policy
    logged = read_metrics(run, kind="log")
    assert {"train/loss", "train/lr", "train/grad_norm", "train/samples_per_s"} <= set(logged[0])
    assert any("val/loss" in r for r in logged)

    out = tmp_path / "eval"
    args = [f"policy_path={run}", "env=lift", "env.max_steps=25", "episodes=4", "num_envs=4"]
    assert (
        run_cli(eval_main, [*args, f"out_dir={out}", "device=cpu", "wandb.mode=disabled", "progress=false"])
        == 0
    )
    result = json.loads((out / "summary.json").read_text())
    assert EVAL_FIELDS <= set(result)
    assert result["episodes"] == 4 and len(result["records"]) == 4
    assert [r["seed"] for r in result["records"]] == [0, 1, 2, 3]
    assert all(RECORD_FIELDS <= set(r) for r in result["records"])
    assert sum(result["max_stage_histogram"].values()) == 4
    lo, hi = result["success_ci95"]
    assert 0.0 <= lo <= result["success_rate"] <= hi <= 1.0
    assert result["policy_path"].endswith("weights/step_000030")
    assert read_metrics(out, kind="table")[0]["name"] == "eval/episodes"


def test_misspelled_keys_fail_at_start(tmp_path: Path, store: Path, capsys: pytest.CaptureFixture) -> None:
    base = train_args(tmp_path / "a", store)
    assert run_cli(train_main, [*base, "train.stpes=5"]) == 2  # schema key: Hydra rejects it
    assert "stpes" in capsys.readouterr().err
    assert run_cli(train_main, [*base, "policy.horizn=8"]) == 2  # not in configs/policy/diffusion.yaml
    assert "horizn" in capsys.readouterr().err
    assert run_cli(train_main, [*base, "+policy.horizn=8"]) == 2  # added: the registry's config class says no
    err = capsys.readouterr().err
    assert "policy.horizn: not a field of DiffusionConfig" in err and "Traceback" not in err
    assert run_cli(train_main, [*base, "policy=nope"]) == 2
    assert not (tmp_path / "a" / "weights").exists()


@pytest.mark.parametrize("policy", ["diffusion", "flow", "act"])
def test_policy_yaml_lists_every_config_field(policy: str) -> None:
    node = yaml.safe_load(resources.files("rewind.configs").joinpath(f"policy/{policy}.yaml").read_text())
    config = policy_config(node)  # converts with the registry's config class
    fields = {f.name for f in dataclasses.fields(config)} - {"seed"}  # the run's seed drives training
    assert fields <= set(node), f"configs/policy/{policy}.yaml lacks {sorted(fields - set(node))}"


def test_store_of_another_env_is_refused(tmp_path: Path, store: Path, capsys: pytest.CaptureFixture) -> None:
    args = [a for a in train_args(tmp_path / "c", store) if a != "env=lift"]
    assert run_cli(train_main, [*args, "env=stack3"]) == 2
    assert "holds rewind/Lift-v0 episodes, but env is rewind/Stack3-v0" in capsys.readouterr().err


def test_bad_policy_value_is_one_line(tmp_path: Path, store: Path, capsys: pytest.CaptureFixture) -> None:
    assert run_cli(train_main, [*train_args(tmp_path / "b", store), "policy.horizon=7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rewind-train: error: policy (diffusion):") and "Traceback" not in err
