"""What the teleop server refuses before it serves a request (see the threat model in docs/teleop.md).

* binding: a non-loopback ``host`` needs a token (:func:`check_binding`);
* without a token (loopback only), every request must name the server itself: ``Host`` one of
  ``127.0.0.1``, ``localhost``, ``[::1]`` with the server's port, and an ``Origin``, when the browser
  sends one, the same (:func:`loopback_refusal`). A page whose own host name an attacker resolves to
  127.0.0.1 (DNS rebinding) sends its own name as ``Host`` and is refused;
* POST bodies: JSON (no CORS preflight is ever granted) from the page's own origin
  (:func:`cross_site_refusal`), with a ``Content-Length`` of at most :data:`MAX_BODY` bytes
  (:func:`body_length`);
* slow clients: a whole request (headers and body) must arrive within the request timeout
  (:class:`DeadlineReader`);
* floods: at most ``max_connections`` connections are served at once (:class:`CappedHTTPServer`).
"""

from __future__ import annotations

import errno
import io
import ipaddress
import json
import logging
import socket
import socketserver
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from socketserver import BaseRequestHandler
from typing import Any
from urllib.parse import urlsplit

from rewind.config import ConfigError

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
MAX_BODY = 64 * 1024
_BUSY = json.dumps({"error": "too many connections to the teleop server; try again"}).encode()


class RequestRefused(Exception):
    """A request the server answers with ``status`` and ``message`` (and then closes the connection)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    """``host`` is this machine only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    host = host.strip("[]")
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve on a non-loopback address without a token."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"host={host} exposes the teleop server beyond this machine: set a token "
            f"(REWIND_TELEOP_TOKEN=SECRET or token_file=PATH) or keep host=127.0.0.1"
        )


def loopback_hosts(port: int) -> frozenset[str]:
    """The ``Host`` values a token-less server accepts: a loopback name with its port."""
    names = {f"{name}:{port}" for name in LOOPBACK_NAMES}
    if port == 80:
        names |= set(LOOPBACK_NAMES)
    return frozenset(names)


def loopback_refusal(headers: Any, port: int, page: str) -> RequestRefused | None:
    """Why a request to the token-less (loopback) server on ``port`` (its page at ``page``) is
    refused, or ``None``: its ``Host`` or ``Origin`` names another site (DNS rebinding, a cross-site
    request)."""
    allowed = loopback_hosts(port)
    hosts = headers.get_all("Host") or []
    if len(hosts) != 1 or hosts[0].strip().lower() not in allowed:
        shown = hosts[0][:100] if len(hosts) == 1 else f"{len(hosts)} Host headers"
        return RequestRefused(421, f"refused: Host {shown!r} is not this server (open {page})")
    origin = headers.get("Origin")
    if origin is not None:
        parts = urlsplit(origin.strip().lower())
        if parts.scheme != "http" or parts.netloc not in allowed:
            return RequestRefused(403, f"cross-origin request refused (origin {origin[:100]!r})")
    return None


def cross_site_refusal(headers: Any) -> RequestRefused | None:
    """Why a POST must be refused, or ``None``. Commands must be JSON (so another site's page cannot
    send them without a CORS preflight, which this server never grants) and, when the browser names
    the page's origin, come from this server's own page."""
    if (headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
        return RequestRefused(415, "POST bodies must be sent as Content-Type: application/json")
    origin = headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc.lower() != (headers.get("Host") or "").lower():
        return RequestRefused(403, f"cross-origin request refused (origin {origin[:100]!r})")
    return None


def body_length(headers: Any) -> int:
    """The POST body's length: exactly one ``Content-Length``, decimal digits, at most :data:`MAX_BODY`.

    Raises:
        RequestRefused: 411 without one (or with ``Transfer-Encoding``), 400 when malformed
            (negative, not an integer, several), 413 when too large.
    """
    if headers.get("Transfer-Encoding") is not None:
        raise RequestRefused(411, "send the body with a Content-Length (no Transfer-Encoding)")
    values = headers.get_all("Content-Length") or []
    if not values:
        raise RequestRefused(411, "a POST needs a Content-Length header")
    if len(values) > 1:
        raise RequestRefused(400, "more than one Content-Length header")
    text = values[0].strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise RequestRefused(400, f"Content-Length must be a byte count; got {text[:20]!r}")
    length = int(text)
    if length > MAX_BODY:
        raise RequestRefused(413, f"request body too large ({length} bytes; at most {MAX_BODY})")
    return length


class DeadlineReader(io.RawIOBase):
    """The socket's read side, with a deadline for the whole request: every ``recv`` gets what is
    left of it as its timeout (at most ``timeout``), so a client that trickles bytes is cut off."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        super().__init__()
        self.sock, self.timeout = sock, timeout
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def start(self) -> None:
        """A request begins: it must have arrived within ``timeout`` s from now."""
        self.deadline = time.monotonic() + self.timeout

    def stop(self) -> None:
        """The request has arrived: the socket's own timeout applies again (to the writes)."""
        self.deadline = None
        self.sock.settimeout(self.timeout)

    def readinto(self, buffer: Any) -> int:
        """One ``recv`` into ``buffer``; ``TimeoutError`` once the request's time is up."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive in time")
            self.sock.settimeout(min(self.timeout, left))
        return self.sock.recv_into(buffer)


def drain_before_close(sock: socket.socket, max_bytes: int = 4 << 20, seconds: float = 1.0) -> None:
    """After answering a request whose body was not read: stop sending, then discard what the client
    still sends (bounded by ``max_bytes`` and ``seconds``), so it reads the answer instead of a reset."""
    deadline = time.monotonic() + seconds
    try:
        sock.shutdown(socket.SHUT_WR)
        while max_bytes > 0 and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            chunk = sock.recv(min(max_bytes, 65536))
            if not chunk:
                break
            max_bytes -= len(chunk)
    except OSError:
        pass


class CappedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` at once (more are answered 503 and
    closed by the accepting thread); IPv6 when the host is; no reverse DNS lookup at bind."""

    daemon_threads = True

    def __init__(self, host: str, port: int, handler: type[BaseRequestHandler], max_connections: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._slots = threading.BoundedSemaphore(max_connections)
        self._count_lock, self.active_connections = threading.Lock(), 0
        super().__init__((host, port), handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _refuse_busy(request)
            self.shutdown_request(request)
            return
        with self._count_lock:
            self.active_connections += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (a client reset, a timeout): one debug line, not a traceback."""
        log.debug("teleop: connection from %s ended: %r", client_address, sys.exc_info()[1])

    def _release(self) -> None:
        with self._count_lock:
            self.active_connections -= 1
        self._slots.release()


def _refuse_busy(sock: socket.socket) -> None:
    """503 on a connection over the cap, written by the accepting thread (never blocks long)."""
    head = (
        f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(_BUSY)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    try:
        sock.settimeout(0.5)
        sock.sendall(head.encode() + _BUSY)
        sock.setblocking(False)
        for _ in range(16):  # what already arrived, so closing sends FIN rather than RST
            if not sock.recv(65536):
                break
    except OSError:
        pass


def bind_server(
    host: str, port: int, handler: type[BaseRequestHandler], max_connections: int
) -> CappedHTTPServer:
    """The listening server; an address that cannot be bound is a :class:`ConfigError` naming it."""
    try:
        return CappedHTTPServer(host, port, handler, max_connections)
    except socket.gaierror as exc:
        raise ConfigError(f"host={host} cannot be resolved ({exc.strerror})") from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use (another rewind-teleop?): choose another "
                f"port=N, or port=0 for any free port"
            ) from exc
        raise ConfigError(f"cannot listen on host={host} port={port}: {exc.strerror or exc}") from exc
