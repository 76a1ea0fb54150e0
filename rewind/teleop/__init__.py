"""Teleop intervention tool (``rewind-teleop``): watch a monitored rollout in the browser, get called
in on an alarm, rewind, correct, and record every step with its label.

* :mod:`rewind.teleop.session`: :class:`TeleopSession`, the HTTP-free state machine (modes,
  stepping, recording, commits);
* :mod:`rewind.teleop.session_commands`: how the session carries out each command (a mixin);
* :mod:`rewind.teleop.commands`: the session's modes, commands, settings and command error;
* :mod:`rewind.teleop.controls`: key bindings and the person's input;
* :mod:`rewind.teleop.simulation`: :class:`SimLoop`, the simulation thread (control rate, frames, state);
* :mod:`rewind.teleop.server`: :class:`TeleopServer`, the page, MJPEG stream and JSON API;
* :mod:`rewind.teleop.guard`: what the server refuses (foreign Host/Origin, bad bodies, slow clients,
  too many connections);
* :mod:`rewind.teleop.app`: building it all from a :class:`TeleopConfig`.

See ``docs/teleop.md``.
"""

from rewind.teleop.app import build_session, run_teleop
from rewind.teleop.commands import COMMANDS, MODES, SessionSettings, TeleopCommandError
from rewind.teleop.config import TeleopConfig
from rewind.teleop.controls import ControlSettings, HumanInput
from rewind.teleop.server import TeleopServer
from rewind.teleop.session import TeleopSession
from rewind.teleop.simulation import SimLoop

__all__ = [
    "COMMANDS",
    "MODES",
    "ControlSettings",
    "HumanInput",
    "SessionSettings",
    "SimLoop",
    "TeleopCommandError",
    "TeleopConfig",
    "TeleopServer",
    "TeleopSession",
    "build_session",
    "run_teleop",
]
