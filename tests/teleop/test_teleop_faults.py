"""``rewind-teleop`` when things go wrong: a crash while publishing the state, a simulation thread that
dies, the token kept out of logs and files, IPv6 and a busy port.

Faults are injected into real parts (a renderer or session subclass that raises at a chosen call);
the env, the store, the HTTP server and the sockets are real.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helpers.teleop import default_sigint  # noqa: E402
from helpers.train import run_cli

from rewind.config import ConfigError
from rewind.envs.config import EnvConfig, build_env
from rewind.scripts.teleop import main as teleop_main
from rewind.store import ReplayStore, store_spec_for
from rewind.teleop import SessionSettings, SimLoop, TeleopConfig, TeleopServer, TeleopSession
from rewind.teleop.app import TeleopCrashed, serve
from rewind.teleop.config import TOKEN_ENV, ViewConfig, resolve_token
from rewind.teleop.frames import FrameRenderer


class _FlakyRenderer(FrameRenderer):
    """Raises on its ``fail_at``-th frame (1 = the first)."""

    def __init__(self, base: Any, fail_at: int) -> None:
        super().__init__(base, size=64)
        self.calls, self.fail_at = 0, fail_at

    def jpeg(self, camera: str) -> bytes:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected: frame encoder failed")
        return super().jpeg(camera)


class _StateFault(TeleopSession):
    """``state()`` raises while :attr:`broken` is set."""

    broken = False

    def state(self) -> dict[str, Any]:
        if self.broken:
            raise RuntimeError("injected: state cannot be built")
        return super().state()


class _Doomed(TeleopSession):
    """After ``crash_after`` recorded steps, a step fails and so does reporting it: the thread dies."""

    crash_after = 6

    def tick(self) -> Any:
        if len(self.recording) >= self.crash_after:
            raise RuntimeError("injected: step failed")
        return super().tick()

    def report_error(self, text: str) -> None:
        raise RuntimeError("injected: cannot even pause")


def _session(cls: type[TeleopSession], tmp_path: Path, **settings: Any) -> TeleopSession:
    env = build_env(EnvConfig(name="lift"))
    return cls(env, None, tmp_path / "store", store_spec_for(env), settings=SessionSettings(**settings))


def _call(srv: TeleopServer, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(srv.base_url + path, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _until(predicate: Any, polls: int = 200) -> bool:
    for _ in range(polls):
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_publish_crash_pauses_keeps_episode_and_commits(tmp_path: Path) -> None:
    session = _session(_StateFault, tmp_path)
    loop = SimLoop(session, control_hz=20, renderer=_FlakyRenderer(session.episode.base, fail_at=6))
    loop.start()
    srv = TeleopServer(loop, "127.0.0.1", 0)
    srv.start()
    try:
        for _ in range(100):  # bounded: hold D until the 6th frame fails
            _call(srv, "api/input", {"keys": ["KeyD"]})
            if _call(srv, "api/state")["mode"] == "paused":
                break
            time.sleep(0.05)
        state = _call(srv, "api/state")
        assert state["mode"] == "paused" and "injected: frame encoder failed" in state["error"], state
        assert "publishing" in state["reason"] and loop.alive
        recorded = state["episode"]["recorded"]
        assert recorded >= 4
        session.broken = True  # now the state itself cannot be built: the last one, with the error
        _call(srv, "api/input", {"keys": []})
        with pytest.raises(urllib.error.HTTPError):  # the command's answer needs the state
            _call(srv, "api/command", {"cmd": "camera"})
        assert _until(lambda: "state cannot be built" in (_call(srv, "api/state").get("error") or ""))
        assert loop.alive
        session.broken = False
        state = _call(srv, "api/command", {"cmd": "end", "outcome": "success"})["state"]
        assert state["committed"] == 1 and state["error"] is None  # the next episode starts clean
    finally:
        srv.stop()
        loop.stop()
    with ReplayStore.open(tmp_path / "store") as store:
        (info,) = store.episodes()
    assert info.length == recorded and info.success is True and info.extra["ended_by"] == "person"


def test_dead_simulation_thread_writes_the_episode_and_fails(tmp_path: Path) -> None:
    session = _session(_Doomed, tmp_path, step_when_idle=True)
    cfg = TeleopConfig(
        out_dir=str(tmp_path / "run"), store=str(tmp_path / "store"), port=0, view=ViewConfig(image_size=64)
    )
    (tmp_path / "run").mkdir()
    expected = r"crashed \(RuntimeError: injected: cannot even pause\).*episode 0"
    with pytest.raises(TeleopCrashed, match=expected):
        serve(cfg, session)
    with ReplayStore.open(tmp_path / "store") as store:
        (info,) = store.episodes()
    assert info.length == _Doomed.crash_after and info.success is False
    assert info.extra["ended_by"] == "crash" and "injected: cannot even pause" in info.extra["error"]


def test_token_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert resolve_token(None, None) == (None, "")
    assert resolve_token("abc", None) == ("abc", "token")
    secret = tmp_path / "token"
    secret.write_text("from-file\nignored\n")
    secret.chmod(0o600)
    assert resolve_token(None, str(secret)) == ("from-file", "token_file")
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert resolve_token(None, None) == ("from-env", TOKEN_ENV)
    assert resolve_token("abc", None) == ("abc", "token")  # an explicit setting wins
    cfg = TeleopConfig(out_dir=str(tmp_path), store=str(tmp_path / "s"), host="0.0.0.0")
    assert cfg.token == "from-env"  # enough for a non-loopback host
    cases = [
        ("abc", str(secret), "not both"),
        (None, str(tmp_path / "nope"), "token_file does not exist"),
        ("a b", None, "printable ASCII"),
    ]
    (tmp_path / "empty").write_text("\n")
    cases.append((None, str(tmp_path / "empty"), "is empty"))
    for token, token_file, message in cases:
        with pytest.raises(ConfigError, match=message) as err:
            resolve_token(token, token_file)
        assert "from-file" not in str(err.value)


def test_token_never_reaches_logs_or_files(tmp_path: Path) -> None:
    """token= on the command line (the worst case), debug logging on, a request carrying the token
    in its URL: neither the output, run.log nor any file of out_dir contains it."""
    token, out = "tok-3f9a1c77", tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "rewind.scripts.teleop",
        "env=lift",
        f"store={tmp_path / 'store'}",
        "port=0",
        f"out_dir={out}",
        "max_episodes=1",
        "view.image_size=64",
        f"token={token}",
    ]
    env = {**os.environ, "RWD_LOG_LEVEL": "DEBUG"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert _until(lambda: (out / "server.json").exists() or proc.poll() is not None, polls=1800)
        info = json.loads((out / "server.json").read_text())
        assert info["token_required"] is True and "token" not in info["url"]
        base, headers = info["url"], {"Content-Type": "application/json", "X-Teleop-Token": token}
        with urllib.request.urlopen(f"{base}api/state?token={token}", timeout=30) as resp:
            assert resp.status == 200
        for _ in range(100):  # bounded: hold D until a step is recorded, then end the episode
            body = json.dumps({"keys": ["KeyD"]}).encode()
            request_ = urllib.request.Request(base + "api/input", body, headers)
            urllib.request.urlopen(request_, timeout=30).close()
            with urllib.request.urlopen(f"{base}api/state?token={token}", timeout=30) as resp:
                if json.loads(resp.read())["episode"]["recorded"] >= 2:
                    break
        end = json.dumps({"cmd": "end", "outcome": "success"}).encode()
        urllib.request.urlopen(urllib.request.Request(base + "api/command", end, headers), timeout=30).close()
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "?token=TOKEN" in output and "process list" in output  # the placeholder and the warning
    assert "token=***" in (out / "run.log").read_text()  # the request was logged, redacted
    leaks = [p.name for p in out.rglob("*") if p.is_file() and token in p.read_text(errors="replace")]
    assert token not in output and not leaks, leaks


def test_ipv6_loopback_is_served(make_server: Any) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    srv = make_server(host="::1")
    assert srv.base_url == f"http://[::1]:{srv.port}/"
    assert _call(srv, "api/state")["mode"] == "human"


def test_busy_port_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = run_cli(
            teleop_main,
            [f"out_dir={tmp_path / 'run'}", f"store={tmp_path / 's'}", f"port={port}", "view.image_size=64"],
        )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"rewind-teleop: error: port {port} on 127.0.0.1 is already in use (another rewind-teleop?): "
        "choose another port=N, or port=0 for any free port"
    )


def test_ctrl_c_stops_cleanly(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) ends the command with status 0; the unfinished episode is not written."""
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
        "step_when_idle=true",
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint
    )
    try:
        assert _until(lambda: (out / "server.json").exists() or proc.poll() is not None, polls=1800)
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "stopping (Ctrl-C)" in output
