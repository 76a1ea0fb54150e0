"""Schema of ``rewind-teleop`` (``configs/teleop.yaml``)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import MISSING

from rewind.config import CommandConfig, ConfigError, require
from rewind.envs.config import EnvConfig
from rewind.monitor.episode import check_rewind_mode
from rewind.monitor.factory import TrackingConfig
from rewind.teleop.commands import SessionSettings
from rewind.teleop.controls import ControlSettings
from rewind.teleop.guard import check_binding
from rewind.utils.device import check_device

log = logging.getLogger(__name__)

#: Environment variable the token is read from when neither ``token`` nor ``token_file`` is set.
TOKEN_ENV = "REWIND_TELEOP_TOKEN"


@dataclass
class ViewConfig:
    """The streamed camera view.

    Attributes:
        camera: first camera shown (``front`` or ``top``; the page can switch).
        image_size: side of the square frames in pixels.
        jpeg_quality: JPEG quality of the frames (1-95).
        shadows: render shadows (a height cue; with OSMesa 2-3x the render time).
        reflections: render the floor's reflections.
        render_threads: Mesa llvmpipe rasterizer threads (``LP_NUM_THREADS``, software GL only; set
            unless the environment sets it); 0 renders in the simulation thread, which kept the
            latency tail down on a loaded 2-core machine; ``null``: Mesa's default (one per CPU).
    """

    camera: str = "front"
    image_size: int = 256
    jpeg_quality: int = 80
    shadows: bool = False
    reflections: bool = False
    render_threads: int | None = 0

    def __post_init__(self) -> None:
        require(
            self.camera in ("front", "top"), f"view.camera must be one of [front, top]; got '{self.camera}'"
        )
        require(
            32 <= self.image_size <= 1024, f"view.image_size must be in [32, 1024]; got {self.image_size}"
        )
        require(
            1 <= self.jpeg_quality <= 95, f"view.jpeg_quality must be in [1, 95]; got {self.jpeg_quality}"
        )
        require(
            self.render_threads is None or self.render_threads >= 0,
            f"view.render_threads must be >= 0 or null; got {self.render_threads}",
        )


@dataclass
class TeleopConfig(CommandConfig):
    """Schema of ``rewind-teleop``.

    Attributes:
        env: the task (Hydra group ``env=lift|pick_place|stack3|nut_peg``).
        store: replay store folder the episodes are committed to (created if absent).
        policy_path: policy weights (a ``weights/step_XXXXXX`` folder, a ``weights`` folder or a run
            folder); ``null``: pure teleop, every step is the person's (label ``human``).
        calibration: calibration folder from ``rewind-calibrate`` (``calibration.json`` and, when
            present, the checkpoint library); ``null``: no monitor, no alarms.
        host / port: where the server listens (port 0: any free port).
        token: secret every request must carry; mandatory when ``host`` is not loopback. Prefer
            ``token_file`` or the ``REWIND_TELEOP_TOKEN`` environment variable: a ``token=`` on the
            command line is visible to every local user in the process list. Never logged.
        token_file: file holding the token (its first line; keep it mode 0600).
        request_timeout_s: seconds a client has to send a whole request (headers and body), and to
            take each write of a stream; slower clients are disconnected.
        max_connections: connections served at once (the page holds 2-3); more get 503.
        seed: env seed of the first episode (episode ``i`` uses ``seed + i``).
        round: the ``round`` recorded with each committed episode.
        device / num_threads: policy device (``auto``, ``cpu``, ``cuda``, ``mps``), torch threads.
        n_action_steps: actions executed per chunk (``null``: as trained).
        auto_pause: pause on a monitor alarm and wait for the person.
        start_paused: start every episode paused.
        rewind_mode: default rewind mode (``restore`` or ``drive``; the page can choose per rewind).
        step_when_idle: in human mode, keep stepping (zero motion) without input.
        pre_intervention_steps: policy steps before an intervention labelled ``pre_intervention``.
        control_hz: control rate of the simulation loop (the envs are made for 20 Hz).
        max_episodes: stop once this many episodes are committed (discarded ones do not count;
            ``null``: until Ctrl-C). The recovery loop's ``recovery=human`` rounds use it.
        view / control / tracking: camera stream, input scaling, checkpoint tracking.
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    store: str = MISSING
    policy_path: str | None = None
    calibration: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    token_file: str | None = None
    request_timeout_s: float = 10.0
    max_connections: int = 32
    seed: int = 0
    round: int = 0
    device: str = "cpu"
    num_threads: int = 1
    n_action_steps: int | None = None
    auto_pause: bool = True
    start_paused: bool = False
    rewind_mode: str = "restore"
    step_when_idle: bool = False
    pre_intervention_steps: int = 15
    control_hz: float = 20.0
    max_episodes: int | None = None
    view: ViewConfig = field(default_factory=ViewConfig)
    control: ControlSettings = field(default_factory=ControlSettings)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        require(bool(self.store), "store must be a folder path (the replay store episodes are written to)")
        require(0 <= self.port <= 65535, f"port must be in [0, 65535]; got {self.port}")
        self.token, self.token_source = resolve_token(self.token, self.token_file)
        check_binding(self.host, self.token)
        require(
            0.5 <= self.request_timeout_s <= 600,
            f"request_timeout_s must be in [0.5, 600]; got {self.request_timeout_s}",
        )
        require(
            1 <= self.max_connections <= 1024,
            f"max_connections must be in [1, 1024]; got {self.max_connections}",
        )
        require(
            self.seed >= 0 and self.round >= 0, f"seed and round must be >= 0; got {self.seed}, {self.round}"
        )
        check_device(self.device)
        require(self.num_threads >= 0, f"num_threads must be >= 0; got {self.num_threads}")
        check_rewind_mode(self.rewind_mode, "rewind_mode")
        require(
            self.pre_intervention_steps >= 0,
            f"pre_intervention_steps must be >= 0; got {self.pre_intervention_steps}",
        )
        require(1.0 <= self.control_hz <= 100.0, f"control_hz must be in [1, 100]; got {self.control_hz}")
        require(
            self.max_episodes is None or self.max_episodes >= 1,
            f"max_episodes must be >= 1; got {self.max_episodes}",
        )
        require(
            self.calibration is None or self.policy_path is not None,
            "calibration needs policy_path (the monitor scores the policy it was calibrated for)",
        )

    def session_settings(self) -> SessionSettings:
        """The session's settings from this config."""
        return SessionSettings(
            seed=self.seed,
            round=self.round,
            auto_pause=self.auto_pause,
            rewind_mode=self.rewind_mode,
            start_paused=self.start_paused,
            step_when_idle=self.step_when_idle,
            pre_intervention_steps=self.pre_intervention_steps,
        )


def resolve_token(token: str | None, token_file: str | None) -> tuple[str | None, str]:
    """``(token, where it came from)``: ``token``, else the first line of ``token_file``, else the
    environment variable :data:`TOKEN_ENV`; ``(None, "")`` when none is set. Messages never contain
    the token."""
    require(not (token and token_file), "set token= or token_file=, not both")
    source = "token"
    if token_file:
        path, source = Path(token_file).expanduser(), "token_file"
        require(path.is_file(), f"token_file does not exist or is not a file: {token_file}")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"token_file {token_file} cannot be read ({type(exc).__name__})") from exc
        token = lines[0].strip() if lines else ""
        require(bool(token), f"token_file {token_file} is empty (its first line is the token)")
        if path.stat().st_mode & 0o077:
            log.warning("token_file %s is readable by other users: chmod 600 it", token_file)
    elif not token and os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV].strip(), TOKEN_ENV
    if not token:
        return None, ""
    require(
        token.isascii() and token.isprintable() and not any(c.isspace() for c in token),
        f"{source}: the token must be printable ASCII without spaces",
    )
    return token, source
