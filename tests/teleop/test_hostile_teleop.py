"""The teleop server against hostile requests, over real loopback sockets and a real simulation thread.

* the matrix: each bad request (DNS rebinding ``Host``, foreign ``Origin``, bad or missing
  ``Content-Length``, oversized or non-JSON bodies, ...) and the status it must get, on a token-less
  (loopback) server and on one with a token; afterwards nothing moved and nothing was written;
* the reported rebinding attack (15 inputs, then ``end`` as ``success``, with ``Host`` and ``Origin``
  of another site) commits nothing;
* floods: a negative ``Content-Length`` does not make the server read the body; slow and half-sent
  requests are cut off at the request timeout; connections over the cap get 503; the streams
  (``/stream.mjpg``, ``/api/events``) outlive the request timeout.

Every loop that waits for the server is bounded and ends by itself; nothing asserts a duration.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rewind.teleop import TeleopServer
from rewind.teleop.guard import MAX_BODY

TOKEN = "hostile-test-token"
EVIL = "evil.example"
JSON = "Content-Type: application/json"


def _exchange(port: int, raw: bytes, read_timeout: float = 30.0) -> tuple[int, bytes]:
    """Send ``raw`` on a fresh connection, stop sending, and read one response: ``(status, body)``."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server may refuse before taking everything; its answer is still there
            pass
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, resp.read()


def _request(
    method: str, path: str, headers: list[str], body: bytes = b"", host: str | None = "{local}"
) -> Callable[[int], bytes]:
    """A raw HTTP/1.1 request for the server on ``port`` (``{local}``/``{port}`` filled in)."""

    def build(port: int) -> bytes:
        lines = [f"{method} {path} HTTP/1.1"]
        if host is not None:
            lines.append("Host: " + host.format(local=f"127.0.0.1:{port}", port=port))
        lines += [h.format(port=port) for h in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    return build


def _post(path: str, body: bytes, *extra: str, host: str | None = "{local}") -> Callable[[int], bytes]:
    return _request("POST", path, [JSON, f"Content-Length: {len(body)}", *extra], body, host)


CMD_END = b'{"cmd": "end", "outcome": "success"}'
INPUT = b'{"keys": ["KeyD"]}'


def _sized(length: str, *extra: str) -> Callable[[int], bytes]:
    """A JSON input POST with ``Content-Length: length`` (its body: :data:`INPUT`)."""
    return _request("POST", "/api/input", [JSON, f"Content-Length: {length}", *extra], INPUT)


#: (name, request, status) against the token-less server on 127.0.0.1.
LOOPBACK_MATRIX = [
    ("rebinding GET /", _request("GET", "/", [], host=f"{EVIL}:{{port}}"), 421),
    ("rebinding GET /api/state", _request("GET", "/api/state", [], host=f"{EVIL}:{{port}}"), 421),
    ("rebinding GET /api/config", _request("GET", "/api/config", [], host=f"{EVIL}:{{port}}"), 421),
    ("rebinding GET /frame.jpg", _request("GET", "/frame.jpg", [], host=f"{EVIL}:{{port}}"), 421),
    ("rebinding GET /stream.mjpg", _request("GET", "/stream.mjpg", [], host=f"{EVIL}:{{port}}"), 421),
    ("rebinding GET /api/events", _request("GET", "/api/events", [], host=f"{EVIL}:{{port}}"), 421),
    ("rebinding GET /static/app.js", _request("GET", "/static/app.js", [], host=f"{EVIL}:{{port}}"), 421),
    (
        "rebinding POST input",
        _post("/api/input", INPUT, f"Origin: http://{EVIL}:{{port}}", host=f"{EVIL}:{{port}}"),
        421,
    ),
    (
        "rebinding POST end",
        _post("/api/command", CMD_END, f"Origin: http://{EVIL}:{{port}}", host=f"{EVIL}:{{port}}"),
        421,
    ),
    ("Host without port", _request("GET", "/api/state", [], host="127.0.0.1"), 421),
    ("Host with another port", _request("GET", "/api/state", [], host="127.0.0.1:1"), 421),
    ("Host an address of the LAN", _request("GET", "/api/state", [], host="192.168.1.5:{port}"), 421),
    ("no Host", _request("GET", "/api/state", [], host=None), 421),
    ("two Host headers", _request("GET", "/api/state", [f"Host: {EVIL}"]), 421),
    ("foreign Origin on a GET", _request("GET", "/api/state", [f"Origin: http://{EVIL}"]), 403),
    ("foreign Origin on a POST", _post("/api/command", CMD_END, f"Origin: http://{EVIL}"), 403),
    ("Origin null", _post("/api/command", CMD_END, "Origin: null"), 403),
    ("Origin with https", _post("/api/input", INPUT, "Origin: https://127.0.0.1:{port}"), 403),
    ("Origin on another port", _post("/api/input", INPUT, "Origin: http://127.0.0.1:1"), 403),
    (
        "POST as text/plain",
        _request(
            "POST", "/api/command", ["Content-Type: text/plain", f"Content-Length: {len(CMD_END)}"], CMD_END
        ),
        415,
    ),
    (
        "POST as a form",
        _request(
            "POST",
            "/api/input",
            ["Content-Type: application/x-www-form-urlencoded", "Content-Length: 3"],
            b"a=b",
        ),
        415,
    ),
    ("no Content-Length", _request("POST", "/api/input", [JSON], INPUT), 411),
    (
        "chunked body",
        _request(
            "POST", "/api/input", [JSON, "Transfer-Encoding: chunked"], b"12\r\n" + INPUT + b"\r\n0\r\n\r\n"
        ),
        411,
    ),
    ("Content-Length -1", _sized("-1"), 400),
    ("Content-Length not a number", _sized("ten"), 400),
    ("Content-Length 1e3", _sized("1e3"), 400),
    ("Content-Length +18", _sized("+18"), 400),
    ("Content-Length 0x12", _sized("0x12"), 400),
    ("two Content-Lengths", _sized("18", "Content-Length: 2"), 400),
    ("Content-Length over the limit", _sized(str(MAX_BODY + 1)), 413),
    ("Content-Length of 200 GiB", _sized(str(200 << 30)), 413),
    ("body shorter than its length", _sized("100"), 400),
    ("body not JSON", _post("/api/command", b"cmd=end&outcome=success"), 400),
    ("body not UTF-8", _post("/api/command", b'{"cmd": "\xff\xfe"}'), 400),
    ("body a JSON list", _post("/api/command", b'["end"]'), 400),
    ("unknown command", _post("/api/command", b'{"cmd": "self_destruct"}'), 400),
    ("unknown endpoint", _post("/api/shell", b"{}"), 404),
    ("path traversal", _request("GET", "/static/../session.py", []), 404),
    ("unsupported method", _request("PUT", "/api/state", []), 501),
    ("request line of 70 kB", _request("GET", "/" + "a" * 70000, []), 414),
]

#: (name, request, status) against a server with a token (Host is not checked there: the token is).
TOKEN_MATRIX = [
    ("no token", _request("GET", "/api/state", []), 403),
    ("wrong token in the query", _request("GET", "/api/state?token=guess", []), 403),
    ("wrong token header", _request("GET", "/api/state", ["X-Teleop-Token: guess"]), 403),
    ("token of another length", _request("GET", "/api/state", [f"X-Teleop-Token: {TOKEN}x"]), 403),
    ("no token on a POST", _post("/api/command", CMD_END), 403),
    (
        "foreign Origin with the token",
        _post("/api/command", CMD_END, f"X-Teleop-Token: {TOKEN}", f"Origin: http://{EVIL}"),
        403,
    ),
    (
        "text/plain with the token",
        _request(
            "POST",
            "/api/command",
            ["Content-Type: text/plain", f"X-Teleop-Token: {TOKEN}", "Content-Length: 2"],
            b"{}",
        ),
        415,
    ),
    ("Content-Length -1 with the token", _sized("-1", f"X-Teleop-Token: {TOKEN}"), 400),
]


def _state(srv: TeleopServer) -> dict:
    request_ = _request("GET", "/api/state", [f"X-Teleop-Token: {srv.token or ''}"])
    status, body = _exchange(srv.port, request_(srv.port))
    assert status == 200
    return json.loads(body)


def _assert_untouched(srv: TeleopServer, store: Path) -> None:
    state = _state(srv)
    assert state["episode"]["recorded"] == 0 and state["committed"] == 0 and state["mode"] == "human"
    assert not store.exists()


@pytest.fixture
def loopback(make_server: Callable[..., TeleopServer]) -> TeleopServer:
    return make_server(token=None)


@pytest.fixture
def guarded(make_server: Callable[..., TeleopServer]) -> TeleopServer:
    return make_server(token=TOKEN)


@pytest.mark.parametrize(("name", "request_", "status"), LOOPBACK_MATRIX, ids=[m[0] for m in LOOPBACK_MATRIX])
def test_loopback_server_refuses(
    loopback: TeleopServer, tmp_path: Path, name: str, request_: Callable[[int], bytes], status: int
) -> None:
    code, body = _exchange(loopback.port, request_(loopback.port))
    assert code == status, (name, body)
    if body and code != 501 and code != 414:  # (stdlib answers: HTML)
        assert json.loads(body)["error"]
    _assert_untouched(loopback, tmp_path / "store")


@pytest.mark.parametrize(("name", "request_", "status"), TOKEN_MATRIX, ids=[m[0] for m in TOKEN_MATRIX])
def test_token_server_refuses(
    guarded: TeleopServer, tmp_path: Path, name: str, request_: Callable[[int], bytes], status: int
) -> None:
    code, body = _exchange(guarded.port, request_(guarded.port))
    assert code == status, (name, body)
    assert TOKEN not in body.decode(errors="replace")
    _assert_untouched(guarded, tmp_path / "store")


def test_loopback_names_and_own_origin_are_served(loopback: TeleopServer) -> None:
    port = loopback.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert _exchange(port, _request("GET", "/api/state", [], host=host)(port))[0] == 200, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):  # a page of the server, by either name
        request_ = _post("/api/command", b'{"cmd": "camera"}', f"Origin: http://{host}", host=host)
        code, body = _exchange(port, request_(port))
        assert code == 200, body


def test_rebinding_attack_commits_nothing(loopback: TeleopServer, tmp_path: Path) -> None:
    """The reported attack: a page on evil.example, resolved to 127.0.0.1, drives and commits."""
    port, headers = loopback.port, (f"Origin: http://{EVIL}:{{port}}",)
    codes = [
        _exchange(port, _post("/api/input", INPUT, *headers, host=f"{EVIL}:{{port}}")(port))[0]
        for _ in range(15)
    ]
    codes.append(_exchange(port, _post("/api/command", CMD_END, *headers, host=f"{EVIL}:{{port}}")(port))[0])
    assert set(codes) == {421}
    _assert_untouched(loopback, tmp_path / "store")


def test_negative_length_does_not_read_the_body(loopback: TeleopServer) -> None:
    """``Content-Length: -1`` followed by 4 MiB: answered 400 at once, the body never read."""
    head = _request("POST", "/api/input", [JSON, "Content-Length: -1"])(loopback.port)
    code, body = _exchange(loopback.port, head + b"x" * (4 << 20))
    assert code == 400 and "Content-Length" in json.loads(body)["error"]


def _closed_by_server(sock: socket.socket, max_polls: int = 120) -> bytes | None:
    """What the server sent before it closed ``sock``; ``None`` if it was still open after
    ``max_polls`` waits of 0.5 s (the loop ends by itself)."""
    got = b""
    for _ in range(max_polls):
        if select.select([sock], [], [], 0.5)[0]:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return got
            if not chunk:
                return got
            got += chunk
    return None


def _wait_for(predicate: Callable[[], bool], polls: int = 120) -> bool:
    for _ in range(polls):
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


def test_slow_and_half_sent_requests_are_cut_off(make_server: Callable[..., TeleopServer]) -> None:
    srv = make_server(request_timeout=1.0)
    port, socks = srv.port, []
    partial = [
        b"",  # connected, silent
        b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port,  # headers never finished
        _post("/api/input", b"x" * 1000)(port)[:-990],  # a body that stops after 10 of 1000 bytes
    ]
    for data in partial:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(data)
        socks.append(sock)
    try:
        answers = [_closed_by_server(s) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert None not in answers, answers  # every one was closed by the server
    assert answers[2].startswith(b"HTTP/1.1 408"), answers[2]
    assert _wait_for(lambda: srv.active_connections == 0), srv.active_connections


def test_trickled_headers_are_cut_off(make_server: Callable[..., TeleopServer]) -> None:
    """One header byte every 0.2 s keeps each read short of the timeout, never the whole request."""
    srv = make_server(request_timeout=1.0)
    line = b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % srv.port + b"a" * 400
    closed = False
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        for byte in line:  # at most 400 bytes: bounded
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if select.select([sock], [], [], 0.2)[0]:  # readable: the server closed it (it never answers)
                closed = True
                break
    assert closed


def test_connections_over_the_cap_get_503(make_server: Callable[..., TeleopServer]) -> None:
    srv = make_server(max_connections=4, request_timeout=60.0)
    idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(4)]
    try:
        for sock in idle:
            sock.sendall(b"GET /api/state HTTP/1.1\r\n")  # a request that never ends holds a slot
        assert _wait_for(lambda: srv.active_connections == 4)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as extra:
            answer = _closed_by_server(extra)
        assert answer is not None and answer.startswith(b"HTTP/1.1 503"), answer
        assert b"too many connections" in answer
    finally:
        for sock in idle:
            sock.close()
    assert _wait_for(lambda: srv.active_connections == 0)
    assert _state(srv)["mode"] == "human"  # served again once the slots are free


def test_streams_outlive_the_request_timeout(make_server: Callable[..., TeleopServer]) -> None:
    """Streams only write (a frame or keep-alive at least every second), so a 1 s request timeout
    never ends them: 3 keep-alives and 3 frames of an idle session span more than that."""
    srv = make_server(request_timeout=1.0)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("GET", "/api/events")
    resp = conn.getresponse()
    assert resp.status == 200
    lines = []
    for _ in range(50):  # bounded: the first state, then keep-alives once a second
        line = resp.readline()
        if line.strip():
            lines.append(line)
        if sum(x.startswith(b": keep-alive") for x in lines) >= 3:
            break
    conn.close()
    assert lines[0].startswith(b"data: ") and sum(x.startswith(b": keep-alive") for x in lines) >= 3
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("GET", "/stream.mjpg")
    resp = conn.getresponse()
    parts = 0
    for _ in range(2000):  # bounded
        line = resp.readline()
        parts += line.startswith(b"Content-Type: image/jpeg")
        if parts >= 5 or not line:
            break
    conn.close()
    assert parts >= 5
