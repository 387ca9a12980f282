"""``trinity ui``: the what-if page on a local HTTP server (standard library only).

Routes: ``GET /`` the page; ``GET /api/options`` the menus and each scenario's defaults;
``POST /api/whatif`` a :class:`~aitrinity.ui.whatif.Form` as JSON -> an
:class:`~aitrinity.ui.whatif.Answer`, or ``400 {"error": message}`` with the message the CLI
prints for the same input. Bound to 127.0.0.1 unless told otherwise; bodies over 64 kB are refused.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from pydantic import ValidationError

from aitrinity.errors import TrinityError
from aitrinity.ui import whatif

MAX_BODY = 64 * 1024
_LOCK = threading.Lock()
"""One what-if at a time: the library's memo caches are not shared across threads' writes."""


def page_html() -> bytes:
    return resources.files("aitrinity.ui").joinpath("page.html").read_bytes()


def _form_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"]) or "form"
    return f"{where}: {err['msg']}"


class Handler(BaseHTTPRequestHandler):
    server_version = "trinity-ui"
    quiet = False

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def do_GET(self) -> None:
        if self.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, page_html(), "text/html; charset=utf-8")
        elif self.path == "/api/options":
            with _LOCK:
                self._json(HTTPStatus.OK, whatif.options())
        elif self.path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {self.path}"})

    def do_POST(self) -> None:
        if self.path != "/api/whatif":
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"a JSON body of 1 to {MAX_BODY} bytes"})
            return
        try:
            form = whatif.Form.model_validate_json(self.rfile.read(length))
        except ValidationError as e:
            self._json(HTTPStatus.BAD_REQUEST, {"error": _form_error(e)})
            return
        try:
            with _LOCK:
                ans = whatif.answer(form)
        except TrinityError as e:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(e)})
            return
        self._json(HTTPStatus.OK, ans.model_dump(mode="json"))


def make_server(host: str = "127.0.0.1", port: int = 8765, quiet: bool = False) -> ThreadingHTTPServer:
    handler = type("QuietHandler" if quiet else "Handler", (Handler,), {"quiet": quiet})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
