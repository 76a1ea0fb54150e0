"""Helpers shared by the teleop tests that run ``rewind-teleop`` as a subprocess."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` of a child that the test stops with SIGINT: a shell that runs the suite in the
    background (job control off) starts it with SIGINT ignored, and Python keeps an ignored SIGINT
    ignored, so Ctrl-C would never reach the command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
