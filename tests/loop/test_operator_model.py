"""``recovery/operator_model=perfect|human_like`` in the loop: the Hydra group composes and validates,
and a human-like operator's reaction delay and give-ups are operator steps with the usual labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.loop import loop_config, loop_node
from helpers.train import run_cli
from hydra import compose, initialize_config_module

from rewind.config import to_dataclass
from rewind.envs.operators.human_like import CONTROL_DT, HumanLikeOperator
from rewind.envs.registry import make_env
from rewind.loop import LoopConfig, run_loop
from rewind.loop.config import RecoveryConfig
from rewind.loop.lineage import round_dir
from rewind.loop.sources import LoopRecording, SourceContext, make_source
from rewind.monitor import MonitoredEpisode, RewindConfig
from rewind.train.policy_api import load_policy


def _compose(*overrides: str) -> LoopConfig:
    import rewind.scripts.loop  # noqa: F401  (registers loop_schema)

    with initialize_config_module(config_module="rewind.configs", version_base="1.3"):
        cfg = compose("loop", overrides=["out_dir=unused", *overrides])
    return to_dataclass(cfg, LoopConfig)


def test_the_group_composes_validates_and_lists_valid_names(tmp_path: Path, capsys) -> None:
    assert _compose().recovery.operator_model.name == "perfect"
    cfg = _compose(
        "recovery=dagger", "recovery/operator_model=human_like", "recovery.operator_model.reaction_s=0.5"
    )
    rc = cfg.recovery
    assert rc.name == "dagger" and rc.until == "stage" and rc.operator_model.name == "human_like"
    assert rc.operator_model.reaction_s == 0.5 and rc.operator_model.give_up_far == 0.3
    assert (
        _compose("recovery/operator_model=human_like", "recovery=operator").recovery.operator_model.name
        == "human_like"
    )
    from rewind.scripts.loop import main

    for bad, message in (
        ("recovery/operator_model=sloppy", "valid: human_like, perfect"),
        ("recovery.operator_model.name=sloppy", "must be one of [perfect, human_like]"),
        ("recovery.operator_model=human_like", "recovery.operator_model=human_like"),
        ("recovery.operator_model.give_up_far=2", "give_up_far must be in [0, 1]"),
    ):
        assert run_cli(main, [f"out_dir={tmp_path / 'bad'}", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_delay_and_failed_attempts_are_counted_operator_steps(tiny_run, tmp_path: Path) -> None:
    env = make_env("lift", max_steps=60)
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    model = {"name": "human_like", "give_up_near": 0.5, "give_up_far": 0.5, "overhead_s": 1.0}
    cfg = to_dataclass(
        {
            "name": "dagger",
            "stall_steps": 8,
            "max_interventions": 3,
            "max_correction_steps": 30,
            "after": "handback",
            "operator_model": model,
        },
        RecoveryConfig,
    )
    source = make_source(cfg, "lift")
    prepared = source.prepare(SourceContext(env, loaded, str(tiny_run["store"]), tmp_path, 1))
    assert prepared["demo_distance"]["states"] > 0 and isinstance(source.operator, HumanLikeOperator)
    from rewind.loop.episodes import run_episode

    outs, recs = [], []
    for seed in range(4):
        ep = MonitoredEpisode(env, loaded.policy, None, None, RewindConfig(auto_rewind=False))
        rec = LoopRecording(cfg.pre_intervention_steps, source.counted)
        outs.append(run_episode(ep, source, seed, rec, cfg.max_interventions, cfg.stall_steps))
        recs.append(rec)
    env.close()
    stats = source.operator.stats
    steps = sum(o.operator_steps for o in outs)
    interventions = sum(o.interventions for o in outs)
    assert interventions == stats.takeovers >= 4 and stats.give_ups >= 1
    assert stats.delay_steps == 5 * interventions and steps == stats.steps  # every model step is counted
    assert sum(r.sources.count("correction") for r in recs) == steps
    for rec in recs:  # each takeover starts with 5 hold steps, labelled correction like the rest
        labels = rec.sources
        starts = [
            i for i in range(len(labels)) if labels[i] == "correction" and labels[i - 1] != "correction"
        ]
        for i in starts:
            assert all(np.all(s.action[:4] == 0) for s in rec.steps[i : i + 5])
    assert sum(o.failed_interventions for o in outs) >= stats.give_ups
    report = source.report()
    assert report["operator_model"] == "human_like" and report["human_like"]["give_ups"] == stats.give_ups
    assert report["operator_time_s"] == pytest.approx(steps * CONTROL_DT + interventions * 1.0, abs=1e-3)


def test_a_tiny_loop_round_with_the_human_like_model(tiny_run, tmp_path: Path) -> None:
    out = tmp_path / "loop"
    node = loop_node(out, tiny_run, rounds=1)
    node["recovery"] = {**node["recovery"], "name": "dagger", "operator_model": {"name": "human_like"}}
    run_loop(loop_config(out, tiny_run, rounds=1, recovery=node["recovery"]))
    summary = json.loads((round_dir(out, 1) / "collect" / "summary.json").read_text())
    src = summary["source"]
    assert src["operator_model"] == "human_like" and src["demo_distance"]["states"] > 0
    assert src["human_like"]["delay_steps"] == 5 * summary["interventions"] > 0
    assert summary["operator_steps"] >= src["human_like"]["delay_steps"]
    assert src["operator_time_s"] == pytest.approx(summary["operator_steps"] * CONTROL_DT, abs=1e-3)
