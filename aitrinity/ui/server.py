"""``trinity ui``: the what-if page on a local HTTP server (standard library only).

Routes: ``GET /`` the page; ``GET /api/options`` the menus and each scenario's defaults;
``POST /api/whatif`` a :class:`~aitrinity.ui.whatif.Form` as JSON -> an
:class:`~aitrinity.ui.whatif.Answer`, or ``4xx {"error": message}`` with the message the CLI
prints for the same input.

What a web page in the user's browser must not be able to do through this server (the page has no
authentication, so these checks are its whole defence):

* **DNS rebinding** — a foreign site whose name resolves to 127.0.0.1: every request's ``Host`` must
  name this server (loopback names, or the address it was bound to), else ``421``;
* **cross-site requests** — an ``Origin`` header, when sent, must be this server's own, else ``403``;
  a POST must be ``Content-Type: application/json`` (a type no HTML form can send without a CORS
  pre-flight, which this server never grants), else ``415``;
* **file reads** — the form admits built-in scenario and catalog names only
  (:func:`~aitrinity.ui.whatif.check`), never a path;
* **resource use** — bodies over :data:`MAX_BODY` are refused (``413``) unread; one what-if at a time.

Every answer is JSON; an unexpected failure is ``500 {"error": "internal error"}`` and one log line,
never a traceback. Bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from pydantic import ValidationError

from aitrinity.errors import TrinityError
from aitrinity.ui import whatif

MAX_BODY = 64 * 1024
IDLE_S = 30.0
_LOCK = threading.Lock()
"""One what-if at a time: the library's memo caches are not shared across threads' writes."""

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def page_html() -> bytes:
    return resources.files("aitrinity.ui").joinpath("page.html").read_bytes()


def _form_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"]) or "form"
    return f"{where}: {err['msg']}"


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values that name this server: loopback names and the bound address, with port."""
    names = {*LOOPBACK_NAMES}
    if host not in ("", "0.0.0.0", "::"):
        names.add(f"[{host}]" if ":" in host else host)
    return frozenset(f"{n}:{port}" for n in names)


class _Refused(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class Handler(BaseHTTPRequestHandler):
    server_version = "trinity-ui"
    timeout = IDLE_S
    """Seconds a connection may stay silent (:class:`socketserver.StreamRequestHandler` sets it on the socket): a
    client that promises a body and never sends it, or never finishes its headers, is dropped instead of holding a
    thread for ever."""
    quiet = False
    hosts: frozenset[str] = frozenset()
    """Filled in by :func:`make_server` once the port is known."""

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (bad request line, unknown method, over-long headers) as JSON;
        an unknown method is 405 like the known ones this server does not serve."""
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code, message = HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not allowed (GET, HEAD, POST)"
        self.close_connection = True
        with contextlib.suppress(OSError):
            self._json(code, {"error": message or HTTPStatus(code).phrase})

    def _json(self, status: int, data: Any, extra: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), "application/json", extra)

    def _check_origin(self) -> None:
        host = self.headers.get("Host", "")
        if host not in self.hosts:
            raise _Refused(
                HTTPStatus.MISDIRECTED_REQUEST, f"this server answers to {sorted(self.hosts)[0]}, not {host!r}"
            )
        origin = self.headers.get("Origin")
        if origin is not None and origin.removeprefix("http://") not in self.hosts:
            raise _Refused(HTTPStatus.FORBIDDEN, "cross-origin requests are refused")

    def _guarded(self, serve: Any) -> None:
        """Run one route: refusals and library errors become JSON 4xx, anything else one 500 line."""
        try:
            self._check_origin()
            serve()
        except _Refused as e:
            self._json(e.status, {"error": str(e)})
        except TrinityError as e:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(e)})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left; nothing to answer
        except Exception as e:  # the server's last line of defence: one line in the log, no traceback
            self.log_error("internal error on %s %s: %s: %s", self.command, self.path, type(e).__name__, e)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_HEAD(self) -> None:
        self._guarded(self._get)

    def _get(self) -> None:
        if self.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, page_html(), "text/html; charset=utf-8")
        elif self.path == "/api/options":
            with _LOCK:
                self._json(HTTPStatus.OK, whatif.options())
        elif self.path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        else:
            raise _Refused(HTTPStatus.NOT_FOUND, f"no such page: {self.path[:100]}")

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _post(self) -> None:
        if self.path != "/api/whatif":
            raise _Refused(HTTPStatus.NOT_FOUND, f"no such endpoint: {self.path[:100]}")
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise _Refused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "the body must be Content-Type: application/json")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length > MAX_BODY:
            self.close_connection = True  # the body stays unread
            raise _Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a JSON body of at most {MAX_BODY} bytes")
        if length <= 0:
            raise _Refused(HTTPStatus.BAD_REQUEST, f"a JSON body of 1 to {MAX_BODY} bytes")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise _Refused(HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {self.timeout:g} s") from None
        try:
            form = whatif.Form.model_validate_json(body)
        except ValidationError as e:
            raise _Refused(HTTPStatus.BAD_REQUEST, _form_error(e)) from None
        with _LOCK:
            ans = whatif.answer(form)
        self._json(HTTPStatus.OK, ans.model_dump(mode="json"))

    def _not_allowed(self) -> None:
        def refuse() -> None:
            raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not allowed (GET, HEAD, POST)")

        self._guarded(refuse)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failure outside a route (a malformed request, a dropped connection): one line, no traceback."""
        e = sys.exc_info()[1]
        if not isinstance(e, ConnectionError):
            sys.stderr.write(f"trinity ui: {client_address[0]}: {type(e).__name__}: {e}\n")


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def make_server(host: str = "127.0.0.1", port: int = 8765, quiet: bool = False) -> ThreadingHTTPServer:
    handler: type[Handler] = type("QuietHandler" if quiet else "Handler", (Handler,), {"quiet": quiet})
    server = _Server((host, port), handler)
    handler.hosts = allowed_hosts(host, server.server_address[1])
    return server
