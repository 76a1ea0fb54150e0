"""Chunk stepping: lockstep batches step the rest of a policy's action chunk in one call
(``step_chunks``; one message per worker with ``rollout.workers``) and get the same records as
stepping one action at a time, in this process and in worker processes; a chunk stops at the step
that ends its episode (truncated, or a rejected action)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rewind.envs.config import EnvConfig
from rewind.envs.wrappers import PerturbationConfig
from rewind.lockstep import run_batch
from rewind.policies.base import to_torch_obs
from rewind.rollout.pool import step_chunks, step_many
from rewind.rollout.workers import EnvFactory, EnvWorkers
from rewind.train.policy_api import load_policy

# 13 steps: episodes end inside a chunk of 4 (steps 13 = 3 * 4 + 1); the nudge fires in steps 2-6
LIFT = EnvFactory(
    EnvConfig(name="lift", max_steps=13), PerturbationConfig(nudge_prob=1.0, nudge_window=(2, 6))
)


def _records(envs: Any, policy: Any, chunked: bool) -> list[Any]:
    """The records of two batches, each followed by the envs' final physics states (the actions'
    fingerprint: the records alone would not tell one action sequence from another)."""
    gen = torch.Generator().manual_seed(7)
    out: list[Any] = []
    for seeds in ([0, 1, 2], [3, 4, 5]):
        out += run_batch(envs, policy, seeds, gen, torch.device("cpu"), chunked=chunked)
        out += [env.unwrapped.physics_state().tobytes() for env in envs]
    return out


def test_chunked_lockstep_equals_per_step_in_process_and_in_workers(
    tiny_run: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = load_policy(tiny_run["train"], LIFT(), "lift", torch.device("cpu")).policy
    assert policy.n_action_steps == 4
    local = [LIFT() for _ in range(3)]
    per_step = _records(local, policy, chunked=False)
    records = [r for r in per_step if not isinstance(r, bytes)]
    assert len(records) == 6 and all(r.length == 13 or r.success for r in records)
    assert all(r.perturbations == ["object_nudge"] for r in records)
    assert _records(local, policy, chunked=True) == per_step
    calls: list[int] = []
    real = EnvWorkers.step_chunks

    def counted(self: EnvWorkers, *args: Any) -> Any:
        calls.append(len(args[1]))
        return real(self, *args)

    monkeypatch.setattr(EnvWorkers, "step_chunks", counted)
    with EnvWorkers(LIFT, 3, 2) as pool:
        assert _records(pool, policy, chunked=True) == per_step
        # 13 steps = 4 chunk calls per batch (4 + 4 + 4 + 1 actions), not 13 step calls
        assert len(calls) == 8
        assert _records(pool, policy, chunked=False) == per_step
        assert len(calls) == 8


def test_step_chunks_stop_at_the_end_of_an_episode_and_at_a_rejected_action() -> None:
    actions = np.zeros((6, 5), np.float32)
    bad = actions.copy()
    bad[2] = np.nan
    local = [LIFT() for _ in range(2)]
    with EnvWorkers(LIFT, 2, 2) as pool:
        for envs in (local, pool):
            for i, env in enumerate(envs):
                env.reset(seed=i)
        for envs in (local, pool):  # 6 steps each for env 0; env 1 takes 2 steps, then the NaN row
            rows = step_chunks(envs, [0, 1], [actions, bad])
            assert [len(r) for r in rows] == [6, 3]
            assert rows[1][2][0] is None and rows[1][2][4]["sim_error"].startswith("action rejected:")
            assert not any(r[2] or r[3] for r in rows[0])
        here = step_chunks(local, [0], [actions])[0]  # steps 7-12, then 13 ends it: a 1-row chunk
        there = step_chunks(pool, [0], [actions])[0]
        assert len(here) == len(there) == 6
        last_here, last_there = step_chunks(local, [0], [actions])[0], step_chunks(pool, [0], [actions])[0]
        assert len(last_here) == len(last_there) == 1 and last_here[0][3] and last_there[0][3]
        for a, b in zip(here + last_here, there + last_there, strict=True):
            assert a[1:4] == b[1:4] and a[4]["stage"] == b[4]["stage"]
            assert all(np.array_equal(a[0][k], b[0][k]) for k in a[0])
        for i in range(2):  # the physics state and step count after a chunk come from the worker's slot
            assert np.array_equal(pool[i].unwrapped.physics_state(), local[i].unwrapped.physics_state())
            assert pool[i].unwrapped.elapsed_steps == local[i].unwrapped.elapsed_steps
        # stepping on after a chunk continues from where it stopped, as step_many would
        one_here = step_many(local, [1], [actions[0]])[0]
        one_there = step_many(pool, [1], [actions[0]])[0]
        assert all(np.array_equal(one_here[0][k], one_there[0][k]) for k in one_here[0])
    with pytest.raises(ValueError, match="2 indices but 1 action sequences"):
        step_chunks(local, [0, 1], [actions])


def test_queued_actions_are_what_select_action_returns_next(tiny_run: dict[str, Path]) -> None:
    policy = load_policy(tiny_run["train"], LIFT(), "lift", torch.device("cpu")).policy
    env = LIFT()
    obs, _ = env.reset(seed=0)
    batch = to_torch_obs({k: v[None] for k, v in obs.items()})
    policy.reset()
    assert policy.queued_actions() == []
    policy.select_action(batch, generator=torch.Generator().manual_seed(0))
    queued = policy.queued_actions()
    assert len(queued) == policy.n_action_steps - 1
    for q in queued:  # whatever is observed, the queue comes out unchanged
        shifted = {k: v + 1.0 for k, v in batch.items()}
        assert torch.equal(policy.select_action(shifted), q)
    assert policy.queued_actions() == []
