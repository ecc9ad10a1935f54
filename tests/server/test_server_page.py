"""The live chart page: HTML shells, their security headers, and a real headless render.

The browser part needs ``/usr/bin/chromium`` and Playwright (CI installs both);
without them those tests are skipped with a reason. They drive the page like a
person (click, drag, type: ``tests/browser.py``) and check what it shows and
what it asked the server for. Set ``TRAINREPORT_SAVE_SCREENSHOTS=<dir>`` to keep
the screenshots ``docs/images/`` holds (task-page.png, many-metrics.png,
compare.png).

Tests marked ``needs_series_api`` use what the ``/series`` endpoint gained in
issue 24 (per-point ``times``, ``from``/``to`` read at full resolution,
``after``); against a server without it they skip, saying so.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import urllib.parse
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import urllib3

from browser import Browser, needs_chromium
from conftest import opened_writer
from trainreport import HttpSink, Reporter
from trainreport._wire._job_tokens import issue_job_token
from trainreport.server import ServerHandle
from trainreport.server._db._database import Applied, Database
from trainreport.server._page import downsample_indices, shape_columns
from trainreport.server._wire import SeriesPoints, TaskUpdate

JOB, TASK = "llama-finetune-42", "train"
HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def pool() -> Iterator[urllib3.PoolManager]:
    with urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=20.0)) as manager:
        yield manager


def _call(
    pool: urllib3.PoolManager, url: str, method: str, payload: Any, token: str | None = None
) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers["Content-Type"] = "application/json"
    response = pool.request(method, url, body=json.dumps(payload).encode(), headers=headers)
    assert response.status == 200, response.data
    return json.loads(response.data)


def write_demo_task(pool: urllib3.PoolManager, base: str, token: str | None = None) -> None:
    """A task a third into its run: noisy train loss with a NaN gap, sparse val loss, lr."""
    task = f"{base}/v1/jobs/{JOB}/tasks/{TASK}"
    n = 600
    steps = list(range(1, n + 1))
    train: list[float | None] = [
        2.5 * math.exp(-s / 150) + 0.35 + 0.05 * math.sin(s * 1.7) * math.cos(s * 0.31)
        for s in steps
    ]
    train[300:306] = [None] * 6
    val_steps = list(range(50, n + 1, 50))
    val = [2.5 * math.exp(-s / 170) + 0.45 for s in val_steps]
    lr = [1e-4 * min(1.0, s / 60) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / n))) for s in steps]
    grad = [1.2 + 0.6 * math.exp(-s / 120) + 0.04 * math.sin(s * 2.3) for s in steps]
    # shown as "a few seconds ago" (display only; nothing is asserted about it)
    updated_at = datetime.now(timezone.utc) - timedelta(seconds=4)

    def cols(xs: list[int], values: list[Any]) -> dict[str, Any]:
        return {
            "offset": 0,
            "steps": xs,
            "epochs": [1 + (x - 1) // 200 for x in xs],
            "values": values,
        }

    gen = _call(pool, task + "/writers", "POST", {}, token)["writer_generation"]
    _call(
        pool,
        task + "/updates",
        "POST",
        {
            "writer_generation": gen,
            "sequence": 1,
            "status": "running",
            "status_details": {
                "phase": "training",
                "step": n,
                "max_steps": 1000,
                "epoch": 3,
                "num_epochs": 5,
                "percentage_done": 60.0,
                "eta_seconds": 1810.5,
                "updated_at": updated_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
                "checkpoint_path": "ckpt/step-600",
                "train_loss": train[-1],
                "val_loss": val[-1],
                "hyperparameters": {
                    "optimizer/lr": 1e-4,
                    "optimizer/name": "adamw",
                    "batch_size": 32,
                    "note": HOSTILE,
                },
            },
            "series": {
                "train_loss": cols(steps, train),
                "val_loss": cols(val_steps, val),
                "train_lr": cols(steps, lr),
                "train_grad_norm": cols(steps, grad),
            },
        },
        token,
    )
    for trial, (status, step) in {"trial-3": ("completed", 200), "trial-4": ("failed", 50)}.items():
        _call(
            pool,
            f"{base}/v1/jobs/sweep-7/tasks/{trial}",
            "PATCH",
            {
                "status": status,
                "status_details": {
                    "phase": "training",
                    "step": step,
                    "max_steps": 200,
                    "percentage_done": step / 2,
                },
            },
            token,
        )


# -- the HTML shells --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", f"/jobs/{JOB}/tasks/{TASK}"])
def test_pages_serve_an_html_shell_that_loads_the_page_script_and_uplot_from_this_server(
    server: ServerHandle, pool: urllib3.PoolManager, path: str
) -> None:
    """Both pages are HTML that load uPlot, the page script and their styles from /static/."""
    write_demo_task(pool, server.url)

    response = pool.request("GET", server.url + path)
    html = response.data.decode()
    sources = re.findall(r'(?:src|href)="(/static/[^"?]+)\?v=[0-9a-f]{16}"', html)

    assert (200, "text/html") == (
        response.status,
        response.headers["content-type"].split(";")[0],
    )
    assert [
        "/static/vendor/uplot/uPlot.min.css",
        "/static/page.css",
        "/static/vendor/uplot/uPlot.iife.min.js",
        "/static/page.js",
    ] == sources


@pytest.mark.parametrize(
    ("path", "media_type", "text"),
    [
        ("page.js", "text/javascript", "/v1/jobs"),
        ("page.css", "text/css", "prefers-color-scheme: dark"),
        ("vendor/uplot/uPlot.iife.min.js", "text/javascript", "uPlot"),
        ("vendor/uplot/uPlot.min.css", "text/css", ".uplot"),
        ("vendor/uplot/LICENSE", "text/plain", "MIT License"),
    ],
)
def test_the_static_files_are_served_with_their_type_and_an_etag(
    server: ServerHandle, pool: urllib3.PoolManager, path: str, media_type: str, text: str
) -> None:
    """Each static file comes with its type; asked again with its ETag, it is a 304."""
    response = pool.request("GET", f"{server.url}/static/{path}")
    again = pool.request(
        "GET", f"{server.url}/static/{path}", headers={"If-None-Match": response.headers["etag"]}
    )

    assert (200, media_type) == (response.status, response.headers["content-type"].split(";")[0])
    assert text in response.data.decode()
    assert (304, b"") == (again.status, again.data)


@pytest.mark.parametrize(
    "path",
    ["../_page.py", "vendor/uplot/../../_page.py", "nothing.js", "vendor/uplot/package.json"],
)
def test_only_the_listed_static_files_are_served(
    server: ServerHandle, pool: urllib3.PoolManager, path: str
) -> None:
    """Nothing else of the package is reachable under /static/: no traversal, no listing."""
    assert 404 == pool.request("GET", f"{server.url}/static/{path}").status


def test_the_vendored_uplot_is_the_version_the_update_script_records() -> None:
    """uPlot is vendored whole (its build, style, licence) at the version in VERSION."""
    vendor = Path(__file__).parents[2] / "src/trainreport/server/static/vendor/uplot"
    version = (vendor / "VERSION").read_text().strip()
    script = (vendor / "uPlot.iife.min.js").read_text()

    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert script.startswith("/*! https://github.com/leeoniya/uPlot (v" + version + ")")
    assert "Leon Sorokin" in (vendor / "LICENSE").read_text()


def test_the_csp_admits_scripts_and_styles_of_this_origin_only(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """No inline code and nothing from elsewhere: script-src and style-src are 'self'."""
    response = pool.request("GET", server.url + "/")
    html = response.data.decode()
    csp = response.headers["content-security-policy"]

    assert "script-src 'self';" in csp
    assert "style-src 'self';" in csp
    assert "default-src 'none'" in csp
    assert "unsafe" not in csp
    assert not re.search(r"<script>|<style>|\son\w+=", html)
    assert not re.search(r"(src|href)=\"(https?:)?//", html)


def test_the_shell_never_contains_client_data(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """Ids, metric names and details reach the page only as JSON, written with textContent."""
    write_demo_task(pool, server.url)

    html = pool.request("GET", f"{server.url}/jobs/{JOB}/tasks/{TASK}").data.decode()
    script = pool.request("GET", f"{server.url}/static/page.js").data.decode()

    assert JOB not in html
    assert "onerror" not in html
    assert [] == re.findall(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script
    )


def test_a_task_page_with_a_bad_id_is_400(server: ServerHandle, pool: urllib3.PoolManager) -> None:
    """The page route validates ids like the API does."""
    assert 400 == pool.request("GET", server.url + "/jobs/-bad/tasks/t").status


def test_downsampling_keeps_ends_extremes_and_gaps() -> None:
    """Thinning a curve for the page keeps its first and last points, spikes and null gaps."""
    values: list[float | None] = [float(i % 7) for i in range(1000)]
    values[500] = 99.0
    values[700] = None

    kept = downsample_indices(values, 100)

    assert (0, 999) == (kept[0], kept[-1])
    assert {500, 700} <= set(kept)
    assert len(kept) <= 110
    assert kept == sorted(set(kept))
    assert list(range(5)) == downsample_indices(values[:5], 100)


# -- a real browser ---------------------------------------------------------------------


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG into rows of pixel bytes (no Pillow)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (8, 0) == (depth, interlace)
    bpp = {2: 3, 6: 4}[color]
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def _colours(data: bytes) -> Counter[tuple[int, int, int]]:
    _width, bpp, rows = _png_pixels(data)
    counts: Counter[tuple[int, int, int]] = Counter()
    for row in rows:
        counts.update(zip(row[0::bpp], row[1::bpp], row[2::bpp], strict=True))
    return counts


def _near(counts: Counter[tuple[int, int, int]], rgb: tuple[int, int, int]) -> int:
    return sum(
        n for c, n in counts.items() if all(abs(x - y) <= 24 for x, y in zip(c, rgb, strict=True))
    )


def _save(browser: Browser, name: str, full_page_clip: int = 0) -> bytes:
    """A screenshot of the whole page (of its top ``full_page_clip`` px if > 0), kept
    under ``$TRAINREPORT_SAVE_SCREENSHOTS/<name>`` when that is set."""
    path = Path(_SCREENSHOTS) / name if _SCREENSHOTS else None
    if full_page_clip:
        clip = {"x": 0, "y": 0, "width": browser.width, "height": full_page_clip}
        png: bytes = browser.page.screenshot(path=path, clip=clip)
        return png
    return browser.screenshot(path)


#: Read at import: the suite's autouse fixture clears TRAINREPORT_* variables for each test.
_SCREENSHOTS = os.environ.get("TRAINREPORT_SAVE_SCREENSHOTS")
CHARTS = "window.trainreportPage.charts()"
BUILT = "window.trainreportPage.charts().filter((c) => c.built).length"


def _chart(browser: Browser, title: str) -> dict[str, Any]:
    """What the page shows in the chart titled ``title`` (its scales and lines)."""
    found: dict[str, Any] = browser.evaluate(
        f"{CHARTS}.find((c) => c.title === {json.dumps(title)})"
    )
    return found


def _open_task(browser: Browser, url: str, charts: int = 3) -> None:
    browser.open(url)
    browser.wait_for(f"window.trainreportPage && {BUILT} >= {charts}")


@needs_chromium
def test_the_task_page_draws_its_charts_in_a_real_browser(
    start_server: Any, server_token: str, pool: urllib3.PoolManager
) -> None:
    """Headless Chromium renders the task page with the token from the fragment.

    The screenshot must be a real page: over 10 KB, many colours, and the red
    of the second loss curve (val_loss), which only the chart and the legend draw.
    """
    handle = start_server(token=server_token)
    write_demo_task(pool, handle.url, server_token)

    with Browser() as browser:
        _open_task(browser, f"{handle.url}/jobs/{JOB}/tasks/{TASK}#token={server_token}")
        png = _save(browser, "task-page.png")
        errors = browser.errors

    colours = _colours(png)
    assert [] == errors
    assert len(png) > 10_000
    assert len(colours) > 50
    assert _near(colours, (0xDC, 0x26, 0x26)) > 150  # val_loss: markers, line, legend
    assert _near(colours, (0x25, 0x63, 0xEB)) > 1000  # train_loss, badge, progress bar


@needs_chromium
def test_the_index_page_lists_jobs_in_a_real_browser(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """The jobs page renders its table: the completed (green) and failed (red) badges show."""
    write_demo_task(pool, server.url)

    with Browser() as browser:
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('table.tasks') !== null")
        colours = _colours(browser.screenshot())

    assert len(colours) > 50
    assert _near(colours, (0x15, 0x80, 0x3D)) > 200  # the "completed" badge
    assert _near(colours, (0xB9, 0x1C, 0x1C)) > 200  # the "failed" badge


# -- the rendered page ------------------------------------------------------------------

HF_HYPERPARAMETERS = json.loads(
    (Path(__file__).parents[1] / "data" / "hf_hyperparameters.json").read_text(encoding="utf-8")
)  # a Hugging Face run's: TrainingArguments and a GPT-2 config, flattened (157 keys)
CHECKPOINT = "/home/researcher/experiments/llama_finetune_v2/trainer_output/checkpoint-600"

# Where each text of the selected elements wraps: the characters on both sides of
# every line break, found from the on-screen position of each character.
_LINE_BREAKS = """
((selector) => Array.from(document.querySelectorAll(selector)).map((node) => {
  const chars = [];
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    for (let i = 0; i < t.data.length; i++) {
      const range = document.createRange();
      range.setStart(t, i);
      range.setEnd(t, i + 1);
      const rect = range.getBoundingClientRect();
      if (rect.width || rect.height) chars.push([t.data[i], rect.top]);
    }
  }
  const breaks = [];
  for (let i = 1; i < chars.length; i++) {
    if (chars[i][1] > chars[i - 1][1] + 2) breaks.push(chars[i - 1][0] + chars[i][0]);
  }
  return {text: node.textContent, breaks: breaks,
          overflows: node.scrollWidth > node.clientWidth + 1};
}))
"""


def _mid_word(pair: str) -> bool:
    """A break between two letters or digits, unless it is a camelCase boundary."""
    before, after = pair[0], pair[1]
    camel = before.islower() and after.isupper()
    return before.isalnum() and after.isalnum() and not camel


def _line_breaks(browser: Browser, selector: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = browser.evaluate(f"{_LINE_BREAKS}({json.dumps(selector)})")
    return result


@needs_chromium
@pytest.mark.parametrize("width", [1200, 760])
def test_hyperparameter_keys_and_the_checkpoint_path_wrap_only_between_words(
    server: ServerHandle, pool: urllib3.PoolManager, tmp_path: Path, width: int
) -> None:
    """A Hugging Face run's 157 hyperparameters and a long checkpoint path never break mid-word.

    They wrap after ``/``, ``_``, ``.`` or ``-`` (or at a camelCase boundary);
    nothing overflows its box; the checkpoint's full path is its text and its
    tooltip.
    """
    write_demo_task(pool, server.url)
    _call(
        pool,
        f"{server.url}/v1/jobs/{JOB}/tasks/{TASK}",
        "PATCH",
        {"status_details": {"hyperparameters": HF_HYPERPARAMETERS, "checkpoint_path": CHECKPOINT}},
    )

    with Browser(width=width) as browser:
        browser.open(f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        browser.wait_for("document.body.innerText.includes('training_args/output_dir')")
        keys = _line_breaks(browser, ".hyperparameters .k")
        checkpoint = _line_breaks(browser, ".stat.checkpoint .v")
        tooltip = browser.evaluate("document.querySelector('.stat.checkpoint .v').title")
        page_overflows = browser.evaluate(
            "document.documentElement.scrollWidth > window.innerWidth"
        )
        browser.screenshot(tmp_path / f"hyperparameters-{width}.png")

    assert 157 == len(keys)
    assert set(HF_HYPERPARAMETERS) == {k["text"] for k in keys}
    assert [] == [(k["text"], b) for k in keys for b in k["breaks"] if _mid_word(b)]
    assert [] == [k["text"] for k in keys if k["overflows"]]
    assert [CHECKPOINT] == [c["text"] for c in checkpoint]
    assert [] == [b for b in checkpoint[0]["breaks"] if _mid_word(b)]
    assert (CHECKPOINT, False, False) == (tooltip, checkpoint[0]["overflows"], page_overflows)


@needs_chromium
@pytest.mark.parametrize("page", ["task", "index"])
def test_a_token_protected_page_opened_without_the_token_asks_for_it(
    token_server: ServerHandle, server_token: str, pool: urllib3.PoolManager, page: str
) -> None:
    """No "no metric series yet": the page asks for the token, and entering it shows the data."""
    write_demo_task(pool, token_server.url, server_token)
    path = f"/jobs/{JOB}/tasks/{TASK}" if page == "task" else "/"
    loaded = (
        "document.querySelector('.legend') !== null"
        if page == "task"
        else "document.querySelector('table.tasks') !== null"
    )

    with Browser() as browser:
        browser.open(token_server.url + path)
        browser.wait_for("document.querySelector('input[type=password]') !== null")
        asked = browser.evaluate("document.querySelector('main').innerText")
        browser.evaluate(
            f"document.querySelector('input[type=password]').value = {json.dumps(server_token)};"
            "document.querySelector('.token button').click()"
        )
        browser.wait_for(loaded)
        shown = browser.evaluate("[window.location.hash, document.querySelector('main').innerText]")

    assert "requires a token" in asked
    assert "no metric series yet" not in asked
    assert f"#token={server_token}" == shown[0]
    assert JOB in shown[1]


@needs_chromium
def test_a_page_with_a_wrong_token_says_the_token_was_refused(
    token_server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """A token in the fragment that the server refuses is named as refused, and asked again."""
    with Browser() as browser:
        browser.open(f"{token_server.url}/jobs/{JOB}/tasks/{TASK}#token=wrong")
        browser.wait_for("document.querySelector('input[type=password]') !== null")
        text = browser.evaluate("document.querySelector('main').innerText")

    assert "refused" in text
    assert "no metric series yet" not in text


_PAGE_SECRET = b"page-test-secret-0123456789abcdef0123"


@needs_chromium
def test_a_job_token_opens_its_task_page_and_its_job_in_the_list(
    start_server: Any, pool: urllib3.PoolManager
) -> None:
    """A job token (``trainreport token``) is enough for its own job's pages."""
    handle = start_server(token="admin-token", secret=_PAGE_SECRET)
    write_demo_task(pool, handle.url, "admin-token")
    token = issue_job_token(_PAGE_SECRET, JOB)

    with Browser() as browser:
        browser.open(f"{handle.url}/jobs/{JOB}/tasks/{TASK}#token={token}")
        browser.wait_for("document.querySelector('.legend') !== null")
        browser.open(f"{handle.url}/#token={token}")
        browser.wait_for("document.querySelector('table.tasks') !== null")
        listed = browser.evaluate("document.querySelector('main').innerText")

    assert JOB in listed


@needs_chromium
def test_a_job_token_for_another_job_asks_for_a_token(
    start_server: Any, pool: urllib3.PoolManager
) -> None:
    """A 403 (the token reads another job) asks for a token instead of an empty page."""
    handle = start_server(token="admin-token", secret=_PAGE_SECRET)
    write_demo_task(pool, handle.url, "admin-token")
    token = issue_job_token(_PAGE_SECRET, "some-other-job")

    with Browser() as browser:
        browser.open(f"{handle.url}/jobs/{JOB}/tasks/{TASK}#token={token}")
        browser.wait_for("document.querySelector('input[type=password]') !== null")
        text = browser.evaluate("document.querySelector('main').innerText")

    assert "another job" in text
    assert "no metric series yet" not in text


@needs_chromium
@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_finished_task_reads_done_with_no_eta_on_the_page_and_in_the_job_list(
    server: ServerHandle, pool: urllib3.PoolManager, status: str
) -> None:
    """A record written by an older client (phase checkpointing, ETA 0) reads as over."""
    _call(
        pool,
        f"{server.url}/v1/jobs/{JOB}/tasks/{TASK}",
        "PATCH",
        {
            "status": status,
            "status_details": {
                "phase": "checkpointing",
                "step": 10,
                "max_steps": 10,
                "eta_seconds": 0.0,
                "percentage_done": 100.0,
            },
        },
    )
    stat = (
        "(k) => Array.from(document.querySelectorAll('.stat')).find((s) => "
        "s.querySelector('.k').textContent === k).querySelector('.v').textContent"
    )

    with Browser() as browser:
        browser.open(f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        browser.wait_for("document.querySelector('.stat') !== null")
        phase, eta = browser.evaluate(f"[({stat})('phase'), ({stat})('eta')]")
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('table.tasks') !== null")
        row = browser.evaluate("document.querySelector('table.tasks tbody tr').innerText")

    assert ("done", "\N{EN DASH}") == (phase, eta)  # the page's "no value"
    assert "done" in row.split("\t")
    assert "checkpointing" not in row


@needs_chromium
def test_a_failed_run_shows_its_error_as_text_and_steps_with_thousands_separators(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """The error reads "type: message" near the top (no raw JSON, no markup run), and
    "100,000 / 100,000" on the task page and in the job list."""
    message = f"CUDA out of memory.\nTried to allocate 2.00 GiB {HOSTILE}"
    _call(
        pool,
        f"{server.url}/v1/jobs/{JOB}/tasks/{TASK}",
        "PATCH",
        {
            "status": "failed",
            "status_details": {
                "phase": "training",
                "step": 100_000,
                "max_steps": 100_000,
                "error": {"type": "OutOfMemoryError", "message": message},
            },
        },
    )
    stat = (
        "(k) => Array.from(document.querySelectorAll('.stat')).find((s) => "
        "s.querySelector('.k').textContent === k).querySelector('.v').textContent"
    )

    with Browser() as browser:
        browser.open(f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        browser.wait_for("document.querySelector('.stat') !== null")
        step = browser.evaluate(f"({stat})('step')")
        error = browser.evaluate(
            "(() => { const e = document.querySelector('.error');"
            " return e && [e.querySelector('.type').textContent,"
            " e.querySelector('pre').textContent]; })()"
        )
        main = browser.evaluate("document.querySelector('main').innerText")
        images = browser.evaluate("document.querySelectorAll('img').length")
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('table.tasks') !== null")
        row = browser.evaluate("document.querySelector('table.tasks tbody tr').innerText")
        cut = browser.evaluate(
            "(() => { const td = document.querySelector('table.tasks td.num');"
            " return td.scrollWidth > td.clientWidth; })()"
        )

    assert "100,000 / 100,000" == step
    assert not cut  # the whole step shows in the job list
    assert ["OutOfMemoryError", message] == error
    assert '"type"' not in main
    assert 0 == images  # the message is text, never markup
    assert "100,000 / 100,000" in row.split("\t")


@pytest.mark.timeout(300)
def test_a_spike_at_one_step_of_a_million_shows_at_every_zoom_level(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One point of 1,000,000 far above the rest survives every thinned read around it.

    The full range and ranges narrowing around the spike, each read at the
    page's screen resolution (1,000 points), keep the spike's step and value,
    and the narrowest range returns every one of its points. (SQLite only: the
    range is one ``WHERE`` on both backends, and the thinning is the server's.)
    """
    db = Database(tmp_path / "spike.db")
    request.addfinalizer(db.close)
    job = "spike"
    n, spike = 1_000_000, 612_345
    steps = list(range(1, n + 1))
    values = [1.0 + (i % 7) * 0.01 for i in range(n)]
    values[spike - 1] = 100.0
    generation = opened_writer(db, job, "t").generation
    update = TaskUpdate(
        writer_generation=generation,
        sequence=1,
        status="running",
        details={},
        series=(SeriesPoints("loss", 0, steps, [1] * n, values, [float(s) for s in steps]),),
    )
    stored = db.tasks.apply_update(job, "t", update, now="2026-03-01T12:00:00.000Z")
    assert isinstance(stored, Applied)
    # the whole series, then ranges 10 times narrower each, never centred on the spike
    zooms = [(None, None)] + [(spike - w // 3, spike + w - w // 3) for w in (10**5, 10**4, 10**3)]

    for low, high in [*zooms, (612_300, 612_400)]:
        columns = db.tasks.series_columns(job, "t", ["loss"], from_step=low, to_step=high)
        assert columns is not None
        shaped = shape_columns(columns, 1000)["loss"]
        assert len(shaped["steps"]) <= 1002, (low, high)
        kept = dict(zip(shaped["steps"], shaped["values"], strict=True))
        assert 100.0 == kept.get(spike), (low, high)
        assert float(spike) == shaped["times"][shaped["steps"].index(spike)]
        if low is not None and high is not None:
            assert (low, high) == (shaped["steps"][0], shaped["steps"][-1])
    assert list(range(612_300, 612_401)) == shaped["steps"]


# -- the chart controls, used like a person uses them ------------------------------------


def _writer(pool: urllib3.PoolManager, base: str, job: str, task: str) -> tuple[str, int]:
    url = f"{base}/v1/jobs/{job}/tasks/{task}"
    return url, int(_call(pool, url + "/writers", "POST", {})["writer_generation"])


def _send(
    pool: urllib3.PoolManager,
    writer: tuple[str, int],
    sequence: int,
    series: Mapping[str, tuple[int, Sequence[int], Sequence[float | None]]],
) -> None:
    """One series-suffix update: ``{name: (offset, steps, values)}``, epoch 1 + step // 100."""
    url, gen = writer
    body = {
        "writer_generation": gen,
        "sequence": sequence,
        "status": "running",
        "status_details": {"phase": "training"},
        "series": {
            name: {"offset": o, "steps": s, "epochs": [1 + x // 100 for x in s], "values": v}
            for name, (o, s, v) in series.items()
        },
    }
    _call(pool, url + "/updates", "POST", body)


def _requests(browser: Browser) -> list[str]:
    """Every ``/series`` URL the page asks for from now on (decoded query)."""
    seen: list[str] = []
    browser.page.on(
        "request",
        lambda r: seen.append(urllib.parse.unquote(r.url)) if "/series?" in r.url else None,
    )
    return seen


def _drag(browser: Browser, title: str, start: float, end: float) -> None:
    """Press, move and release the mouse across the chart, from ``start`` to ``end``
    (fractions of the plot's width), like a person zooming."""
    over = browser.page.locator(f'.chart[data-title="{title}"] .u-over')
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    browser.page.mouse.move(box["x"] + box["width"] * start, y)
    browser.page.mouse.down()
    browser.page.mouse.move(box["x"] + box["width"] * (start + end) / 2, y, steps=4)
    browser.page.mouse.move(box["x"] + box["width"] * end, y, steps=4)
    browser.page.mouse.up()


def _query(browser: Browser) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(browser.page.url).query)


@needs_chromium
def test_dragging_zooms_and_rereads_the_range_and_a_double_click_resets(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """A drag over the loss chart asks the server for that step range at the chart's width
    in pixels; the URL holds the zoom; a double-click reads the whole curve again."""
    write_demo_task(pool, server.url)

    with Browser() as browser:
        seen = _requests(browser)
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        width = browser.evaluate("document.querySelector('.chart .plot').clientWidth")
        _drag(browser, "loss", 0.25, 0.5)
        browser.wait_for("window.trainreportPage.view().from !== null")
        zoom = browser.evaluate("window.trainreportPage.view()")
        browser.wait_for(f"{CHARTS}.every((c) => !c.built || c.x[1] <= {zoom['to']})")
        zoomed = _chart(browser, "loss")
        query = _query(browser)
        reread = [u for u in seen if f"from={zoom['from']}" in u]
        browser.page.locator('.chart[data-title="loss"] .u-over').dblclick()
        browser.wait_for("window.trainreportPage.view().from === null")
        browser.wait_for(f"{CHARTS}.find((c) => c.title === 'loss').x[1] >= 600")
        reset = _query(browser)
        enabled = browser.evaluate("document.getElementById('resetzoom').disabled")

    assert 100 < zoom["from"] < zoom["to"] < 400
    assert [str(zoom["from"])] == query["from"]
    assert [str(zoom["to"])] == query["to"]
    assert reread, seen
    assert all(f"to={zoom['to']}" in u and f"max_points={width}" in u for u in reread)
    assert [zoom["from"], zoom["to"]] == zoomed["x"]
    assert all(zoom["from"] <= s <= zoom["to"] for line in zoomed["lines"] for s in line["steps"])
    assert "from" not in reset
    assert enabled  # "reset zoom" is off again


@needs_chromium
def test_the_smoothing_slider_applies_the_debiased_ema_to_every_chart(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """TensorBoard's smoothing, weight 0.6 by default: a NaN point stays a gap and does
    not advance the average; the slider moved to 0 (Home key) shows the raw values."""
    writer = _writer(pool, server.url, JOB, TASK)
    values: list[float | None] = [1.0, 3.0, None, 2.0, 5.0, 4.0]
    _send(pool, writer, 1, {"train_acc": (0, [1, 2, 3, 4, 5, 6], values), "b": (0, [1], [7.0])})

    def ema(weight: float) -> list[float | None]:
        out: list[float | None] = []
        last, count = 0.0, 0
        for v in values:
            if v is None:
                out.append(None)
                continue
            last, count = last * weight + (1 - weight) * v, count + 1
            out.append(last / (1 - weight**count))
        return out

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=2)
        default = _chart(browser, "train_acc")["lines"][0]
        slider = browser.page.get_by_label("smoothing (exponential moving average weight)")
        slider.focus()
        browser.page.keyboard.press("Home")
        browser.wait_for("window.trainreportPage.view().smoothing === 0")
        browser.wait_for(f"{CHARTS}[0].lines[0].smoothed[1] === 3")
        raw = _chart(browser, "train_acc")["lines"][0]
        query = _query(browser)

    assert values == default["ys"]
    assert ema(0.6) == pytest.approx(default["smoothed"])
    assert values == raw["smoothed"]
    assert ["0"] == query["smoothing"]


@needs_chromium
def test_search_filters_charts_and_sections_collapse(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """Typing in the search box keeps the charts whose title or series match (text or
    /regex/); a closed section stays closed after a reload (the URL holds it)."""
    write_demo_task(pool, server.url)
    shown = f"{CHARTS}.filter((c) => !c.hidden).map((c) => c.title).sort()"

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        sections = browser.evaluate(
            "Array.from(document.querySelectorAll('details.section')).map((d) => d.dataset.section)"
        )
        search = browser.page.get_by_label("search metrics: text, or a /regular expression/")
        search.press_sequentially("GRAD")
        by_text = browser.wait_for(f"{shown}.length === 1 && {shown}")
        search.fill("")
        search.press_sequentially("/^val_/")
        by_regex = browser.wait_for(f"{shown}.length === 1 && {shown}")
        search.fill("")
        browser.page.locator('details[data-section="train"] > summary').click()
        hidden = browser.evaluate(
            "document.querySelector('.chart[data-title=\"train_lr\"]').checkVisibility()"
        )
        # A <details> fires its "toggle" event in a later task, and the page writes the
        # URL from it: reloading before then would reload the old URL.
        browser.wait_for("new URLSearchParams(location.search).getAll('closed').includes('train')")
        browser.page.reload()
        browser.wait_for("document.querySelector('details[data-section=\"train\"]') !== null")
        still_closed = browser.evaluate(
            "!document.querySelector('details[data-section=\"train\"]').open"
        )

    assert ["loss", "train"] == sections
    assert ["train_grad_norm"] == by_text
    assert ["loss"] == by_regex  # val_loss is drawn on the loss chart
    assert (False, True) == (hidden, still_closed)


@needs_chromium
def test_log_y_and_outlier_toggles_change_the_scale_and_the_url(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """ "log y" gives the chart a logarithmic scale; "ignore outliers" (on for train_
    series) cuts a spike out of the y range, and off shows it."""
    writer = _writer(pool, server.url, JOB, TASK)
    steps = list(range(1, 201))
    values: list[float | None] = [1.0 + (s % 10) / 10 for s in steps]
    values[100] = 1000.0
    _send(pool, writer, 1, {"train_spiky": (0, steps, values)})

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=1)
        cut = _chart(browser, "train_spiky")["y"]
        browser.page.get_by_label("ignore outliers for train_spiky").click()
        browser.wait_for(f"{CHARTS}[0].y[1] >= 1000")
        whole = _chart(browser, "train_spiky")["y"]
        browser.page.get_by_label("log y axis for train_spiky").click()
        browser.wait_for(f"{CHARTS}[0].logy")
        pressed = browser.page.get_by_label("log y axis for train_spiky").get_attribute(
            "aria-pressed"
        )
        query = _query(browser)

    assert cut[1] < 10 < 1000 <= whole[1]
    assert "true" == pressed
    assert (["train_spiky"], ["train_spiky:all"]) == (query["logy"], query["yrange"])


@needs_chromium
def test_hovering_shows_the_nearest_value_of_every_line(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """The tooltip names the step and each line's value there (smoothed, then raw)."""
    write_demo_task(pool, server.url)

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        box = browser.page.locator('.chart[data-title="loss"] .u-over').bounding_box()
        assert box is not None
        browser.page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 40, steps=3)
        browser.wait_for("document.querySelector('.chart .tip').style.display === 'block'")
        text = browser.page.locator('.chart[data-title="loss"] .tip').inner_text()

    assert re.search(r"^step \d+", text)
    assert re.search(r"train_loss: [\d.]+ \([\d.]+\)", text)
    assert re.search(r"val_loss: [\d.]+ \([\d.]+\)", text)


@needs_chromium
def test_export_downloads_the_full_resolution_points_of_the_range_shown(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """CSV and JSON come from the server at full resolution (max_points=0) for the zoomed
    range; PNG is the chart as drawn."""
    write_demo_task(pool, server.url)

    with Browser(downloads=True) as browser:
        seen = _requests(browser)
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        _drag(browser, "train_lr", 0.3, 0.6)
        browser.wait_for("window.trainreportPage.view().from !== null")
        zoom = browser.evaluate("window.trainreportPage.view()")
        files = {}
        for kind in ("CSV", "JSON", "PNG"):
            with browser.page.expect_download() as download:
                browser.page.get_by_label(f"export train_lr as {kind}").click()
            path = download.value.path()
            files[kind] = (download.value.suggested_filename, Path(path).read_bytes())

    rows = files["CSV"][1].decode().splitlines()
    body = json.loads(files["JSON"][1])
    steps = list(range(zoom["from"], zoom["to"] + 1))
    assert "job_id,task_id,series,step,epoch,time,value" == rows[0]
    assert steps == [int(r.split(",")[3]) for r in rows[1:]]
    assert {f"{JOB},{TASK},train_lr"} == {r.rsplit(",", 4)[0] for r in rows[1:]}
    assert steps == body["runs"][0]["series"]["train_lr"]["steps"]
    assert (zoom["from"], zoom["to"]) == (body["from"], body["to"])
    assert any("max_points=0" in u and f"from={zoom['from']}" in u for u in seen)
    assert files["PNG"][1].startswith(b"\x89PNG")
    assert _near(_colours(files["PNG"][1]), (0x25, 0x63, 0xEB)) > 200
    assert ("train-train_lr.csv", "train-train_lr.png") == (files["CSV"][0], files["PNG"][0])


@needs_chromium
def test_two_runs_picked_in_the_job_list_are_overlaid_one_colour_each(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """Ticking two tasks and pressing "Compare selected" opens one page with both runs'
    curves on each chart, a colour per run, and the selection in the URL."""
    write_demo_task(pool, server.url)
    writer = _writer(pool, server.url, "sweep-7", "trial-3")
    steps = list(range(1, 301))
    _send(
        pool,
        writer,
        1,
        {
            "train_loss": (0, steps, [3.0 / (1 + s / 50) for s in steps]),
            "train_lr": (0, steps, [1e-4] * 300),
        },
    )

    with Browser() as browser:
        browser.open(server.url + "/")
        browser.wait_for("document.querySelectorAll('input.pick').length >= 3")
        browser.page.get_by_label(f"compare {JOB}/{TASK}").check()
        browser.page.get_by_label("compare sweep-7/trial-3").check()
        browser.page.get_by_role("button", name="Compare selected").click()
        browser.wait_for(f"window.trainreportPage && {BUILT} >= 3")
        browser.wait_for(f"{CHARTS}.find((c) => c.title === 'train_lr').lines.length === 2")
        loss = _chart(browser, "loss")
        lr = _chart(browser, "train_lr")
        query = _query(browser)
        legend = browser.page.locator('.chart[data-title="train_lr"] .legend').inner_text()
        _save(browser, "compare.png")

    runs = {line["label"].split(" · ")[0] for line in loss["lines"]}
    assert {f"{JOB}/{TASK}", "sweep-7/trial-3"} == runs
    assert 2 == len({line["color"] for line in lr["lines"]})
    assert ["sweep-7/trial-3"] == query["run"]
    assert "sweep-7/trial-3 · train_lr" in legend


@needs_chromium
def test_live_refresh_appends_only_the_new_points_and_keeps_the_zoom(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """New points arrive with ``after=<length>`` and are appended; a zoomed view stays."""
    writer = _writer(pool, server.url, JOB, TASK)
    steps = list(range(1, 101))
    _send(pool, writer, 1, {"train_acc": (0, steps, [s / 100 for s in steps])})

    with Browser() as browser:
        seen = _requests(browser)
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=1)
        more = list(range(101, 151))
        _send(pool, writer, 2, {"train_acc": (100, more, [s / 100 for s in more])})
        browser.wait_for(f"{CHARTS}[0].lines[0].steps.length === 150")
        appended = [u for u in seen if "after=100" in u]
        _drag(browser, "train_acc", 0.2, 0.4)
        browser.wait_for("window.trainreportPage.view().from !== null")
        # the zoom's re-read lands after the view changes: wait until the chart shows it
        browser.wait_for(f"{CHARTS}.find((c) => c.title === 'train_acc').x[0] > 1")
        zoomed = _chart(browser, "train_acc")["x"]
        last = list(range(151, 171))
        _send(pool, writer, 3, {"train_acc": (150, last, [s / 100 for s in last])})
        browser.wait_for("document.querySelector('#live').textContent.includes('live')")
        browser.page.wait_for_timeout(2500)  # one more refresh of the page's own 2 s poll
        kept = _chart(browser, "train_acc")["x"]

    assert appended, seen
    assert zoomed == kept


@needs_chromium
def test_a_thousand_metrics_draw_only_the_charts_in_view(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """1,000 series: every chart has its card and section, few are drawn until scrolled to."""
    writer = _writer(pool, server.url, JOB, TASK)
    steps = list(range(1, 51))
    series = {
        f"layer{i // 10:02d}/grad_{i % 10}": (0, steps, [float(i + s) for s in steps])
        for i in range(1000)
    }
    _send(pool, writer, 1, series)

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=1)
        first = browser.evaluate(f"[{CHARTS}.length, {BUILT}]")
        browser.page.locator('.chart[data-title="layer99/grad_9"]').scroll_into_view_if_needed()
        browser.wait_for(f"{CHARTS}.find((c) => c.title === 'layer99/grad_9').built")
        sections = browser.evaluate("document.querySelectorAll('details.section').length")

    assert 1000 == first[0]
    assert first[1] < 40
    assert 100 == sections


@needs_chromium
def test_the_page_lists_series_with_the_summary_and_reads_points_only_of_charts_drawn(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """The first read is ``/series/summary`` (names, lengths: no points); point columns are
    asked for by name, only for the charts in view, never for every series at once."""
    writer = _writer(pool, server.url, JOB, TASK)
    steps = list(range(1, 51))
    series = {f"layer{i // 10:02d}/grad_{i % 10}": (0, steps, [1.0] * 50) for i in range(300)}
    _send(pool, writer, 1, series)
    seen: list[str] = []

    with Browser() as browser:
        browser.page.on(
            "request",
            lambda r: seen.append(urllib.parse.unquote(r.url)) if "/series" in r.url else None,
        )
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=1)
        built = browser.evaluate(f"{CHARTS}.filter((c) => c.built).map((c) => c.title)")
        listed = browser.evaluate(f"{CHARTS}.length")

    summary = [u for u in seen if urllib.parse.urlsplit(u).path.endswith("/series/summary")]
    points = [u for u in seen if urllib.parse.urlsplit(u).path.endswith("/series")]
    queries = [urllib.parse.parse_qs(urllib.parse.urlsplit(u).query) for u in points]
    asked = {n for q in queries for n in q.get("name", [])}
    assert summary, seen
    assert 300 == listed
    assert all("name=" in u for u in points), points  # never every series' points
    assert set(built) <= asked
    assert len(asked) < 100  # the charts in view (and just below it), not all 300


@needs_chromium
def test_names_and_values_that_look_like_markup_stay_text(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """Series named ``<script>`` and ``<img onerror>`` are drawn and shown as text; no
    script runs (no dialog), no element is made from them."""
    writer = _writer(pool, server.url, JOB, TASK)
    names = ["<script>alert(1)</script>", HOSTILE]
    _send(pool, writer, 1, {name: (0, [1, 2, 3], [1.0, 2.0, 3.0]) for name in names})
    dialogs: list[str] = []

    with Browser(downloads=True) as browser:

        def dismiss(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        browser.page.on("dialog", dismiss)
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=2)
        titles = browser.evaluate(
            "Array.from(document.querySelectorAll('.chart h2')).map((h) => h.textContent)"
        )
        counts = browser.evaluate(
            "[document.querySelectorAll('img').length, document.querySelectorAll('script').length]"
        )
        with browser.page.expect_download() as download:
            browser.page.get_by_label(f"export {names[0]} as CSV").click()
        csv = Path(download.value.path()).read_text()

    assert sorted(names) == sorted(titles)
    assert ([], [0, 2]) == (dialogs, counts)  # the page's two scripts only
    assert f"{JOB},{TASK},<script>alert(1)</script>,1,1,,1" == csv.splitlines()[1]


@needs_chromium
def test_the_x_axis_offers_times_only_when_the_server_sends_them_and_dark_follows_the_system(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """Points stored without times: relative and wall time cannot be chosen, step and
    epoch can. A system in dark mode gets the dark page."""
    write_demo_task(pool, server.url)

    with Browser(dark=True) as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}")
        options = browser.evaluate(
            "Array.from(document.querySelectorAll('#xmode option'))"
            ".map((o) => [o.value, o.disabled])"
        )
        browser.page.get_by_label("x axis", exact=True).select_option("epoch")
        browser.wait_for(f"{CHARTS}.find((c) => c.title === 'train_lr').x[1] < 10")
        epochs = _chart(browser, "train_lr")["lines"][0]["xs"]
        background = browser.evaluate("getComputedStyle(document.documentElement).backgroundColor")

    assert [["step", False], ["epoch", False], ["relative", True], ["wall", True]] == options
    assert 1.0 == epochs[0]
    assert 3 < epochs[-1] < 4
    assert epochs == sorted(epochs)
    assert "rgb(15, 20, 26)" == background


# -- what needs the /series API of issue 24 (times, from/to, after) ------------------------


def _needs_series_api(pool: urllib3.PoolManager, url: str) -> None:
    """Skip unless ``/series`` answers with ``first_index`` (issue 24's from/to/after/times)."""
    body = json.loads(pool.request("GET", url + "/series?max_points=4").data)
    if not all("first_index" in entry for entry in body["series"].values()):
        pytest.skip("this server's /series has no from/to/after/times yet (issue 24, data part)")


@needs_chromium
def test_a_narrow_zoom_into_a_long_series_shows_every_point_and_the_spike_everywhere(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """200,000 points with a spike at one step: visible zoomed out (thinning keeps it) and
    in a 300-step zoom around it, where every point of the range is drawn (from/to)."""
    writer = _writer(pool, server.url, JOB, TASK)
    n, spike = 200_000, 123_457
    steps = list(range(1, n + 1))
    values: list[float | None] = [1.0 + (s % 17) / 100 for s in steps]
    values[spike - 1] = 50.0
    for k, start in enumerate(range(0, n, 50_000)):
        part = slice(start, start + 50_000)
        _send(pool, writer, k + 1, {"val_long": (start, steps[part], values[part])})
    _needs_series_api(pool, f"{server.url}/v1/jobs/{JOB}/tasks/{TASK}")

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=1)
        whole = _chart(browser, "val_long")["lines"][0]
        browser.open(f"{server.url}/jobs/{JOB}/tasks/{TASK}?from={spike - 150}&to={spike + 150}")
        browser.wait_for(f"{BUILT} && {CHARTS}[0].lines[0].steps[0] === {spike - 150}")
        narrow = _chart(browser, "val_long")["lines"][0]

    assert 50.0 == max(y for y in whole["ys"] if y is not None)
    assert len(whole["steps"]) < 2000
    assert list(range(spike - 150, spike + 151)) == narrow["steps"]
    assert 50.0 == max(y for y in narrow["ys"] if y is not None)


@needs_chromium
def test_relative_and_wall_time_use_the_times_of_the_points(
    server: ServerHandle, pool: urllib3.PoolManager, tmp_path: Path
) -> None:
    """A run reported by the library has a time per point: the x axis can then be the
    time since the run's first point, or the wall clock."""
    reporter = Reporter(HttpSink(server.url, JOB, TASK), rank=0).start()
    for step in range(1, 41):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
    assert reporter.close(20.0)
    _needs_series_api(pool, f"{server.url}/v1/jobs/{JOB}/tasks/{TASK}")

    with Browser() as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=1)
        browser.page.get_by_label("x axis", exact=True).select_option("relative")
        browser.wait_for(f"{CHARTS}[0].x[1] < 1000")
        relative = _chart(browser, "loss")["lines"][0]["xs"]
        browser.page.get_by_label("x axis", exact=True).select_option("wall")
        browser.wait_for(f"{CHARTS}[0].x[0] > 1e9")
        wall = _chart(browser, "loss")["lines"][0]["xs"]
        query = _query(browser)

    assert 0.0 == relative[0]
    assert relative == sorted(relative)
    assert wall[0] > 1.7e9
    assert ["wall"] == query["x"]


@needs_chromium
def test_a_thirty_metric_run_is_grouped_into_sections_by_prefix(
    server: ServerHandle, pool: urllib3.PoolManager
) -> None:
    """train_, val_, system_ and a ``/`` path each get a section, in that order."""
    writer = _writer(pool, server.url, JOB, TASK)
    steps = list(range(1, 401))
    names = (
        ["train_loss", "val_loss", "train_lr", "train_grad_norm", "train_tokens_per_second"]
        + ["val_accuracy", "val_perplexity", "system_gpu_memory_gib", "system_gpu_utilization"]
        + [f"layer{i:02d}/grad_norm" for i in range(12)]
        + [f"layer{i:02d}/weight_norm" for i in range(9)]
    )
    series = {
        name: (
            0,
            steps,
            [
                1 + k / 10 + math.exp(-s / (60 + 9 * k)) + 0.03 * math.sin(s * (k + 1))
                for s in steps
            ],
        )
        for k, name in enumerate(names)
    }
    _send(pool, writer, 1, series)

    with Browser(height=1100) as browser:
        _open_task(browser, f"{server.url}/jobs/{JOB}/tasks/{TASK}", charts=4)
        sections = browser.evaluate(
            "Array.from(document.querySelectorAll('details.section')).map((d) => "
            "[d.dataset.section, d.querySelectorAll('.chart').length])"
        )
        _save(browser, "many-metrics.png", full_page_clip=1100)

    assert 30 == len(names)
    assert [["loss", 1], ["train", 3], ["val", 2], ["layer00", 2]] == sections[:4]
    assert ["system", 2] == sections[-1]
