"""The HTTP front end over a real simulation thread (pure teleop, no browser): token check, page and
stream, command errors, and a page that goes away mid-episode."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.train import run_cli

from rewind.config import ConfigError
from rewind.envs.config import EnvConfig, build_env
from rewind.scripts.teleop import main as teleop_main
from rewind.store import ReplayStore, store_spec_for
from rewind.teleop import SimLoop, TeleopServer, TeleopSession
from rewind.teleop.frames import FrameRenderer
from rewind.teleop.server import check_binding

TOKEN = "s3cret"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TeleopServer]:
    env = build_env(EnvConfig(name="lift"))
    session = TeleopSession(env, None, tmp_path / "store", store_spec_for(env))
    loop = SimLoop(session, control_hz=20, renderer=FrameRenderer(env.unwrapped, size=64))
    loop.start()
    srv = TeleopServer(loop, "127.0.0.1", 0, token=TOKEN)
    srv.start()
    yield srv
    srv.stop()
    loop.stop()


def _request(
    srv: TeleopServer, path: str, body: dict | None = None, token: str | None = TOKEN
) -> tuple[int, bytes]:
    base = srv.url.split("?")[0]
    headers = {"Content-Type": "application/json", **({"X-Teleop-Token": token} if token else {})}
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data, headers), timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_token_is_required_and_checked(server: TeleopServer) -> None:
    assert server.url.endswith(f"?token={TOKEN}")
    assert _request(server, "", token=None)[0] == 403
    assert _request(server, "api/state", token="wrong")[0] == 403
    assert _request(server, "api/command", {"cmd": "pause"}, token=None)[0] == 403
    code, page = _request(server, "")
    assert code == 200 and b"mode-banner" in page
    assert _request(server, "static/app.js", token=None)[0] == 200  # the page loads its JS without the token
    with urllib.request.urlopen(server.url.replace("/?", "/api/config?"), timeout=30) as resp:  # query token
        assert "takeover" in json.loads(resp.read())["commands"]


def test_page_stream_and_commands(server: TeleopServer) -> None:
    assert all(_request(server, f"static/{name}")[0] == 200 for name in ("app.js", "style.css"))
    assert _request(server, "static/../session.py")[0] == 404
    code, jpeg = _request(server, "frame.jpg")
    assert code == 200 and jpeg[:2] == b"\xff\xd8"
    with urllib.request.urlopen(
        urllib.request.Request(server.url.split("?")[0] + "stream.mjpg", headers={"X-Teleop-Token": TOKEN}),
        timeout=30,
    ) as resp:
        assert resp.headers["Content-Type"].startswith("multipart/x-mixed-replace")
        head = resp.read(300)
    assert b"--rewindframe" in head and b"X-Step: 0" in head and b"Content-Type: image/jpeg" in head
    code, body = _request(server, "api/command", {"cmd": "grip", "value": "sideways"})
    assert code == 400 and "grip: value must be one of [open, close, toggle]" in json.loads(body)["error"]
    assert json.loads(_request(server, "api/command", {"value": "open"})[1])["error"].startswith(
        "missing 'cmd'"
    )
    assert _request(server, "api/input", {"keys": ["KeyD"], "axes": [1, 2]})[0] == 400
    code, body = _request(server, "api/command", {"cmd": "pause"})
    assert code == 200 and json.loads(body)["state"]["mode"] == "paused"


def test_commands_from_other_sites_are_refused(server: TeleopServer) -> None:
    url = server.url.split("?")[0] + "api/command"
    cases = [
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
    ]
    for headers, code in cases:
        req = urllib.request.Request(url, b'{"cmd": "discard"}', {"X-Teleop-Token": TOKEN, **headers})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == code
    origin = server.url.split("/?")[0]
    req = urllib.request.Request(
        url,
        b'{"cmd": "pause"}',
        {"X-Teleop-Token": TOKEN, "Content-Type": "application/json", "Origin": origin},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert json.loads(resp.read())["state"]["discarded"] == 0


def test_page_closed_mid_episode_writes_nothing_and_server_stays_usable(
    server: TeleopServer, tmp_path: Path
) -> None:
    _request(server, "api/command", {"cmd": "grip", "value": "close"})  # steps until the fingers settle
    with urllib.request.urlopen(server.url.replace("/?", "/api/events?"), timeout=30) as events:
        for _ in range(200):  # a page attached, watches the fingers close, then goes away
            line = events.readline()
            if line.startswith(b"data: ") and json.loads(line[6:])["episode"]["recorded"] == 10:
                break
    state = json.loads(_request(server, "api/state")[1])
    assert state["episode"]["recorded"] == 10 and state["committed"] == 0
    assert not (tmp_path / "store").exists()  # nothing reaches the store before `end`
    code, body = _request(server, "api/command", {"cmd": "end", "outcome": "success"})  # a new page ends it
    assert code == 200 and json.loads(body)["state"]["committed"] == 1
    with ReplayStore.open(tmp_path / "store") as store:
        (info,) = store.episodes()
    assert set(info.source_counts) == {"human"}


def test_non_loopback_host_needs_a_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="host=0.0.0.0 exposes the teleop server"):
        check_binding("0.0.0.0", None)
    check_binding("0.0.0.0", "t")
    check_binding("127.0.0.1", None)
    assert (
        run_cli(teleop_main, [f"out_dir={tmp_path / 'run'}", f"store={tmp_path / 's'}", "host=0.0.0.0"]) == 2
    )
    assert (
        run_cli(
            teleop_main,
            [f"out_dir={tmp_path / 'run2'}", f"store={tmp_path / 's'}", f"calibration={tmp_path}"],
        )
        == 2
    )
