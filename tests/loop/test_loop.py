"""rewind-loop end to end with tiny policies: lineage of ft and fs rounds, resume after a kill, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.loop import loop_config, loop_node
from helpers.train import run_cli

from rewind.config import ConfigError, to_dataclass
from rewind.loop import LoopConfig, run_loop
from rewind.loop.lineage import RECORD, round_dir
from rewind.store import ReplayStore

#: Fields of a round record that legitimately differ between two runs of the same loop.
VOLATILE = ("timings_s",)


def _records(out: Path, rounds: int) -> list[dict]:
    recs = [json.loads((round_dir(out, r) / RECORD).read_text()) for r in range(rounds + 1)]
    return [{k: v for k, v in rec.items() if k not in VOLATILE} for rec in recs]


def test_ft_lineage_data_and_operator_steps(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "ft"
    summary = run_loop(loop_config(out, tiny_run, control=True))
    base, r1, r2 = _records(out, 2)
    assert summary["status"] == "done" and summary["rounds_done"] == 2
    assert base["policy"]["parent"] is None and r1["policy"]["parent"] == base["policy"]["version"]
    assert r2["policy"]["parent"] == r1["policy"]["version"]
    # round 1 fine-tunes the base's weights (recorded relative to the loop's folder), keeping its normalizer
    assert r1["finetune"]["init"] == {"from_weights": base["policy"]["weights"], "normalizer": "keep"}
    assert r2["finetune"]["init"]["from_weights"] == r1["policy"]["weights"]  # continues from the last round
    assert set(r2["data"]["rounds"]) == {"1", "2"} and r2["data"]["mix"][0] == pytest.approx(0.2)
    # RaC with the scripted operator: the corrections only (the drive back is the rewind controller's)
    assert r2["data"]["sample_weights"] == {"policy": 0.0, "pre_intervention": 0.0, "recovery": 0.0}
    # the kept normalizer measured on exactly the trained-on steps: both rounds' corrections
    corrections = sum(r["collection"]["source_counts"].get("correction", 0) for r in (r1, r2))
    assert (
        r2["data"]["obs_range"]["steps"] == corrections and "correction" in r2["data"]["obs_range"]["labels"]
    )
    # the control arm: the same fine-tuning on the demos alone, its own lineage from the base
    assert r1["control"]["policy"]["parent"] == base["policy"]["version"]
    assert r2["control"]["policy"]["parent"] == r1["control"]["policy"]["version"]
    assert summary["control_after"] == r2["control"]["eval"]["success_rate"]
    ctl_meta = json.loads((out / r2["control"]["policy"]["weights"] / "config.json").read_text())["extra"]
    assert "stores" not in ctl_meta and ctl_meta["init_from"].endswith(r1["control"]["policy"]["weights"])
    assert r1["collection"]["interventions"] == 3 and set(r1["collection"]["source_counts"]) >= {"correction"}
    assert r1["collection"]["triggers"] == {"stall": 3}  # the tiny policy never succeeds: no calibration
    ops = [r["operator_steps"] for r in (base, r1, r2)]
    assert ops[0]["demos"] > 0 and ops[0]["recovery"] == 0
    assert (
        ops[2]["total"]
        == ops[0]["demos"] + r1["collection"]["operator_steps"] + r2["collection"]["operator_steps"]
    )
    with ReplayStore.open(round_dir(out, 1) / "collect" / "store") as store:
        infos = store.episodes()
        assert sum(i.n_operator_steps for i in infos) == r1["collection"]["operator_steps"]
        assert {(i.policy_version, i.round) for i in infos} == {(base["policy"]["version"], 1)}
    weights_meta = json.loads((out / r2["policy"]["weights"] / "config.json").read_text())["extra"]
    assert weights_meta["init_from"].endswith(r1["policy"]["weights"])
    assert (out / "report.md").read_text().count("`diffusion/") == 3
    assert (out / "success_vs_operator_steps.png").stat().st_size > 0


def test_fs_retrains_from_scratch_on_everything_with_the_base_normalizer(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "fs"
    run_loop(loop_config(out, tiny_run, rounds=1, finetune={"mode": "fs", "demo_share": None, "steps": 10}))
    base, r1 = _records(out, 1)
    assert r1["finetune"]["init"] == {"from_weights": base["policy"]["weights"], "load_weights": False}
    assert r1["data"]["mix"] == [] and set(r1["data"]["rounds"]) == {"1"}
    assert r1["policy"]["parent"] == base["policy"]["version"]


def test_a_killed_loop_resumes_to_the_same_records(tmp_path: Path, tiny_run) -> None:
    full, cut = tmp_path / "full", tmp_path / "cut"
    run_loop(loop_config(full, tiny_run))

    def kill(r: int, stage: str) -> None:
        if (r, stage) == (2, "finetune"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_loop(loop_config(cut, tiny_run), hook=kill)
    assert (round_dir(cut, 1) / RECORD).exists() and not (round_dir(cut, 2) / RECORD).exists()
    assert (round_dir(cut, 2) / "collect" / "store").exists()  # the interrupted round's leftovers
    run_loop(loop_config(cut, tiny_run))
    assert _records(cut, 2) == _records(full, 2)
    with pytest.raises(ConfigError, match="other settings .*episodes_per_round"):
        run_loop(loop_config(cut, tiny_run, episodes_per_round=4))
    summary = run_loop(loop_config(cut, tiny_run, rounds=2))  # everything done: nothing runs again
    assert summary["rounds_done"] == 2


def test_human_round_waits_for_rewind_teleop(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "human"
    summary = run_loop(loop_config(out, tiny_run, rounds=1, recovery={"name": "human", "person": "teleop"}))
    assert summary["status"] == "waiting_for_human" and summary["rounds_done"] == 0
    cmd = summary["next_command"]
    assert (
        cmd.startswith("rewind-teleop env=lift policy_path=") and "round=1" in cmd and "max_episodes=3" in cmd
    )
    assert f"store={round_dir(out, 1) / 'collect' / 'store'}" in cmd


def test_cli_builds_its_own_base_and_reports_bad_values(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from rewind.scripts.loop import main

    node = loop_node(tmp_path / "cli", rounds=1)
    args = [
        f"out_dir={node['out_dir']}",
        "env=lift",
        "env.max_steps=50",
        "rounds=1",
        "episodes_per_round=2",
        "base.demos=3",
        "base.steps=20",
        "base.batch_size=8",
        "base.warmup_steps=2",
        "recovery.stall_steps=10",
        "recovery.max_correction_steps=20",
        "finetune.steps=5",
        "finetune.batch_size=8",
        "calibration.episodes=2",
        "calibration.max_demos=3",
        "eval.episodes=2",
        "eval.num_envs=2",
        "wandb.mode=disabled",
        "progress=false",
    ]
    args += [
        f"base.policy.{k}=" + (f"[{','.join(map(str, v))}]" if isinstance(v, list) else str(v))
        for k, v in node["base"]["policy"].items()
        if k != "name"
    ]
    assert run_cli(main, args) == 0
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["rounds_done"] == 1 and len(summary["success_before_ci95"]) == 2
    assert (tmp_path / "cli" / "round_00" / "demos" / "store").exists()
    # the recovery configs' default sizes the stall trigger from the demos (replacing stall_steps=10)
    collection = json.loads((round_dir(tmp_path / "cli", 1) / "round.json").read_text())["collection"]
    assert collection["stall_from_demos"]["factor"] == 1.5
    assert collection["stall_steps"] == collection["stall_from_demos"]["stall_steps"]
    capsys.readouterr()
    for bad, message in (
        ("finetune.demo_share=1.5", "finetune.demo_share must be null or in [0, 1)"),
        ("recovery.name=oracle", "recovery.name must be one of [retry, operator, dagger, human, guided]"),
        ("rounds=-1", "rounds must be >= 0"),
        ("recovery.keep=some", "recovery.keep must be one of"),
    ):
        assert run_cli(main, [f"out_dir={tmp_path / 'bad'}", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_evaluation_with_test_time_rewind_into_a_fresh_folder(tmp_path: Path, tiny_run) -> None:
    from rewind.loop import stages
    from rewind.monitor import Calibration
    from rewind.policies.io import weights_hash
    from rewind.train.policy_api import resolve_weights

    weights = resolve_weights(str(tiny_run["train"]))
    cal = tmp_path / "cal"
    cal.mkdir()
    Calibration("tide", 0.5, 1, -1.0, weights_hash(weights)).save(cal)  # every scored step alarms
    cfg = loop_config(tmp_path / "o", tiny_run, eval={"episodes": 2, "num_envs": 2})
    ev = stages.evaluate(cfg, weights, tmp_path / "new" / "eval_rewind", str(cal))
    assert ev.episodes == 2 and ev.monitor is not None and ev.monitor["rewinds"] >= 2


def test_a_loop_started_before_a_policy_field_existed_still_resumes(tmp_path: Path) -> None:
    """``loop.json`` written before ``obs_clip`` existed lacks it; loading that policy gives the default,
    so the loop resumes; a real change of a policy setting is still refused."""
    from helpers.train import TINY_POLICIES

    from rewind.loop.lineage import IDENTITY, check_identity

    out = tmp_path / "loop"
    policy = {"name": "diffusion", **TINY_POLICIES["diffusion"], "obs_clip": None}
    cfg = _with_policy(out, policy)
    assert check_identity(out, cfg) is False
    saved = json.loads((out / IDENTITY).read_text())
    del saved["base"]["policy"]["obs_clip"]
    (out / IDENTITY).write_text(json.dumps(saved))
    assert check_identity(out, cfg) is True
    with pytest.raises(ConfigError, match=r"base\.policy\.obs_clip"):
        check_identity(out, _with_policy(out, {**policy, "obs_clip": 2.0}))


def _with_policy(out: Path, policy: dict) -> LoopConfig:
    node = loop_node(out)
    node["base"]["policy"] = policy
    return to_dataclass(node, LoopConfig)
