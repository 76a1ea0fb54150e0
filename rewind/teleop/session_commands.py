"""How the teleop session carries out the person's commands (:data:`~rewind.teleop.commands.COMMANDS`):
:class:`SessionCommands`, the command half of :class:`~rewind.teleop.session.TeleopSession`.

:meth:`SessionCommands.command` checks the name and arguments and calls ``_cmd_<name>``; a handler
changes the mode, rewinds, commits or drops the episode, or sets the gripper, auto-pause or camera,
and raises :class:`~rewind.teleop.commands.TeleopCommandError` (shown to the person) when the command
does not apply now. It is a mixin: the episode, recording, modes and their helpers are the
session's (declared below, defined in :mod:`rewind.teleop.session`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rewind.config import ConfigError
from rewind.monitor.episode import MonitoredEpisode, StepResult, check_rewind_mode
from rewind.monitor.recording import EpisodeRecording
from rewind.store import StoreError
from rewind.teleop.commands import (
    COMMANDS,
    GRIP_SETTLE_STEPS,
    GRIP_VALUES,
    OUTCOMES,
    SessionSettings,
    TeleopCommandError,
)
from rewind.teleop.controls import HumanInput, current_grip_command


class SessionCommands:
    """The command handlers of :class:`~rewind.teleop.session.TeleopSession` (see the module docstring).

    The session provides the attributes and methods declared here.
    """

    episode: MonitoredEpisode
    recording: EpisodeRecording
    settings: SessionSettings
    input: HumanInput
    has_policy: bool
    mode: str
    resume_mode: str
    grip: float
    _grip_settle: int
    auto_pause: bool
    cameras: list[str]
    camera: str
    version: int
    discarded: int
    episode_index: int
    _set_mode: Callable[[str, str], None]
    _note: Callable[[str], None]
    _record: Callable[[StepResult], StepResult]
    _outcome_text: Callable[[], str]
    _commit: Callable[..., None]
    _start_episode: Callable[[], None]
    state: Callable[[], dict[str, Any]]

    def command(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Carry out command ``name`` (:data:`COMMANDS`) with ``args``; returns :meth:`state`.

        Raises:
            TeleopCommandError: unknown command or argument, an invalid value, or a command that does
                not apply now (its message says what to do instead).
        """
        args = dict(args or {})
        if name not in COMMANDS:
            raise TeleopCommandError(f"unknown command '{name}'; valid: {', '.join(COMMANDS)}")
        unknown = sorted(set(args) - set(COMMANDS[name][0]))
        if unknown:
            valid = ", ".join(COMMANDS[name][0]) or "none"
            raise TeleopCommandError(f"{name}: unknown argument '{unknown[0]}'; valid arguments: {valid}")
        getattr(self, f"_cmd_{name}")(**args)
        self.version += 1
        return self.state()

    def _require_running(self, what: str) -> None:
        if self.episode.done:
            raise TeleopCommandError(
                f"{what}: the episode is over ({self._outcome_text()}); end it, discard it or rewind first"
            )

    def _require_policy(self, what: str) -> None:
        if not self.has_policy:
            raise TeleopCommandError(f"{what}: no policy loaded (pure teleop: start with policy_path=...)")

    def _cmd_pause(self) -> None:
        if self.mode != "paused":
            self._set_mode("paused", f"paused from {self.mode} (press P again to resume)")
            return
        self._require_running("resume")
        self._set_mode(self.resume_mode, "resumed")

    def _cmd_takeover(self) -> None:
        if self.mode == "human":
            if self.has_policy:
                self._cmd_handback()
            else:
                self._set_mode("paused", "take-over toggled off (no policy to hand back to)")
            return
        self._require_running("take over")
        self.grip, self._grip_settle = current_grip_command(self.episode.base), 0
        self._set_mode("human", "you are driving (press T again or H to hand back)")

    def _cmd_handback(self) -> None:
        self._require_policy("hand back")
        self._require_running("hand back")
        self.input.release()
        self._set_mode("autonomous", "handed back to the policy")

    def _cmd_rewind(self, target: int | str | None = None, mode: str | None = None) -> None:
        mode = mode or self.settings.rewind_mode
        try:
            check_rewind_mode(mode, "rewind: mode")
        except ConfigError as exc:
            raise TeleopCommandError(str(exc)) from exc
        cps = self.episode.checkpoints
        names = ", ".join(f"{i}={c.name}" for i, c in enumerate(cps))
        if target in (None, "latest"):
            target = len(cps) - 1
        if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < len(cps):
            raise TeleopCommandError(
                f"rewind: target must be a checkpoint index in [{names}] or 'latest'; got {target!r}"
            )
        if mode == "drive" and self.episode.done:
            raise TeleopCommandError(
                "rewind: the episode is over, a drive rewind cannot move; use mode=restore"
            )
        self.input.release()
        ev = self.episode.rewind(target, mode, on_step=self._record)
        if not self.episode.done:  # (a drive rewind that ran out of time has already paused)
            how = f"{ev['drive_steps']} recovery steps" if mode == "drive" else "state restored"
            self._set_mode(
                "paused",
                f"rewound to '{ev['checkpoint']}' (step {ev['checkpoint_step']}, {how}): "
                "T to take over, H to hand back",
            )

    def _cmd_end(self, outcome: str = "") -> None:
        if outcome not in OUTCOMES:
            raise TeleopCommandError(f"end: outcome must be one of [{', '.join(OUTCOMES)}]; got '{outcome}'")
        if not len(self.recording):
            raise TeleopCommandError("end: nothing to commit (no step taken yet); use discard")
        try:
            self._commit(outcome, "person")
        except (StoreError, OSError) as exc:
            raise TeleopCommandError(f"end: commit failed, the episode is kept, try again ({exc})") from exc
        self._start_episode()

    def _cmd_discard(self) -> None:
        self.discarded += 1
        self._note(f"discarded episode {self.episode_index} ({len(self.recording)} steps not written)")
        self._start_episode()

    def _cmd_grip(self, value: str = "toggle") -> None:
        if value not in GRIP_VALUES:
            raise TeleopCommandError(f"grip: value must be one of [{', '.join(GRIP_VALUES)}]; got '{value}'")
        opened = self.grip < 0 if value == "toggle" else value == "open"
        self.grip, self._grip_settle = (1.0 if opened else -1.0), GRIP_SETTLE_STEPS
        self._note(f"gripper command: {'open' if opened else 'close'}")

    def _cmd_auto_pause(self, value: bool | None = None) -> None:
        if value is not None and not isinstance(value, bool):
            raise TeleopCommandError(f"auto_pause: value must be true or false; got {value!r}")
        self.auto_pause = (not self.auto_pause) if value is None else value
        self._note(f"auto-pause on alarm {'on' if self.auto_pause else 'off'}")

    def _cmd_camera(self, name: str | None = None) -> None:
        if name is None:
            name = self.cameras[(self.cameras.index(self.camera) + 1) % len(self.cameras)]
        if name not in self.cameras:
            raise TeleopCommandError(f"camera: name must be one of [{', '.join(self.cameras)}]; got '{name}'")
        self.camera = name
