"""DeferredStore: episodes written step by step where a rollout runs (a Ray actor), checked there,
picklable, and committed unchanged into the real store by the driver."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers.store import assert_episode_equals, make_episode, make_spec

from rewind.rollout.deferred import DeferredStore
from rewind.store import ReplayStore, StoreError


def _write(store: DeferredStore, ep: dict) -> None:
    with store.episode(**ep["meta"]) as writer:
        for t in range(len(ep["actions"])):
            obs = {k: v[t] for k, v in ep["obs"].items()}
            writer.add(obs, ep["actions"][t], ep["states"][t], ep["sources"][t], ep["rewards"][t])


def test_episodes_travel_and_commit_unchanged(tmp_path) -> None:
    deferred = DeferredStore(make_spec())
    episodes = [make_episode(i) for i in range(3)]
    for ep in episodes:
        _write(deferred, ep)
    pending = pickle.loads(pickle.dumps(deferred.take()))  # what the actor sends back
    assert deferred.pending == [] and [p.seed for p in pending] == [0, 1, 2]
    with ReplayStore.create(tmp_path / "s", make_spec()) as store:
        infos = [p.commit_into(store) for p in pending]
        for info, ep in zip(infos, episodes, strict=True):
            assert_episode_equals(store.load(info.id), ep)
            assert info.extra == ep["meta"]["extra"] and info.seed == ep["meta"]["seed"]


def test_a_bad_episode_is_refused_in_the_actor() -> None:
    deferred = DeferredStore(make_spec())
    ep = make_episode(0)
    ep["actions"] = ep["actions"].copy()
    ep["actions"][2, 0] = np.nan
    with pytest.raises(StoreError, match="actions"):
        _write(deferred, ep)
    assert deferred.pending == []
