"""Shared by the hostile weights and training-state tests (``tests/train/test_hostile_*.py``)."""

from __future__ import annotations

from helpers.train import TINY_TRAIN
from rewind.cli.app import is_user_error

#: The tiny run's last saved step (``tiny_run``: weights ``step_000010..30``, training state of step 30).
STEP = "step_000030"
#: The tiny run continued to step 40 on resume (its other settings as made).
RESUME_TRAIN = {**TINY_TRAIN, "steps": 40}
#: A low-dim observation key of Lift (the tiny run's layout).
OBS_KEY = "eef_pos"


def error_line(err: str, prog: str) -> str:
    """The one ``<prog>: error: ...`` line of a command's stderr (log lines aside; no traceback)."""
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def one_line(exc: BaseException) -> str:
    """The message of a one-line user error (asserts it is one)."""
    text = str(exc)
    assert "\n" not in text and is_user_error(exc), text
    return text
