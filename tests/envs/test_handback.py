"""Stage-by-stage mode: the operator completes exactly the current stage, then hands back."""

from __future__ import annotations

import numpy as np
import pytest

import rewind.envs as renvs
from rewind.envs.operators.handback import complete_current_stage


@pytest.mark.parametrize("task", ["stack3", "pick_place"])
def test_operator_completes_one_stage_then_hands_back(task: str) -> None:
    env = renvs.make_env(task)
    op = renvs.make_operator(task)
    obs, _ = env.reset(seed=3)
    op.reset(np.random.default_rng(3))
    recorded: list[int] = []
    res = complete_current_stage(
        env, op, obs, max_steps=200, on_step=lambda o, a, i: recorded.append(i["stage"])
    )
    assert res.start_stage == 0 and res.completed and res.end_stage == 1
    assert res.steps == len(recorded) > 0 and recorded[-1] == 1 and all(s == 0 for s in recorded[:-1])
    assert env.unwrapped.stage() == 1 and not res.done
    # handing over again continues with the next stage only
    res2 = complete_current_stage(env, op, res.obs, max_steps=200)
    assert res2.start_stage == 1 and res2.end_stage == 2
    env.close()


def test_stage_by_stage_reaches_success_and_respects_budget() -> None:
    env = renvs.make_env("lift")
    op = renvs.make_operator("lift")
    obs, _ = env.reset(seed=0)
    op.reset(np.random.default_rng(0))
    short = complete_current_stage(env, op, obs, max_steps=2)
    assert short.steps == 2 and not short.completed
    res = short
    for _ in range(env.unwrapped.num_stages + 1):
        if res.done:
            break
        res = complete_current_stage(env, op, res.obs, max_steps=100)
    assert res.info["success"] and res.completed
    with pytest.raises(ValueError, match="max_steps"):
        complete_current_stage(env, op, obs, max_steps=-1)
    env.close()
