"""A real headless Chromium for the chart-page tests, driven by Playwright for Python.

Playwright drives Debian's Chromium (``/usr/bin/chromium``, ``executable_path``):
``playwright install`` is never run, no browser is downloaded. One browser
process is shared by the whole test session (started on first use, closed at
exit); every :class:`Browser` is a fresh context (its own cookies, storage and
viewport) with one page, so tests do not see each other.

    with Browser() as browser:
        browser.open(url)
        browser.wait_for("document.querySelector('.uplot') !== null")
        value = browser.evaluate("document.title")
        browser.page.mouse.move(100, 200)  # the Playwright page, for clicks, drags, typing

The hand-written DevTools-protocol driver this replaced is gone; :func:`dump_dom`
(Chromium's one-shot ``--dump-dom``) stays for the cross-origin tests, which need a
page of another origin and no driver at all.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
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


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401, PLC0415 - only asks whether it is installed
    except ImportError:
        return False
    return True


needs_chromium = pytest.mark.skipif(
    not shutil.which(CHROMIUM) or not _has_playwright(),
    reason=f"needs {CHROMIUM} (apt-get install chromium) and playwright (the test extra); "
    "CI installs both",
)

_shared: dict[str, Any] = {}


def _browser() -> Any:
    """The session's one Chromium (a ``playwright.sync_api.Browser``), started on first use."""
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415 - optional dependency

        driver = sync_playwright().start()
        _shared["driver"] = driver
        _shared["browser"] = driver.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), timeout=60_000
        )
        atexit.register(_stop)
    return _shared["browser"]


def _stop() -> None:
    browser, driver = _shared.pop("browser", None), _shared.pop("driver", None)
    if browser is not None:
        browser.close()
    if driver is not None:
        driver.stop()


class BrowserError(RuntimeError):
    """A wait ran out, or the page's script failed."""


class Browser:
    """One fresh browser context with one page (a 1200 x 900 viewport by default).

    Args:
        width: the viewport width, in CSS pixels.
        height: the viewport height, in CSS pixels.
        timeout_seconds: the longest any one action or wait may take.
        dark: emulate the system's dark colour setting (``prefers-color-scheme: dark``).
        downloads: accept downloads (the page's CSV, JSON and PNG export).
    """

    def __init__(
        self,
        width: int = 1200,
        height: int = 900,
        timeout_seconds: float = 30.0,
        *,
        dark: bool = False,
        downloads: bool = False,
    ) -> None:
        self.width, self.height, self.timeout = width, height, timeout_seconds
        self.context = _browser().new_context(
            viewport={"width": width, "height": height},
            device_scale_factor=1,
            color_scheme="dark" if dark else "light",
            accept_downloads=downloads,
        )
        self.context.set_default_timeout(timeout_seconds * 1000)
        #: The Playwright page: ``page.mouse``, ``page.keyboard``, ``page.on("request")``.
        self.page = self.context.new_page()
        #: Uncaught errors of the page's script and console errors, in order.
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on(
            "console",
            lambda message: self.errors.append(message.text) if message.type == "error" else None,
        )

    def open(self, url: str) -> None:
        """Navigate to ``url`` and wait for its document to load."""
        self.page.goto(url, wait_until="load")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        return self.page.evaluate(expression)

    def wait_for(self, expression: str) -> Any:
        """Evaluate ``expression`` every 50 ms until it is truthy; return that value.

        (Not Playwright's ``wait_for_function``: it evaluates a string with ``eval``,
        which the page's Content-Security-Policy rightly refuses.)

        Raises:
            BrowserError: it was not truthy within the timeout.
        """
        from playwright.sync_api import Error  # noqa: PLC0415 - optional dependency

        deadline = time.monotonic() + self.timeout
        while True:
            try:
                value = self.page.evaluate(expression)
            except Error:  # the page is still loading, or navigating
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"never true: {expression}; page errors: {self.errors}")
            self.page.wait_for_timeout(50)  # polling a real browser, not a thread under test

    def screenshot(self, path: Path | None = None, full_page: bool = True) -> bytes:
        """A PNG of the page (the whole page when ``full_page``), also written to ``path``."""
        png: bytes = self.page.screenshot(path=path, full_page=full_page)
        return png

    def close(self) -> None:
        """Close the context (the shared browser stays for the next test). Idempotent."""
        self.context.close()

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
