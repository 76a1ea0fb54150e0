"""The teleop web server: the page, the MJPEG camera stream, the state stream and the command API.

Routes (all but the page's static JS/CSS need the token when the server has one: ``?token=`` or
``X-Teleop-Token``)::

    GET  /                the page (static/index.html)       GET  /static/<file>  its JS and CSS
    GET  /stream.mjpg     camera frames (multipart MJPEG; part headers X-Step, X-Input-Seq, X-Source)
    GET  /frame.jpg       the latest frame                    GET  /api/config     bindings, commands
    GET  /api/state       session state (JSON)                GET  /api/events     state stream (SSE)
    POST /api/command     {"cmd": NAME, ...args} -> {"ok": true, "state": ...} | 400 {"error": ...}
    POST /api/input       {"keys": [codes], "axes": [dx, dy, dz, dyaw]} -> {"seq": n}

The server binds ``127.0.0.1`` by default (an IPv6 address such as ``::1`` binds an IPv6 socket);
another address is refused without a token. What it refuses (foreign ``Host``/``Origin``, non-JSON
or oversized POSTs, slow clients, too many connections) is in :mod:`rewind.teleop.guard` and the
threat model in docs/teleop.md. Errors are JSON ``{"error": ...}``; the token is never logged.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from rewind.teleop.commands import COMMANDS, MODES, TeleopCommandError
from rewind.teleop.controls import COMMAND_KEYS, KEY_HELP, MOVE_KEYS, PRECISE_KEYS
from rewind.teleop.frames import Frame
from rewind.teleop.guard import (
    LOOPBACK_HOSTS,
    MAX_BODY,
    DeadlineReader,
    RequestRefused,
    bind_server,
    body_length,
    check_binding,
    cross_site_refusal,
    drain_before_close,
    loopback_refusal,
)
from rewind.teleop.simulation import SimLoop

log = logging.getLogger(__name__)

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_BODY",
    "TeleopServer",
    "check_binding",
    "cross_site_refusal",
    "static_files",
]

STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
BOUNDARY = "rewindframe"
_TOKEN_IN_TEXT = re.compile(r"(token=)[^&\s\"]*", re.IGNORECASE)


def static_files() -> dict[str, bytes]:
    """The page's files (``rewind/teleop/static``), by name."""
    root = resources.files("rewind.teleop") / "static"
    return {
        p.name: p.read_bytes() for p in root.iterdir() if p.name.rsplit(".", 1)[-1] in ("html", "js", "css")
    }


class TeleopServer:
    """HTTP front end of a :class:`SimLoop` (a ``ThreadingHTTPServer`` in a background thread).

    Args:
        loop: the running simulation; host / port: where to listen (port 0: any free port).
        token: required from every request when set (mandatory off loopback).
        request_timeout: seconds a client has to send a whole request, and to take each stream write.
        max_connections: connections served at once; more are answered 503.

    Raises:
        ConfigError: the address cannot be bound (port in use, unknown host).
    """

    def __init__(
        self,
        loop: SimLoop,
        host: str = "127.0.0.1",
        port: int = 8765,
        token: str | None = None,
        request_timeout: float = 10.0,
        max_connections: int = 32,
    ) -> None:
        host = host.strip("[]")
        check_binding(host, token)
        self.loop, self.token, self.request_timeout = loop, token or None, float(request_timeout)
        self.static = static_files()
        self.stopping = threading.Event()
        self.httpd = bind_server(host, port, _Handler, max_connections)
        self.httpd.app = self  # type: ignore[attr-defined]
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="teleop-http", daemon=True)

    @property
    def base_url(self) -> str:
        """The page's URL without the token (safe to log)."""
        host = str(self.httpd.server_address[0])
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/"

    @property
    def url(self) -> str:
        """The page's URL with the token: a secret, never log it."""
        return self.base_url + (f"?token={quote(self.token, safe='')}" if self.token else "")

    @property
    def active_connections(self) -> int:
        """Connections being served now (streams included)."""
        return self.httpd.active_connections

    def start(self) -> str:
        """Serve in the background; returns :attr:`base_url`."""
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop serving and end the open streams."""
        self.stopping.set()
        self.loop.frames.close()
        self.loop.states.close()
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def authorized(self, headers: Any, query: dict[str, list[str]]) -> bool:
        """The request carries the server's token (always true without one)."""
        if self.token is None:
            return True
        given = headers.get("X-Teleop-Token") or (query.get("token") or [""])[0]
        return hmac.compare_digest(given.encode(), self.token.encode())

    def config(self) -> dict[str, Any]:
        """What the page needs besides the state: modes, commands, key bindings."""
        return {
            "modes": list(MODES),
            "commands": {k: {"args": list(a), "help": h} for k, (a, h) in COMMANDS.items()},
            "command_keys": {k: {"cmd": c, "args": a} for k, (c, a) in COMMAND_KEYS.items()},
            "input_keys": sorted(set(MOVE_KEYS) | PRECISE_KEYS),
            "key_help": [list(x) for x in KEY_HELP],
        }


class _Handler(BaseHTTPRequestHandler):
    """One connection; streams (MJPEG, SSE) hold their thread until the client leaves or the server
    stops. A request must arrive whole within the server's request timeout; a refused POST's body is
    not read, so its connection is closed after the answer."""

    protocol_version = "HTTP/1.1"
    server_version = "rewind-teleop"

    @property
    def app(self) -> TeleopServer:
        return self.server.app  # type: ignore[attr-defined]

    def setup(self) -> None:
        self.timeout = self.app.request_timeout
        super().setup()
        self.rfile.close()  # the stdlib's reader: replaced by one with a deadline per request
        self.reader = DeadlineReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        self.reader.start()
        self.body_done = True
        super().handle_one_request()

    def finish(self) -> None:
        if not self.body_done:
            drain_before_close(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        log.debug("%s %s", self.address_string(), _TOKEN_IN_TEXT.sub(r"\1***", format % args))

    def _route(self) -> tuple[str, dict[str, list[str]]] | None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        refused = None
        if self.app.token is None:
            refused = loopback_refusal(self.headers, self.app.port, self.app.base_url)
        if refused is not None:
            self._json(refused.status, {"error": str(refused)})
            return None
        public = self.command == "GET" and parts.path.startswith("/static/")  # the page's own JS/CSS
        if not public and not self.app.authorized(self.headers, query):
            self._json(403, {"error": "forbidden: missing or wrong token (open the page with ?token=...)"})
            return None
        return parts.path, query

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self.reader.stop()
        self.body_done = (
            self.headers.get("Content-Length") in (None, "0") and "Transfer-Encoding" not in self.headers
        )
        routed = self._route()
        if routed is None:
            return
        path, _ = routed
        if path in ("/", "/index.html"):
            self._send(200, self.app.static["index.html"], STATIC_TYPES[".html"])
        elif path.startswith("/static/") and path[8:] in self.app.static:
            name = path[8:]
            self._send(200, self.app.static[name], STATIC_TYPES["." + name.rsplit(".", 1)[-1]])
        elif path == "/stream.mjpg":
            self._stream_frames()
        elif path == "/frame.jpg":
            _, frame = self.app.loop.frames.get()
            self._send(200, frame.jpeg if frame else b"", "image/jpeg")
        elif path == "/api/state":
            self._json(200, self.app.loop.states.get()[1] or {})
        elif path == "/api/config":
            self._json(200, self.app.config())
        elif path == "/api/events":
            self._stream_states()
        else:
            self._json(404, {"error": f"no such page: {path[:200]}"})

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        self.body_done = False
        routed = self._route()
        if routed is None:
            return
        path, _ = routed
        try:
            refused = cross_site_refusal(self.headers)
            if refused is not None:
                raise refused
            body = self._read_json()
        except RequestRefused as exc:
            self._json(exc.status, {"error": str(exc)})
            return
        except TimeoutError:
            self._json(408, {"error": f"request body not received within {self.app.request_timeout:g} s"})
            return
        self._answer_post(path, body)

    def _answer_post(self, path: str, body: dict[str, Any]) -> None:
        try:
            if path == "/api/command":
                name = body.pop("cmd", None)
                if not isinstance(name, str):
                    raise TeleopCommandError(f"missing 'cmd'; valid commands: {', '.join(COMMANDS)}")
                self._json(200, {"ok": True, "state": self.app.loop.submit(name, body)})
            elif path == "/api/input":
                seq = self.app.loop.session.input.update(body.get("keys") or [], body.get("axes"))
                self._json(200, {"seq": seq})
            else:
                self._json(404, {"error": f"no such endpoint: {path[:200]}"})
        except (TeleopCommandError, ValueError, TypeError) as exc:
            self._json(400, {"error": str(exc)})
        except TimeoutError as exc:
            self._json(503, {"error": str(exc)})

    # ----------------------------------------------------------------- helpers
    def _read_json(self) -> dict[str, Any]:
        """The POST's JSON object body (the whole request within the deadline).

        Raises:
            RequestRefused: a bad Content-Length (400/411/413), a short or non-JSON body (400).
            TimeoutError: the body did not arrive in time.
        """
        length = body_length(self.headers)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:
            raise RequestRefused(400, f"request body ended after {len(raw)} of {length} bytes")
        self.body_done = True
        self.reader.stop()
        try:
            body = json.loads(raw or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestRefused(400, f"request body is not JSON ({exc})") from exc
        if not isinstance(body, dict):
            raise RequestRefused(400, "request body must be a JSON object")
        return body

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if not self.body_done:  # a body left unread: the connection cannot carry another request
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _start_stream(self, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _stream_frames(self) -> None:
        """Multipart MJPEG: each new frame as soon as it is published (skipping any missed); each part
        is followed at once by the next boundary, so the browser can show it without waiting."""
        self._start_stream(f"multipart/x-mixed-replace; boundary={BOUNDARY}")
        frames = self.app.loop.frames
        try:
            self.wfile.write(f"--{BOUNDARY}\r\n".encode())
            seq, frame = frames.get()
            for _ in range(2 if frame is not None else 0):  # Chrome shows the first part once a second came
                self._write_part(frame)  # type: ignore[arg-type]
            while not self.app.stopping.is_set():
                seq, frame = frames.wait_newer(seq, timeout=1.0)
                if frame is not None:  # nothing new for a second: the same frame again (finds gone clients)
                    self._write_part(frame)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            return

    def _write_part(self, frame: Frame) -> None:
        head = (
            f"Content-Type: image/jpeg\r\nContent-Length: {len(frame.jpeg)}\r\nX-Step: {frame.step}\r\n"
            f"X-Input-Seq: {frame.input_seq}\r\nX-Source: {frame.source}\r\n\r\n"
        )
        self.wfile.write(head.encode() + frame.jpeg + f"\r\n--{BOUNDARY}\r\n".encode())
        self.wfile.flush()

    def _stream_states(self) -> None:
        """Server-sent events: the session state each time it changes (a comment every second)."""
        self._start_stream("text/event-stream")
        states, seq = self.app.loop.states, 0
        try:
            while not self.app.stopping.is_set():
                new, state = states.wait_newer(seq, timeout=1.0)
                if state is None or new == seq:
                    self.wfile.write(b": keep-alive\n\n")
                else:
                    seq = new
                    self.wfile.write(b"data: " + json.dumps(state).encode() + b"\n\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            return
