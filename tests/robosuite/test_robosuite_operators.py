"""The robosuite scripted operators finish their tasks from reset and after a disrupted prefix (the
rates over 40 seeds are bench/robosuite_operators.py's, docs/robosuite.md)."""

from __future__ import annotations

import pytest
from _robosuite_helpers import needs_robosuite

pytestmark = needs_robosuite


@pytest.mark.parametrize("task", ["Lift", "Can"])
def test_operator_succeeds_from_reset_and_on_takeover(task: str) -> None:
    from rewind.envs.robosuite.evaluation import run_from_reset, run_takeover

    assert all(r["success"] for r in run_from_reset(task, [0, 1]))
    takeover = run_takeover(task, [0, 1])
    assert all(r["success"] for r in takeover), takeover


def test_operator_is_deterministic_per_seed() -> None:
    from rewind.envs.robosuite.evaluation import run_from_reset

    assert run_from_reset("Lift", [3]) == run_from_reset("Lift", [3])


def test_unknown_operator_lists_the_available() -> None:
    from rewind.envs.robosuite.operators import make_operator

    with pytest.raises(KeyError, match="available: Lift, Can"):
        make_operator("Square")
