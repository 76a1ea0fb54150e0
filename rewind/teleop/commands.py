"""The teleop session's vocabulary: its modes (:data:`MODES`), the commands a front end may send
(:data:`COMMANDS`) with their accepted values, the error a refused command raises and the session's
settings (:class:`SessionSettings`). :mod:`rewind.teleop.session_commands` carries them out."""

from __future__ import annotations

from dataclasses import dataclass

from rewind.config import ConfigError

MODES = ("autonomous", "paused", "human")

#: Session commands: name -> (accepted arguments, what it does).
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "pause": ((), "toggle: freeze the simulation / resume the mode it was in"),
    "takeover": ((), "toggle: the person drives / hands back to the policy"),
    "handback": ((), "the policy drives again (its queue starts fresh)"),
    "rewind": (("target", "mode"), "go back to reached checkpoint `target` (default latest), restore|drive"),
    "end": (("outcome",), "commit the episode as outcome=success|failure and start the next one"),
    "discard": ((), "drop the episode (nothing is written) and start the next one"),
    "grip": (("value",), "the person's gripper command: open|close|toggle"),
    "auto_pause": (("value",), "pause on monitor alarms: true|false (toggle when absent)"),
    "camera": (("name",), "switch the view camera (next one when absent)"),
}
GRIP_VALUES = ("open", "close", "toggle")
#: Human-mode steps taken after a gripper command even without motion input, so the fingers move.
GRIP_SETTLE_STEPS = 10
OUTCOMES = ("success", "failure")


class TeleopCommandError(ConfigError):
    """A command that cannot be carried out now, or with these arguments (shown to the person)."""


@dataclass
class SessionSettings:
    """How a teleop session runs.

    Attributes:
        seed: env seed of the first episode (episode ``i`` uses ``seed + i``; also the policy noise).
        round: the ``round`` recorded with each committed episode.
        auto_pause: pause when the monitor raises an alarm (the person is called in).
        rewind_mode: default rewind mode, ``restore`` or ``drive``.
        start_paused: start each episode paused instead of autonomous (human without a policy).
        step_when_idle: in human mode, step (with a zero motion) even when there is no input.
        pre_intervention_steps: policy steps before an intervention relabelled ``pre_intervention``.
        score_history: monitor values kept for the page's chart.
    """

    seed: int = 0
    round: int = 0
    auto_pause: bool = True
    rewind_mode: str = "restore"
    start_paused: bool = False
    step_when_idle: bool = False
    pre_intervention_steps: int = 15
    score_history: int = 200
