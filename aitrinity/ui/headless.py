"""A real headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages separated by NUL on file descriptors 3 and 4): no websocket library, no network, no port.

The browser tests and ``benchmarks/bench_report.py`` use it to open the report and the what-if page,
read what rendered, time the page's answers and save screenshots. Console errors, uncaught exceptions
and error log entries are collected per page. POSIX only (file-descriptor inheritance)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, executable: str, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._profile = tempfile.TemporaryDirectory(prefix="trinity-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads our messages, its fd 4 writes its own
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        reply = self._until(lambda m, i=self._next: m.get("id") == i)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str | None = None) -> dict[str, Any]:
        for k, e in enumerate(self.events):
            if e.get("method") == method and (session is None or e.get("sessionId") == session):
                return self.events.pop(k)
        return self._until(lambda m: m.get("method") == method and (session is None or m.get("sessionId") == session))

    def _until(self, match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if match(msg):
                    return msg  # type: ignore[no-any-return]
                if "method" in msg:
                    self.events.append(msg)
            if time.monotonic() > deadline:
                raise BrowserError("no answer from chromium in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed the pipe")
            self._buf += chunk

    def page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session)

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.b, self.session = browser, session
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )

    def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.b.send(method, params, self.session)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.b.wait_event("Page.loadEventFired", self.session)

    def eval(self, expression: str, await_promise: bool = False) -> Any:
        res = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        )
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression[:60]}...: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.02)
        raise BrowserError(f"timed out waiting for {expression}")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far on this page."""
        out = []
        for e in self.b.events:
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


class WhatIfPage:
    """The what-if page (``trinity ui``) in a headless page, driven as a user would drive it."""

    def __init__(self, browser: Browser, url: str) -> None:
        self.page = browser.page()
        self.page.goto(url)
        self.page.wait_for("window.trinity && window.trinity.ready")

    def change(self, control: str, value: str) -> dict[str, Any]:
        """Set a control, fire its input / change event, wait until the page applied the answer and return
        the page's own record ``{seq, ms, ok, error}`` (``ms``: from the event to the page updated)."""
        p = self.page
        seq = p.eval("window.trinity.seq")
        event = "change" if control in ("scenario", "model", "device", "link") else "input"
        p.eval(
            f"(() => {{ const el = document.getElementById({json.dumps(control)}); el.value = {json.dumps(value)}; "
            f"el.dispatchEvent(new Event({json.dumps(event)})); }})()"
        )
        p.wait_for(f"window.trinity.applied > {seq} && window.trinity.applied === window.trinity.seq")
        last: dict[str, Any] = p.eval("window.trinity.last")
        return last

    def text(self, element_id: str) -> str:
        return str(self.page.eval(f"document.getElementById({json.dumps(element_id)}).textContent"))
