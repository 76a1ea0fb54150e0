"""``rewind-teleop``: build the env, policy, monitor and session from a config, then serve the page."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from rewind.envs.config import build_env
from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.conformal import Calibration
from rewind.monitor.episode import Monitor
from rewind.monitor.factory import MonitorConfig, TrackingConfig, load_monitor
from rewind.policies.base import ActionChunkPolicy
from rewind.store import ReplayStore, store_spec_for
from rewind.teleop.config import TOKEN_ENV, TeleopConfig
from rewind.teleop.frames import FrameRenderer
from rewind.teleop.server import TeleopServer
from rewind.teleop.session import TeleopSession
from rewind.teleop.simulation import SimLoop
from rewind.train.policy_api import load_policy
from rewind.utils.device import resolve_device
from rewind.utils.io import atomic_write_json
from rewind.utils.render import ensure_headless_gl

log = logging.getLogger(__name__)

SERVER_FILE = "server.json"


def load_calibrated_monitor(
    folder: str | Path, policy: ActionChunkPolicy, weights: str, tracking: TrackingConfig
) -> tuple[Monitor, CheckpointTracker | None]:
    """The monitor (the score named by the calibration, with its saved settings) and the checkpoint
    tracker of a calibration folder, checked against the policy and its weights hash ``weights``."""
    # every tracking field is the monitor field of the same name
    cfg = MonitorConfig(score=Calibration.load(folder).score, calibration=str(folder), **asdict(tracking))
    monitor, tracker, _ = load_monitor(cfg, policy, weights)
    assert monitor is not None
    return monitor, tracker


def _load_policy(cfg: TeleopConfig, env: Any) -> tuple[ActionChunkPolicy | None, str, str]:
    """``(policy, policy_version, weights_hash)``; ``(None, "human", "")`` without ``policy_path``."""
    if cfg.policy_path is None:
        return None, "human", ""
    loaded = load_policy(cfg.policy_path, env, cfg.env.name, resolve_device(cfg.device), cfg.n_action_steps)
    return loaded.policy, loaded.version, loaded.weights_hash


def build_session(cfg: TeleopConfig) -> TeleopSession:
    """The env, policy, monitor and session ``cfg`` describes (the store is checked, not held open)."""
    env = build_env(cfg.env)
    spec = store_spec_for(env)
    with ReplayStore.open_or_create(cfg.store, spec):
        pass  # fails now, not at the first commit, when the store has another layout
    policy, version, digest = _load_policy(cfg, env)
    monitor, tracker = None, None
    if cfg.calibration is not None:
        monitor, tracker = load_calibrated_monitor(cfg.calibration, policy, digest, cfg.tracking)
    session = TeleopSession(
        env,
        policy,
        cfg.store,
        spec,
        monitor,
        tracker,
        cfg.session_settings(),
        cfg.control,
        version,
        str(resolve_device(cfg.device)),
    )
    session.camera = cfg.view.camera
    return session


class TeleopCrashed(RuntimeError):
    """The simulation thread died: ``rewind-teleop`` exits non-zero (its traceback is in the log)."""


def _announce(cfg: TeleopConfig, server: TeleopServer) -> None:
    """Write ``server.json`` and log the page's address (never the token: logs are files)."""
    atomic_write_json(
        Path(cfg.out_dir) / SERVER_FILE,
        {
            "url": server.base_url,
            "host": cfg.host,
            "port": server.port,
            "token_required": server.token is not None,
        },
    )
    if server.token is None:
        log.info("teleop page: %s  (Ctrl-C to stop)", server.base_url)
        return
    sources = {"token": "token=", "token_file": f"token_file={cfg.token_file}"}
    where = sources.get(cfg.token_source, cfg.token_source)
    log.info(
        "teleop page: %s?token=TOKEN  (TOKEN: the one from %s, not shown here; Ctrl-C to stop)",
        server.base_url,
        where,
    )


def serve(cfg: TeleopConfig, session: TeleopSession) -> dict[str, Any]:
    """Run the simulation loop and the server until Ctrl-C or ``cfg.max_episodes`` committed episodes.

    Raises:
        ConfigError: the address cannot be bound, or nothing can be rendered.
        TeleopCrashed: the simulation thread died (the unfinished episode was written as a failure).
    """
    v = cfg.view
    renderer = FrameRenderer(session.episode.base, v.image_size, v.jpeg_quality, v.shadows, v.reflections)
    loop = SimLoop(session, cfg.control_hz, renderer)
    server = TeleopServer(loop, cfg.host, cfg.port, cfg.token, cfg.request_timeout_s, cfg.max_connections)
    try:
        loop.start()
    except BaseException:
        server.stop()
        raise
    url = server.start()
    state: dict[str, Any] = {}
    try:
        _announce(cfg, server)
        while loop.alive:
            state = loop.states.wait_newer(loop.states.get()[0], timeout=0.5)[1] or state
            if cfg.max_episodes is not None and state.get("committed", 0) >= cfg.max_episodes:
                break
    except KeyboardInterrupt:
        log.info("teleop: stopping (Ctrl-C)")
    finally:
        server.stop()
        loop.stop()
        session.close()
    if loop.fatal is not None:
        kept = f"written as episode {loop.salvaged['id']} (failure)" if loop.salvaged else "nothing to write"
        raise TeleopCrashed(
            f"the teleop simulation thread crashed ({loop.fatal}); unfinished episode: {kept}"
        )
    state = loop.states.get()[1] or state
    return {
        "url": url,
        "store": str(cfg.store),
        "committed": state.get("committed", 0),
        "discarded": state.get("discarded", 0),
        "last_commit": state.get("last_commit"),
    }


def run_teleop(cfg: TeleopConfig) -> dict[str, Any]:
    """Entry point of ``rewind-teleop``.

    Raises:
        ConfigError: no OpenGL backend renders (:func:`rewind.utils.render.ensure_headless_gl`),
            the address cannot be bound, or an invalid setting.
    """
    ensure_headless_gl()
    if cfg.token_source == "token":
        log.warning(
            "token= on the command line is visible to every local user in the process list; "
            "prefer %s=... or token_file=PATH",
            TOKEN_ENV,
        )
    if cfg.view.render_threads is not None:  # before any GL context exists (the env's rgb renderer too)
        os.environ.setdefault("LP_NUM_THREADS", str(cfg.view.render_threads))
    threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    try:
        return serve(cfg, build_session(cfg))
    finally:
        torch.set_num_threads(threads)
