"""The simulation thread: runs a :class:`~rewind.teleop.session.TeleopSession` at the control rate.

It is the only thread that touches the session, the env and the renderer. HTTP threads hand it
commands through :meth:`SimLoop.submit` (executed between control steps, as soon as they arrive)
and read what it publishes: the latest JPEG :class:`~rewind.teleop.frames.Frame` and the latest
session state. Frames are rendered after every step and after every command that changed something;
while paused nothing is rendered.

Errors: a failed control step, command or publication pauses the session with the error in its state
(``error``, shown on the page); the episode is kept. Should the thread itself die, the unfinished
episode is written to the store as a ``failure`` (``extra.ended_by = "crash"``) and :attr:`SimLoop.fatal`
says why (``rewind-teleop`` then exits non-zero).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rewind.monitor.episode import StepResult
from rewind.teleop.commands import TeleopCommandError
from rewind.teleop.frames import Frame, FrameRenderer, Latest
from rewind.teleop.session import TeleopSession
from rewind.utils.render import RenderBackendError

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A command waiting for the simulation thread."""

    name: str
    args: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None
    error: str | None = None


class SimLoop:
    """Steps ``session`` at ``control_hz`` in a thread and publishes frames and state.

    Args:
        session: the teleop session (owned by this loop's thread once started).
        control_hz: control rate (the env's is 20 Hz).
        renderer: renders the streamed view (default: 256x256, no shadows or reflections).
    """

    def __init__(
        self, session: TeleopSession, control_hz: float = 20.0, renderer: FrameRenderer | None = None
    ) -> None:
        self.session, self.period = session, 1.0 / float(control_hz)
        self.renderer = renderer or FrameRenderer(session.episode.base)
        self.frames: Latest[Frame] = Latest()
        self.states: Latest[dict[str, Any]] = Latest()
        self._commands: queue.Queue[_Pending | None] = queue.Queue()  # None: new human input
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="teleop-sim", daemon=True)
        self._in_command, self._published, self._next, self._last_step = False, -1, 0.0, -1.0
        self.fatal: str | None = None  # why the simulation thread ended, when it crashed
        self.salvaged: dict[str, Any] | None = None  # the unfinished episode it then wrote
        self._start_error: BaseException | None = None
        session.input.listener = self._wake

    # ----------------------------------------------------------------- other threads
    def start(self) -> None:
        """Start the simulation thread; returns once the first frame is published.

        Raises:
            RenderBackendError: the first frame could not be rendered (no working OpenGL).
            RuntimeError: the thread died before its first frame (see the log).
        """
        self._thread.start()
        self.frames.wait_newer(0, timeout=60.0)
        if not self._thread.is_alive():
            if isinstance(self._start_error, RenderBackendError):
                raise self._start_error
            raise RuntimeError(f"the teleop simulation thread failed to start: {self.fatal} (see the log)")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop stepping and wake every waiting stream."""
        self._stop.set()
        self._thread.join(timeout)
        self.frames.close()
        self.states.close()

    def _wake(self) -> None:
        """New human input: step at once if a step is due (an idle person's key press is not held
        back until the next tick boundary; the control rate still never exceeds ``control_hz``)."""
        self._commands.put(None)

    @property
    def alive(self) -> bool:
        """The simulation thread is running."""
        return self._thread.is_alive()

    def submit(self, name: str, args: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Run a session command in the simulation thread and return the new state.

        Raises:
            TeleopCommandError: the session refused the command (its message says why).
            TimeoutError: the simulation thread did not answer within ``timeout`` s.
        """
        if not self.alive:
            raise TimeoutError("the simulation thread is not running")
        pending = _Pending(name, dict(args or {}))
        self._commands.put(pending)
        if not pending.done.wait(timeout):
            raise TimeoutError(f"command '{name}' got no answer within {timeout:.0f} s")
        if pending.error is not None:
            raise TeleopCommandError(pending.error)
        assert pending.result is not None
        return pending.result

    # ----------------------------------------------------------------- simulation thread
    def _run(self) -> None:
        self.session.step_hook = self._after_step
        try:
            self._first_frame()
            self._next = time.monotonic()
            while not self._stop.is_set():
                if self._serve_until(self._next):  # woken by input with a step due: step now
                    self._next = time.monotonic()
                self._tick()
                self._next += self.period
                if self._next < time.monotonic() - self.period:  # fell behind: no burst to catch up
                    self._next = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the thread ends; the command exits non-zero
            if isinstance(exc, RenderBackendError):  # start() reports it in one line
                log.debug("teleop: no first frame", exc_info=True)
            else:
                log.exception("teleop simulation thread crashed")
            self.fatal = f"{type(exc).__name__}: {exc}"
            self.salvaged = self.session.salvage(f"simulation thread crashed: {self.fatal}")
            self.frames.close()  # nothing more will come: wake start() and the streams
            self.states.close()
        finally:
            self.session.step_hook = None
            self.renderer.close()

    def _first_frame(self) -> None:
        try:
            self._publish_now("")
        except Exception as exc:
            self._start_error = exc
            raise

    def _tick(self) -> None:
        try:
            self.session.tick()
        except Exception as exc:  # noqa: BLE001 - keep the server usable; the person sees the reason
            log.exception("teleop: a control step failed")
            self.session.report_error(f"internal error in a control step: {exc!r}")
        if self.session.version != self._published:
            self._publish()

    def _serve_until(self, deadline: float) -> bool:
        """Execute commands as they arrive until ``deadline``; ``True`` when new human input makes a
        step due before it (the last step is at least one period old)."""
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                pending = self._commands.get(timeout=left)
            except queue.Empty:
                return False
            if pending is None:
                if self.session.mode == "human" and time.monotonic() - self._last_step >= self.period:
                    return True
                continue
            self._execute(pending)
            if self.session.version != self._published:
                self._publish()
        return False

    def _execute(self, pending: _Pending) -> None:
        self._in_command = True
        try:
            pending.result = self.session.command(pending.name, pending.args)
        except TeleopCommandError as exc:
            pending.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - answered to the page, logged with its traceback
            log.exception("teleop: command %s failed", pending.name)
            pending.error = f"internal error: {exc!r}"
        finally:
            self._in_command = False
            pending.done.set()

    def _after_step(self, res: StepResult) -> None:
        """Every executed step: publish its frame; inside a command (a ``drive`` rewind) keep the pace."""
        self._last_step = time.monotonic()
        self._publish(res.source)
        if self._in_command:
            delay = self._next - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._next = max(self._next, time.monotonic()) + self.period

    def _publish(self, source: str = "") -> None:
        """Publish the frame and the state; a failure pauses the session with the error shown (the
        state is then published without a new frame, or, when the state itself fails, a copy of the
        last one with the error)."""
        try:
            self._publish_now(source)
        except Exception as exc:  # noqa: BLE001 - the session survives; the person sees the reason
            log.exception("teleop: publishing the frame or state failed")
            self.session.report_error(f"internal error while publishing the state: {exc!r}")
            try:
                state = self.session.state()
            except Exception:  # noqa: BLE001
                last = self.states.get()[1] or {}
                state = {
                    **last,
                    "version": self.session.version,
                    "mode": "paused",
                    "reason": self.session.reason,
                    "error": self.session.error,
                }
            self.states.publish(state)
            self._published = self.session.version

    def _publish_now(self, source: str) -> None:
        s = self.session
        jpeg = self.renderer.jpeg(s.camera)
        self.frames.publish(Frame(jpeg, s.episode.step_count, s.input_seq, source, time.monotonic()))
        self.states.publish(s.state())
        self._published = s.version
