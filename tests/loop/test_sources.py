"""Recovery sources on a real (tiny) policy in real MuJoCo: labels, operator steps, keep rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rewind.config import ConfigError, to_dataclass
from rewind.envs.registry import make_env
from rewind.loop.config import RecoveryConfig
from rewind.loop.episodes import CollectRules, collect_episodes, run_episode
from rewind.loop.operator_drive import drive_operator
from rewind.loop.sources import HumanSource, LoopRecording, keep_episode, make_source
from rewind.monitor import Calibration, Monitor, MonitoredEpisode, RewindConfig, make_score
from rewind.store import ReplayStore
from rewind.train.policy_api import load_policy

INTERVENTIONS = {"recovery", "correction", "human"}


@pytest.fixture()
def parts(tiny_run):
    env = make_env("lift", max_steps=60)
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    yield env, loaded
    env.close()


def _episode(env, loaded, mode: str = "drive") -> MonitoredEpisode:
    """An episode whose monitor alarms on every scored step (threshold below any TIDE value)."""
    monitor = Monitor(make_score("tide"), Calibration("tide", 0.5, 1, -1.0, loaded.weights_hash))
    return MonitoredEpisode(env, loaded.policy, monitor, None, RewindConfig(mode=mode, auto_rewind=False))


def _run(env, loaded, seed: int = 3, **recovery):
    cfg = to_dataclass(recovery, RecoveryConfig)
    source = make_source(cfg, "lift")
    rec = LoopRecording(cfg.pre_intervention_steps, source.counted)
    out = run_episode(
        _episode(env, loaded, cfg.rewind_mode), source, seed, rec, cfg.max_interventions, cfg.stall_steps
    )
    return out, rec


def test_operator_rac_recovers_corrects_and_ends(parts) -> None:
    out, rec = _run(*parts, name="operator", after="end", max_correction_steps=30)
    assert out.interventions == 1 and out.ended_by == "source" and out.alarms >= 1
    sources = rec.sources
    first_op = next(i for i, src in enumerate(sources) if src in INTERVENTIONS)
    assert (
        set(sources[:first_op]) <= {"policy", "pre_intervention"}
        and sources[first_op - 1] == "pre_intervention"
    )
    assert sources.count("pre_intervention") == min(first_op, 15)
    tail = sources[first_op:]
    assert set(tail) <= {"recovery", "correction"} and tail[-1] == "correction"
    assert tail == sorted(tail, key=lambda src: src != "recovery")  # recovery first, then correction
    assert (
        out.operator_steps
        == rec.operator_steps
        == len(tail)
        == sources.count("recovery") + sources.count("correction")
    )
    assert [s.step for s in rec.steps] == list(range(len(rec.steps)))  # drive mode: one continuous trajectory


def test_dagger_takes_over_without_rewind_and_hands_back(parts) -> None:
    out, rec = _run(*parts, name="dagger", after="handback", max_interventions=2, max_correction_steps=5)
    assert out.interventions == 2 and out.ended_by == "env" and out.failed_interventions == 2
    assert "recovery" not in rec.sources and rec.sources.count("correction") == 10
    assert "policy" in rec.sources[rec.sources.index("correction") :]  # the policy drove again
    assert out.operator_steps == 10 and out.source_counts["correction"] == 10
    assert [e["kind"] for e in out.events].count("rewind") == 0


def test_retry_restores_drops_undone_steps_and_counts_no_operator(parts) -> None:
    out, rec = _run(*parts, name="retry", rewind_mode="restore", max_interventions=2)
    assert out.interventions == 2 and out.operator_steps == 0 and set(rec.sources) == {"policy"}
    assert [s.step for s in rec.steps] == list(range(len(rec.steps)))  # only the final branch remains
    assert [e["kind"] for e in out.events].count("rewind") == 2


def test_human_scripted_person_labels_human_and_counts_recovery(parts) -> None:
    out, rec = _run(*parts, name="human", person="scripted", max_correction_steps=20)
    assert "human" in rec.sources and set(rec.sources) <= {"policy", "pre_intervention", "recovery", "human"}
    assert out.operator_steps == rec.sources.count("human") + rec.sources.count("recovery")


class _BadPerson:
    def begin(self, seed: int) -> None:
        pass

    def intervene(self, ep, alarm) -> str:
        return "maybe"


def test_a_person_plugs_in_through_the_protocol(parts) -> None:
    env, loaded = parts
    cfg = RecoveryConfig(name="human", person="scripted")
    source = HumanSource(cfg, "lift", person=_BadPerson())
    with pytest.raises(ValueError, match="'handback' or 'end'"):
        run_episode(_episode(env, loaded), source, 0, LoopRecording(15, source.counted), 1)


def test_stall_trigger_without_a_monitor_and_keep_rules(parts, tmp_path: Path) -> None:
    env, loaded = parts
    cfg = RecoveryConfig(name="dagger", stall_steps=8, max_correction_steps=5, keep="all")
    source = make_source(cfg, "lift")

    def make() -> MonitoredEpisode:
        return MonitoredEpisode(env, loaded.policy, None, None, RewindConfig(auto_rewind=False))

    from rewind.store import store_spec_for

    with ReplayStore.create(tmp_path / "s", store_spec_for(env)) as store:
        outs = collect_episodes(
            make,
            source,
            [1, 2],
            store,
            CollectRules(cfg.keep, max_interventions=1, stall_steps=8),
            loaded.version,
            1,
        )
        infos = store.episodes()
    assert all(o.stalls >= 1 and o.interventions == 1 and o.kept for o in outs)
    assert [o.failed_interventions for o in outs] == [1, 1]  # 5 steps cannot complete a grasp
    assert [i.n_operator_steps for i in infos] == [o.operator_steps for o in outs] == [5, 5]
    assert all(i.round == 1 and i.extra["recovery"] == "dagger" for i in infos)
    assert keep_episode("useful", False, 0) is False and keep_episode("useful", True, 0) is True
    assert keep_episode("success", False, 3) is False and keep_episode("all", False, 0) is True
    assert (
        keep_episode("useful", False, 1, failed=1) is False
        and keep_episode("intervened", False, 2, 0) is True
    )


def test_unknown_source_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"retry, operator, dagger, human, guided"):
        RecoveryConfig(name="oracle")
    with pytest.raises(ConfigError, match="recovery.after must be one of"):
        RecoveryConfig(after="later")


def _fresh(parts, seed: int = 3) -> tuple[MonitoredEpisode, object]:
    """An episode reset at ``seed`` and the RaC source's scripted operator, reset for it."""
    env, loaded = parts
    source = make_source(to_dataclass({"name": "operator"}, RecoveryConfig), "lift")
    source.begin(ep := _episode(env, loaded), seed)
    ep.reset(seed)
    return ep, source.fresh_operator()


def test_until_failed_drives_through_the_stage_the_episode_failed_in(parts) -> None:
    """``until=failed``: from the first stage, an episode that failed in the second is corrected
    through it (two stages, each with the step budget); ``until=stage`` stops after the first."""
    ep, op = _fresh(parts)
    assert ep.base.stage() == 0
    steps_one, ok_one = drive_operator(ep, op, "correction", "stage", 60)
    assert ok_one and ep.base.stage() == 1
    ep, op = _fresh(parts)
    steps, ok = drive_operator(ep, op, "correction", "failed", 60, failed_stage=1)
    assert ok and ep.base.stage() == 2 and ep.success and steps > steps_one
    ep, op = _fresh(parts)  # failed in the stage it is in: exactly ``until=stage``
    assert drive_operator(ep, op, "correction", "failed", 60, failed_stage=0) == (steps_one, True)
    with pytest.raises(ValueError, match="failed_stage"):
        drive_operator(ep, op, "correction", "failed", 60)


def test_until_failed_budget_is_per_stage_to_redo(parts) -> None:
    """The budget of ``until=failed`` is ``max_correction_steps`` for each stage through the failed one:
    a budget just short of the two stages together still completes both."""
    ep, op = _fresh(parts)
    both, _ = drive_operator(ep, op, "correction", "task", 200)
    ep, op = _fresh(parts)
    first, _ = drive_operator(ep, op, "correction", "stage", 200)
    per_stage = max(first, both - first)
    assert per_stage < both  # one stage's budget would not be enough for both
    ep, op = _fresh(parts)
    assert drive_operator(ep, op, "correction", "task", per_stage)[1] is False
    ep, op = _fresh(parts)
    assert drive_operator(ep, op, "correction", "failed", per_stage, failed_stage=1) == (both, True)
