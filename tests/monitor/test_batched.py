"""Batched monitored rollouts (rewind.monitor.batched) with the tiny policy in real MuJoCo: a batch of 8
gives the same records, events, score traces and stored episodes as the sequential runner (B = 1),
with rewinds in both modes, checkpoint tracking and refills from the remaining seeds; at B = 1 without
padding it is step for step the plain MonitoredEpisode loop."""

import dataclasses
import json

import pytest
import torch
from helpers.monitor import MAX_STEPS, OFTEN, TinyMonitor, monitored_eval_args, run_tiny_monitored
from helpers.train import run_cli

from rewind.envs.registry import make_env
from rewind.monitor import Calibration, Monitor, MonitoredEpisode, RewindConfig, make_score
from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.detection import ScoreSet, scored_rollouts
from rewind.monitor.rollouts import run_monitored
from rewind.scripts.eval import main as eval_main
from rewind.store import ReplayStore, store_spec_for
from rewind.train.policy_api import load_policy
from rewind.utils.seeding import episode_noise_seed, torch_generator

SEEDS = list(range(9))  # more than 8: the batch refills from the remaining seeds


def _envs(n: int) -> list:
    return [make_env("lift", max_steps=MAX_STEPS) for _ in range(n)]


def _run(
    tiny: TinyMonitor, batch: int, mode: str, store=None, inference_rows: int = 10, observers=(), seeds=SEEDS
):
    envs = _envs(batch)
    try:
        return run_tiny_monitored(
            tiny, envs, mode, seeds, store, observers=observers, inference_rows=inference_rows
        )
    finally:
        for env in envs:
            env.close()


@pytest.mark.parametrize("mode", ["restore", "drive"])
def test_a_batch_of_8_equals_the_sequential_runner(tiny_monitor, mode) -> None:
    seq_records, seq_traces = _run(tiny_monitor, 1, mode)
    records, traces = _run(tiny_monitor, 8, mode)
    assert [r.seed for r in records] == SEEDS
    assert records == seq_records  # success, lengths, stages, events (alarms, checkpoints, rewinds)
    assert traces == seq_traces
    rewinds = [e for r in records for e in r.events if e["kind"] == "rewind"]
    assert rewinds and all(e["mode"] == mode for e in rewinds)
    assert any(e["kind"] == "checkpoint" for r in records for e in r.events)  # tracking ran
    if mode == "drive":
        assert any(e["drive_steps"] > 0 for e in rewinds) and any(r.operator_steps for r in records)


def test_backtracking_rewinds_are_the_same_batched_and_sequential(tiny_monitor) -> None:
    cfg = RewindConfig(max_rewinds=6, backtrack_after=1)
    envs1, envs8 = _envs(1), _envs(8)
    try:
        seq, seq_traces = run_tiny_monitored(tiny_monitor, envs1, "restore", SEEDS, rewind=cfg)
        bat, traces = run_tiny_monitored(tiny_monitor, envs8, "restore", SEEDS, rewind=cfg)
    finally:
        for env in envs1 + envs8:
            env.close()
    assert bat == seq and traces == seq_traces

    def backtracked(events: list[dict]) -> bool:
        """A rewind to an older checkpoint than the one before it, no checkpoint reached between."""
        last = None
        for e in events:
            if e["kind"] == "checkpoint":
                last = None
            elif e["kind"] == "rewind":
                if last is not None and e["checkpoint_step"] < last:
                    return True
                last = e["checkpoint_step"]
        return False

    assert any(backtracked(r.events) for r in bat)


def test_episodes_end_at_different_ticks_and_the_batch_refills(tiny_monitor) -> None:
    class Starts:
        def __init__(self) -> None:
            self.resets: list[tuple[int, int]] = []

        def on_reset(self, i, env, seed, info) -> None:
            self.resets.append((i, seed))

        def after_step(self, i, env, reward, info) -> None:
            pass

        def on_end(self, i, record) -> None:
            pass

    starts = Starts()
    records, _ = _run(tiny_monitor, 3, "restore", observers=[starts])
    assert sorted(s for _, s in starts.resets) == SEEDS and {i for i, _ in starts.resets} == {0, 1, 2}
    assert len({r.length for r in records}) > 1  # restore rewinds set episodes apart


def test_at_b1_unpadded_it_is_the_monitored_episode_loop(tiny_monitor) -> None:
    loaded, lib, monitor = tiny_monitor.loaded, tiny_monitor.library, tiny_monitor.monitor
    records, traces = _run(tiny_monitor, 1, "drive", inference_rows=0, seeds=SEEDS[:4])
    env = make_env("lift", max_steps=MAX_STEPS)
    for rec, trace in zip(records, traces, strict=True):
        ep = MonitoredEpisode(
            env,
            loaded.policy,
            Monitor(make_score("tide"), monitor.calibration),
            CheckpointTracker(lib, min_similarity=0.0, patience=1),
            RewindConfig(mode="drive", max_rewinds=2, drive_max_steps=10),
            generator=torch_generator(episode_noise_seed(7, rec.seed)),
        )
        log = ep.run(rec.seed)
        assert (log.events, log.scores, ep.success) == (rec.events, trace, rec.success)
    env.close()


def test_what_reaches_the_store_equals_the_sequential_path(tiny_monitor, tmp_path) -> None:
    env = make_env("lift", max_steps=MAX_STEPS)
    spec = store_spec_for(env)
    env.close()
    rows = {}
    for batch in (1, 8):
        with ReplayStore.create(tmp_path / f"b{batch}", spec) as store:
            _run(tiny_monitor, batch, "drive", store=store)
        with ReplayStore.open(tmp_path / f"b{batch}") as store:
            infos = store.episodes()
            rows[batch] = [
                (i.id, i.seed, i.length, i.success, i.extra, i.source_counts, i.content_sha256) for i in infos
            ]
            assert [i.seed for i in infos] == SEEDS  # committed in seed order
            assert any(i.source_counts.get("recovery") for i in infos)
    assert rows[8] == rows[1]


def test_rewind_eval_with_a_monitor_gives_the_same_records_for_any_batch_size(
    tiny_run, tiny_monitor, tmp_path
) -> None:
    args = [
        *monitored_eval_args(tiny_run, tiny_monitor.calibrations[OFTEN], 5),
        "rewind=drive",
        "rewind.max_rewinds=1",
    ]
    summaries = []
    for batch in (1, 3):
        out = tmp_path / f"b{batch}"
        assert run_cli(eval_main, [*args, f"rollout.batch_size={batch}", f"out_dir={out}"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        summaries.append([{k: v for k, v in r.items() if k != "monitor_ms"} for r in summary["records"]])
    assert summaries[0] == summaries[1] and sum(r["rewinds"] for r in summaries[0]) > 0


def test_scored_rollouts_of_monitor_eval_do_not_depend_on_the_batch(tiny_monitor) -> None:
    """With STAC the policy samples 3 chunks per inference (per-row noise of S > 1 samples)."""
    loaded = tiny_monitor.loaded
    runs = []
    for batch in (1, 4):
        scores = ScoreSet(
            [make_score("tide"), make_score("stac", num_samples=3), make_score("random", seed=3)]
        )
        envs = _envs(batch)
        try:
            eps = scored_rollouts(envs, loaded.policy, scores, SEEDS[:5], 11, snapshot_every=8)
        finally:
            for env in envs:
                env.close()
        assert scores.calls == sum(e.length for e in eps)  # the episodes' copies report their cost
        runs.append([(e.seed, e.success, e.length, e.traces, [s for s, _ in e.snapshots]) for e in eps])
    assert runs[0] == runs[1]
    assert runs[0][0][3]["random"] != runs[0][1][3]["random"]  # each episode its own random stream


def test_act_with_temporal_ensembling_infers_every_step_batched(tiny_run, tmp_path) -> None:
    """A policy that needs a chunk at every step (ACT's temporal ensemble, its state per episode)."""
    from helpers.train import train_config

    from rewind.train import run_train

    threads = torch.get_num_threads()
    cfg = train_config(tmp_path / "act", tiny_run["store"], "act")
    cfg.policy.update(n_action_steps=1, temporal_ensemble_coeff=0.1)
    try:
        run_train(cfg)
    finally:
        torch.set_num_threads(threads)
    env = make_env("lift", max_steps=MAX_STEPS)
    loaded = load_policy(str(tmp_path / "act"), env, "lift", torch.device("cpu"))
    env.close()
    monitor = Monitor(make_score("tide"), Calibration("tide", 0.5, 1, 1e-4, loaded.weights_hash))
    runs = []
    for batch in (1, 4):
        envs = _envs(batch)
        try:
            records, traces = run_monitored(
                envs, loaded, monitor, None, RewindConfig(max_rewinds=1), SEEDS[:5], 3, progress=False
            )
        finally:
            for e in envs:
                e.close()
        runs.append(([dataclasses.replace(r, monitor_ms=0.0) for r in records], traces))
    assert runs[0] == runs[1]
    assert sum(t is not None for t in runs[0][1][0]) > MAX_STEPS // 2  # a score at (nearly) every step


def test_a_monitor_armed_from_the_first_checkpoint_is_armed_alike_batched(tiny_monitor) -> None:
    """``armed_from="checkpoint"`` reaches every episode of a batch: the same records as the sequential
    runner, no alarm while only the start is reached, where the unarmed monitor alarms there."""
    m = tiny_monitor.monitor
    armed = dataclasses.replace(
        tiny_monitor, monitor=Monitor(m.score, m.calibration, m.progress, "checkpoint")
    )
    seq, _ = _run(armed, 1, "restore")
    bat, _ = _run(armed, 8, "restore")
    assert bat == seq

    def alarm_checkpoints(records) -> list:
        return [e["checkpoint"] for r in records for e in r.events if e["kind"] == "alarm"]

    assert "start" in alarm_checkpoints(_run(tiny_monitor, 8, "restore")[0])
    assert alarm_checkpoints(bat) and "start" not in alarm_checkpoints(bat)


def test_armed_from_checkpoint_refuses_a_calibration_without_a_checkpoint_library(tiny_monitor) -> None:
    from rewind.config import ConfigError
    from rewind.monitor.factory import MonitorConfig, load_monitor

    cal = tiny_monitor.calibrations[OFTEN]  # calibration.json only, no checkpoint library
    cfg = MonitorConfig(score="tide", calibration=str(cal), armed_from="checkpoint")
    with pytest.raises(ConfigError, match="monitor.armed_from=checkpoint needs checkpoint tracking"):
        load_monitor(cfg, tiny_monitor.loaded.policy, tiny_monitor.loaded.weights_hash)
    monitor, tracker, _ = load_monitor(
        dataclasses.replace(cfg, armed_from="start"),
        tiny_monitor.loaded.policy,
        tiny_monitor.loaded.weights_hash,
    )
    assert monitor is not None and monitor.armed_from == "start" and tracker is None
