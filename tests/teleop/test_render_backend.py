"""Rendering backend choice (``rewind.utils.render``), run for real in subprocesses: with ``MUJOCO_GL``
unset ``rewind-teleop`` and ``rewind-eval video.episodes=1`` pick a working headless backend (EGL,
then OSMesa) by themselves; a bogus value, or no backend that works, stops them at start with one
line that names the fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.teleop import default_sigint  # noqa: E402

from rewind.utils.render import HEADLESS_BACKENDS, RenderBackendError, check_gl_setting


def _env(gl: str | None) -> dict[str, str]:
    """This environment, headless, with ``MUJOCO_GL`` unset (``None``) or set to ``gl``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    return env if gl is None else {**env, "MUJOCO_GL": gl}


def _run(args: list[str], gl: str | None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=_env(gl), capture_output=True, text=True, timeout=timeout, check=False
    )


def test_probe_picks_a_headless_backend_when_unset() -> None:
    proc = _run(["-m", "rewind.utils.render"], None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in HEADLESS_BACKENDS


def test_no_working_backend_names_the_fix() -> None:
    code = (
        "from rewind.utils import render\n"
        "render.select_headless_gl(probe=lambda b: b + ' library not found')\n"
        "render.main()\n"
    )
    proc = _run(["-c", code], None)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert "egl: egl library not found; osmesa: osmesa library not found" in line
    assert "MUJOCO_GL=egl" in line and "apt-get install libosmesa6" in line


def test_gl_setting_check() -> None:
    for value in ("egl", "osmesa", "glfw", "EGL"):
        check_gl_setting(value)
    with pytest.raises(RenderBackendError, match="MUJOCO_GL=bogus is not a MuJoCo rendering backend"):
        check_gl_setting("bogus")


@pytest.mark.parametrize("script", ["teleop", "eval"])
def test_bogus_backend_is_one_line(script: str, tmp_path: Path) -> None:
    proc = _run(
        [
            "-m",
            f"rewind.scripts.{script}",
            f"out_dir={tmp_path / 'run'}",
            f"store={tmp_path}",
            f"policy_path={tmp_path}",
        ],
        "bogus",
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"rewind-{script}: error: MUJOCO_GL=bogus is not a MuJoCo rendering backend")
    assert "MUJOCO_GL=egl" in line


def test_teleop_without_a_display_for_glfw_is_one_line(tmp_path: Path) -> None:
    """``MUJOCO_GL=glfw`` (a valid value) with no display: the first frame fails; the command stops
    with one line naming the fix instead of a traceback from the simulation thread."""
    proc = _run(
        [
            "-m",
            "rewind.scripts.teleop",
            "env=lift",
            f"store={tmp_path / 'store'}",
            "port=0",
            f"out_dir={tmp_path / 'run'}",
            "view.image_size=64",
        ],
        "glfw",
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("rewind-teleop: error: cannot render: MUJOCO_GL=glfw") and "MUJOCO_GL=egl" in line
    assert not (tmp_path / "run" / "server.json").exists()


def test_teleop_serves_frames_without_mujoco_gl(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "rewind.scripts.teleop",
        "env=lift",
        f"store={tmp_path / 'store'}",
        "port=0",
        f"out_dir={out}",
        "view.image_size=64",
    ]
    proc = subprocess.Popen(
        args,
        env=_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        for _ in range(1800):  # bounded: until the page is up or the command ended
            if (out / "server.json").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (out / "server.json").exists(), proc.communicate(timeout=60)[0]
        base = json.loads((out / "server.json").read_text())["url"]
        with urllib.request.urlopen(base + "frame.jpg", timeout=30) as resp:
            assert resp.read()[:2] == b"\xff\xd8"
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output


def test_eval_video_without_mujoco_gl(tmp_path: Path, tiny_weights: Path) -> None:
    out = tmp_path / "eval"
    proc = _run(
        [
            "-m",
            "rewind.scripts.eval",
            f"policy_path={tiny_weights}",
            "env=lift",
            "episodes=1",
            "num_envs=1",
            "video.episodes=1",
            "env.max_steps=8",
            "device=cpu",
            "num_threads=1",
            "progress=false",
            f"out_dir={out}",
        ],
        None,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (video,) = (out / "videos").glob("*.mp4")
    assert video.stat().st_size > 0
