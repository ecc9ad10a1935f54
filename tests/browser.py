"""A real headless Chromium driven over the DevTools protocol, for the chart-page tests.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol commands
(JSON, each ended by a NUL byte) from file descriptor 3 and writes answers and
events to descriptor 4. No WebSocket library and no port are needed, and the
browser can only be driven by this process. Every wait has a deadline.

    with Browser() as browser:
        browser.open(url)
        browser.wait_for("document.querySelector('canvas') !== null")
        value = browser.evaluate("document.title")
        png = browser.screenshot()
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
#: The flags every run uses: headless, no sandbox (root in CI), and no network beyond
#: what the page asks for (no sync, component updates or background requests).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

needs_chromium = pytest.mark.skipif(
    not shutil.which(CHROMIUM),
    reason=f"{CHROMIUM} is not installed (apt-get install chromium); CI installs it",
)


class BrowserError(RuntimeError):
    """Chromium answered a command with an error, died, or a wait ran out."""


class Browser:
    """One headless Chromium with one page (a 1200 x 900 viewport by default).

    Args:
        width: the viewport width, in CSS pixels.
        height: the viewport height, in CSS pixels.
        timeout_seconds: the longest any one command or wait may take.
    """

    def __init__(self, width: int = 1200, height: int = 900, timeout_seconds: float = 30.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout_seconds
        self._profile = tempfile.TemporaryDirectory(prefix="trainreport-chromium-")
        self._log = Path(self._profile.name) / "chromium.log"
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        command = [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={Path(self._profile.name) / 'profile'}",
            "about:blank",
        ]
        # bash (dash takes no descriptor above 9) puts our pipe ends on the 3 and 4 Chromium expects
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    "/bin/bash",
                    "-c",
                    f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
                    "bash",
                    *command,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(to_chrome_r, from_chrome_w),
            )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    # -- the protocol ----------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its ``result``."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError("no answer from Chromium in time")
            with selectors.DefaultSelector() as selector:
                selector.register(self._from_chrome, selectors.EVENT_READ)
                if not selector.select(remaining):
                    continue
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed its pipe; its log ends:\n{self._log_tail()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    # -- what a test does --------------------------------------------------------------

    def open(self, url: str) -> None:
        """Navigate the page to ``url`` (returns once the navigation has started)."""
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str) -> Any:
        """Evaluate ``expression`` every 50 ms until it is truthy; return that value."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError:  # the page is still loading
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"never true: {expression}")
            time.sleep(0.05)  # polling a real browser, not a thread under test

    def screenshot(self, path: Path | None = None, full_page: bool = True) -> bytes:
        """A PNG of the page (the whole page when ``full_page``), also written to ``path``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = self.evaluate("document.documentElement.scrollHeight")
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}
        png = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        if path is not None:
            path.write_bytes(png)
        return png

    def element_screenshot(self, selector: str, path: Path | None = None, height: int = 0) -> bytes:
        """A PNG of the first element matching ``selector`` (its top ``height`` px if > 0)."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
            ".getBoundingClientRect(); return [r.left + window.scrollX, r.top + window.scrollY,"
            " r.width, r.height]; })()"
        )
        x, y, width, full = box
        clip = {"x": x, "y": y, "width": width, "height": height or full, "scale": 1}
        params = {"format": "png", "captureBeyondViewport": True, "clip": clip}
        png = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        if path is not None:
            path.write_bytes(png)
        return png

    def close(self) -> None:
        """Close the browser (bounded) and remove its profile. Idempotent."""
        if self._process.poll() is None:
            try:
                self._session = None
                self.send("Browser.close")
            except (BrowserError, OSError):
                pass
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def dump_dom(url: str, profile: Path, *, budget_ms: int = 5000, extra: Sequence[str] = ()) -> str:
    """The page's DOM (as HTML) after its scripts ran for up to ``budget_ms`` of virtual time.

    A one-shot run (``--dump-dom``) with a fresh profile directory ``profile`` and a
    virtual time budget, so a page's script runs until it is idle or the budget is spent.
    """
    command = [
        CHROMIUM,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        *extra,
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        url,
    ]
    done = subprocess.run(command, capture_output=True, timeout=120, check=False, text=True)
    return done.stdout
