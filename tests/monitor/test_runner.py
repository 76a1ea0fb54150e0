"""The closed loop with a real (tiny) policy in real MuJoCo: alarms, restore/drive rewinds, budgets,
hand-over, recording labels."""

import numpy as np
import pytest
import torch

from rewind.envs.registry import make_env
from rewind.monitor import Calibration, Monitor, MonitoredEpisode, RewindConfig, build_library, make_score
from rewind.monitor.checkpoints import CheckpointLibrary, CheckpointTracker, ReachedCheckpoint, StageLabeler
from rewind.monitor.recording import EpisodeRecording
from rewind.monitor.scores import policy_features
from rewind.store import ReplayStore
from rewind.train.policy_api import load_policy


@pytest.fixture()
def parts(tiny_run):
    env = make_env("lift")
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    yield env, loaded
    env.close()


def _always_alarm(loaded) -> Monitor:
    return Monitor(make_score("tide"), Calibration("tide", 0.5, 1, -1.0, loaded.weights_hash))


def test_restore_rewind_returns_to_the_exact_start(parts) -> None:
    env, loaded = parts
    ep = MonitoredEpisode(
        env,
        loaded.policy,
        _always_alarm(loaded),
        None,
        RewindConfig(max_rewinds=2),
        generator=torch.Generator().manual_seed(0),
    )
    obs0 = {k: v.copy() for k, v in ep.reset(5).items()}
    steps = 0
    while ep.log.rewinds == 0:
        ep.policy_step()
        steps += 1
    assert steps == loaded.policy.n_action_steps + 1  # the second chunk is the first one scored
    assert ep.step_count == 0 and all(np.array_equal(ep.obs[k], obs0[k]) for k in obs0)
    assert ep.policy.get_state().obs_history == []  # the policy restarts fresh
    while not ep.done and ep.step_count < 40:
        ep.policy_step()
    log = ep.finish()
    assert log.rewinds == 2  # the retry budget
    kinds = [e["kind"] for e in log.events]
    assert kinds.count("rewind") == 2 and kinds.count("alarm") >= 3
    rewind = next(e for e in log.events if e["kind"] == "rewind")
    assert rewind["checkpoint"] == "start" and rewind["mode"] == "restore" and rewind["outcome"] == "failure"


def test_drive_rewind_moves_the_gripper_back_and_labels_recovery(parts) -> None:
    env, loaded = parts
    ep = MonitoredEpisode(env, loaded.policy, None, None, RewindConfig(mode="drive", drive_max_steps=60))
    ep.reset(3)
    start = env.unwrapped.gripper_pos().copy()
    rec = EpisodeRecording(pre_intervention_steps=2)
    ep.on_step = rec.add
    for _ in range(3):
        ep.policy_step()
    for _ in range(10):  # somebody pushes the gripper away
        ep.external_step(np.array([1.0, 1.0, 1.0, 0.0, 1.0], np.float32), "human")
    assert np.linalg.norm(env.unwrapped.gripper_pos() - start) > 0.1
    ev = ep.rewind()
    assert ev["mode"] == "drive" and ev["drive_steps"] > 0
    assert np.linalg.norm(env.unwrapped.gripper_pos() - start) < 0.02
    assert rec.sources[:3] == ["policy", "pre_intervention", "pre_intervention"]
    assert rec.sources[3:13] == ["human"] * 10 and set(rec.sources[13:]) == {"recovery"}
    assert rec.operator_steps == 10 + ev["drive_steps"]


def test_library_similarity_peaks_at_the_labelled_step(parts, tiny_run) -> None:
    env, loaded = parts
    with ReplayStore.open(tiny_run["store"]) as store:
        demos = [store.load(i.id) for i in store.episodes()]
    lib = build_library(loaded.policy, demos, env.unwrapped, StageLabeler(), loaded.weights_hash)
    assert lib.names == ["after_grasp"] and lib.support == [len(demos)]
    tracker = CheckpointTracker(lib, min_similarity=0.0, patience=1)
    ep = MonitoredEpisode(env, loaded.policy, None, tracker, RewindConfig())
    demo = demos[0]
    ep.reset(int(demo.info.seed))
    sims = []
    for a in demo.actions:  # replay the demo; the tracker sees the policy's observation window
        loaded.policy.select_action({k: torch.as_tensor(ep.obs[k][None]).float() for k in ep.keys})
        ep._apply(a, "policy")
        f = policy_features(loaded.policy)[0] - torch.as_tensor(lib.mean)
        sims.append(
            float(f @ torch.as_tensor(lib.templates[0])) / float(f.norm() * np.linalg.norm(lib.templates[0]))
        )
        if ep.done:
            break
    label = StageLabeler().label(demo, env.unwrapped)[0][0]
    assert abs(int(np.argmax(sims)) - label) <= 3 and max(sims) > 0


def _one_checkpoint_library(loaded) -> CheckpointLibrary:
    """A library with one checkpoint, ``a`` (a constant template), for ``loaded``'s weights."""
    return CheckpointLibrary(
        ["a"],
        np.ones((1, loaded.policy.feature_dim), np.float32),
        np.zeros(loaded.policy.feature_dim, np.float32),
        "stage",
        loaded.weights_hash,
        [1],
    )


def _one_checkpoint_episode(env, loaded, cfg: RewindConfig):
    """An episode with checkpoint ``a`` reached at step 6 by hand (the library's only one)."""
    tracker = CheckpointTracker(_one_checkpoint_library(loaded))
    ep = MonitoredEpisode(env, loaded.policy, None, tracker, cfg)
    ep.reset(1)
    for _ in range(6):
        ep.policy_step()
    obs = {k: v.copy() for k, v in ep.obs.items()}
    tracker.reached.append(ReachedCheckpoint(0, "a", ep.step_count, 1.0, env.unwrapped.snapshot(), obs))
    return ep, tracker


def test_rewind_to_a_chosen_checkpoint(parts) -> None:
    env, loaded = parts
    ep, tracker = _one_checkpoint_episode(env, loaded, RewindConfig())
    snap_obs = tracker.reached[-1].obs
    for _ in range(5):
        ep.policy_step()
    ev = ep.rewind(target=1)
    assert ev["checkpoint"] == "a" and ep.step_count == 6
    assert all(np.array_equal(ep.obs[k], snap_obs[k]) for k in snap_obs)
    with pytest.raises(ValueError, match="0: start, 1: a"):
        ep.rewind(target=5)


def _retries(ep, n: int) -> list[tuple[str, int]]:
    """``n`` automatic rewinds, each after 3 policy steps: (checkpoint, step count after it)."""
    out = []
    for _ in range(n):
        for _ in range(3):
            ep.policy_step()
        ev = ep.rewind()
        out.append((ev["checkpoint"], ep.step_count))
    return out


def test_backtrack_after_n_retries_goes_one_checkpoint_further_back(parts) -> None:
    env, loaded = parts
    ep, tracker = _one_checkpoint_episode(env, loaded, RewindConfig(backtrack_after=2))
    assert _retries(ep, 4) == [("a", 6), ("a", 6), ("start", 0), ("start", 0)]
    assert [c.name for c in tracker.reached] == ["start"]  # the backtrack forgot `a`
    # a checkpoint reached anew starts its own count
    obs = {k: v.copy() for k, v in ep.obs.items()}
    tracker.reached.append(ReachedCheckpoint(0, "a", ep.step_count, 1.0, env.unwrapped.snapshot(), obs))
    assert ep.auto_rewind_target() == 1
    # Rewind-IL's rule (the default): always the latest
    ep, _ = _one_checkpoint_episode(env, loaded, RewindConfig())
    assert _retries(ep, 4) == [("a", 6)] * 4


def test_backtrack_after_refuses_a_negative_count() -> None:
    with pytest.raises(Exception, match="rewind.backtrack_after"):
        RewindConfig(backtrack_after=-1)


def test_recording_commits_labels_atomically(parts, tmp_path) -> None:
    env, loaded = parts
    from rewind.store import store_spec_for

    ep = MonitoredEpisode(env, loaded.policy)
    ep.reset(0)
    rec = EpisodeRecording(pre_intervention_steps=1)
    ep.on_step = rec.add
    ep.policy_step()
    ep.policy_step()
    ep.external_step(np.zeros(5, np.float32), "correction")
    with ReplayStore.create(tmp_path / "s", store_spec_for(env)) as store:
        info = rec.commit(store, success=False, seed=0, extra={"events": []})
        back = store.load(info.id)
    assert back.source_names == ["policy", "pre_intervention", "correction"]
    assert info.n_operator_steps == 1


def test_feature_extractor_matches_policy_encode(parts) -> None:
    from rewind.monitor.features import FeatureExtractor

    env, loaded = parts
    fe = FeatureExtractor(loaded.policy)
    assert fe.compiled
    obs, _ = env.reset(seed=4)
    fe.push(obs)
    first = {k: torch.as_tensor(obs[k][None]).float() for k in loaded.policy.used_obs_keys}
    loaded.policy.reset()
    loaded.policy.select_action(first)
    ref0 = policy_features(loaded.policy)[0].numpy()
    np.testing.assert_allclose(fe.features(), ref0, rtol=1e-4, atol=1e-5)  # window padded with the first obs
    obs, *_ = env.step(np.array([0.5, 0, 0, 0, 1], np.float32))
    fe.push(obs)
    loaded.policy.select_action(
        {k: torch.as_tensor(obs[k][None]).float() for k in loaded.policy.used_obs_keys}
    )
    np.testing.assert_allclose(fe.features(), policy_features(loaded.policy)[0].numpy(), rtol=1e-4, atol=1e-5)
    far = {k: v + 50.0 for k, v in obs.items()}  # far outside the demo range
    norm = loaded.policy.normalizer
    try:
        for clip in (None, 5.0):  # unclipped and clipped inputs must agree too
            norm.obs_clip = clip
            fe = FeatureExtractor(loaded.policy)
            fe.push(obs)
            fe.push(far)
            loaded.policy.reset()
            for o in (obs, far):
                loaded.policy.select_action(
                    {k: torch.as_tensor(o[k][None]).float() for k in loaded.policy.used_obs_keys}
                )
            np.testing.assert_allclose(
                fe.features(), policy_features(loaded.policy)[0].numpy(), rtol=1e-4, atol=1e-5
            )
    finally:
        norm.obs_clip = None


def test_armed_from_checkpoint_alarms_only_once_a_checkpoint_past_the_start_is_reached(parts) -> None:
    """``armed_from="checkpoint"``: a score over its threshold at every step raises no alarm while only
    the start is reached; once checkpoint ``a`` is, the next scored step alarms and rewinds to it; a
    rewind to the start disarms the score again."""
    env, loaded = parts
    # never reached by itself (a similarity must exceed 1): set by hand below
    tracker = CheckpointTracker(_one_checkpoint_library(loaded), min_similarity=1.0)
    monitor = Monitor(
        make_score("tide"), Calibration("tide", 0.5, 1, -1.0, loaded.weights_hash), armed_from="checkpoint"
    )
    ep = MonitoredEpisode(env, loaded.policy, monitor, tracker, RewindConfig(max_rewinds=5))
    ep.reset(1)
    k = loaded.policy.n_action_steps
    for _ in range(3 * k):
        ep.policy_step()
    assert [c.name for c in tracker.reached] == ["start"]
    assert sum(s is not None for s in ep.log.scores) >= 2  # scored over the threshold, yet no alarm
    assert not any(e["kind"] == "alarm" for e in ep.log.events) and ep.log.rewinds == 0
    obs = {key: v.copy() for key, v in ep.obs.items()}
    tracker.reached.append(ReachedCheckpoint(0, "a", ep.step_count, 1.0, env.unwrapped.snapshot(), obs))
    for _ in range(2 * k):
        ep.policy_step()
        if ep.log.rewinds:
            break
    assert ep.log.rewinds == 1
    alarm = next(e for e in ep.log.events if e["kind"] == "alarm")
    assert alarm["checkpoint"] == "a" and alarm["step"] >= 3 * k
    assert next(e for e in ep.log.events if e["kind"] == "rewind")["checkpoint"] == "a"
    ep.rewind(target=0)
    assert [c.name for c in tracker.reached] == ["start"]
    alarms = sum(e["kind"] == "alarm" for e in ep.log.events)
    for _ in range(3 * k):
        ep.policy_step()
    assert sum(e["kind"] == "alarm" for e in ep.log.events) == alarms and ep.log.rewinds == 2


def test_armed_from_refuses_an_unknown_name_and_a_monitor_without_tracking() -> None:
    from rewind.config import ConfigError
    from rewind.monitor.factory import MonitorConfig

    with pytest.raises(ConfigError, match=r"monitor.armed_from must be one of \[start, checkpoint\]"):
        MonitorConfig(score="tide", armed_from="grasp")
    with pytest.raises(ConfigError, match="needs checkpoint tracking"):
        MonitorConfig(score="tide", armed_from="checkpoint", track_checkpoints=False)
