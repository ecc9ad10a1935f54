"""``trainreport demo`` and ``trainreport show`` run for real, as a newcomer runs them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import urllib3

from trainreport import HttpSink, Reporter
from trainreport.cli._summary import sparkline

pytestmark = pytest.mark.timeout(180)


def test_demo_trains_reports_and_prints_a_complete_summary(tmp_path: Path) -> None:
    """The demo exits 0 and every training series holds one point per step."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainreport.cli", "demo", "--steps", "60", "--job-id", "t1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    out = proc.stdout
    assert "job t1: completed after 60 of 60 steps" in out
    assert "everything delivered: yes" in out
    counts = dict(re.findall(r"^\s+(train_\w+)\s+(\d+)\s", out, flags=re.M))
    assert {"train_loss", "train_accuracy", "train_lr", "train_grad_norm"} == set(counts)
    assert {"60"} == set(counts.values())
    assert re.search(r"^\s+val_loss\s+\d+\s", out, flags=re.M)
    assert "p50" in out
    # the embedded server has stopped: no URL is offered as if it still answered
    assert "trainreport serve --db trainreport-runs/trainreport.db" in out
    assert "--keep-serving" in out.strip().splitlines()[-2]
    assert not re.search(r"chart page: http://127\.0\.0\.1:\d+/jobs", out)
    assert "phase done" in out  # the run is over: not "phase checkpointing"
    assert "ETA" not in out
    assert (tmp_path / "trainreport-runs" / "t1" / "checkpoints" / "epoch-3.npz").exists()


def test_demo_keep_serving_keeps_the_chart_page_up_until_ctrl_c(tmp_path: Path) -> None:
    """With --keep-serving the printed chart page answers, and Ctrl-C ends the demo cleanly."""
    command = [sys.executable, "-u", "-m", "trainreport.cli", "demo", "--steps", "30"]
    with subprocess.Popen(
        [*command, "--job-id", "t2", "--keep-serving"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:  # bounded by the module's pytest timeout
                lines.append(line)
                if "until Ctrl-C" in line:
                    break
            match = re.search(r"chart page: (http://\S+/jobs/t2/tasks/train)", lines[-1])
            assert match is not None, "".join(lines)
            page = urllib3.request("GET", match.group(1), timeout=10.0, retries=False)
            base = match.group(1).split("/jobs/")[0]
            task = urllib3.request("GET", base + "/v1/jobs/t2/tasks/train", timeout=10.0)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)

    assert (200, "text/html") == (page.status, page.headers["content-type"].split(";")[0])
    assert "completed" == json.loads(task.data)["status"]
    assert 0 == code


def test_show_prints_a_file_sink_task(tmp_path: Path) -> None:
    """``trainreport show --file`` summarises a FileSink record."""
    task = {
        "status": "running",
        "status_details": {
            "step": 2,
            "metrics": {
                "train_loss": [
                    {"step": 1, "epoch": 1, "value": 2.0},
                    {"step": 2, "epoch": 1, "value": 1.0},
                ]
            },
        },
    }
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))
    proc = subprocess.run(
        [sys.executable, "-m", "trainreport.cli", "show", "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert re.search(r"train_loss\s+2\s+1\b", proc.stdout)
    assert "status running" in proc.stdout


def test_sparkline_scales_between_min_and_max_and_leaves_gaps() -> None:
    """Lowest value is the lowest bar, highest the highest, None a space."""
    assert "▁█ ▁" == sparkline([0.0, 1.0, None, 0.0])
    assert "" == sparkline([None])
    assert 10 == len(sparkline(list(range(100)), width=10))


def test_show_prints_a_task_from_the_server_and_fails_cleanly_on_404(server: Any) -> None:
    """``trainreport show --url URL JOB`` reads the real server; an unknown job exits 1."""
    reporter = Reporter(HttpSink(server.url, "j1"), rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=10)
    cli = [sys.executable, "-m", "trainreport.cli", "show", "--url", server.url]
    found = subprocess.run([*cli, "j1"], capture_output=True, text=True, timeout=60, check=True)
    assert re.search(r"train_loss\s+1\s+1\b", found.stdout)
    missing = subprocess.run(
        [*cli, "nope"], capture_output=True, text=True, timeout=60, check=False
    )
    assert 1 == missing.returncode
    assert "no job 'nope'" in missing.stderr


# -- demo --url: the service is checked before training ---------------------------------


def run_demo_cli(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``trainreport demo --job-id d1 ARGS`` in ``tmp_path``, environment without TRAINREPORT_*."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRAINREPORT_")}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "trainreport.cli", "demo", "--steps", "5", "--job-id", "d1", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
        env=clean,
    )


def assert_refused_before_training(proc: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    """Exit 2, one line on stderr, no traceback, nothing trained (no checkpoint written)."""
    assert 2 == proc.returncode, proc.stderr
    assert 1 == len(proc.stderr.strip().splitlines()), proc.stderr
    assert proc.stderr.startswith("trainreport demo: ")
    assert "Traceback" not in proc.stderr
    assert "completed after" not in proc.stdout
    assert not (tmp_path / "trainreport-runs" / "d1").exists()


@pytest.mark.parametrize(
    ("env", "says"),
    [({"TRAINREPORT_TOKEN": "wrong-token"}, "refused the token"), ({}, "requires a token")],
)
def test_demo_url_with_a_refused_or_missing_token_exits_2_before_training(
    token_server: Any, tmp_path: Path, env: dict[str, str], says: str
) -> None:
    """A token the server refuses (or none) is one line naming how to pass it; nothing trains."""
    proc = run_demo_cli(tmp_path, "--url", token_server.url, env=env)

    assert_refused_before_training(proc, tmp_path)
    assert says in proc.stderr
    assert "TRAINREPORT_TOKEN" in proc.stderr
    assert "wrong-token" not in proc.stderr


def test_demo_of_an_unreachable_url_exits_2_before_training(tmp_path: Path) -> None:
    """Nothing listening: one line naming the URL and why, and what to do; nothing trains."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        proc = run_demo_cli(tmp_path, "--url", url)

    assert_refused_before_training(proc, tmp_path)
    assert f"cannot reach {url}: connection refused" in proc.stderr
    assert "trainreport serve" in proc.stderr


@pytest.mark.parametrize(
    ("shape", "says"),
    [
        ("no scheme", "not an http:// or https:// URL"),
        ("a path that is no service", "not a trainreport job-status service"),
    ],
)
def test_demo_url_that_is_not_a_service_exits_2_before_training(
    server: Any, tmp_path: Path, shape: str, says: str
) -> None:
    """A URL without its scheme, or one whose path is not the service's: one line, nothing
    trains (it trained the whole demo, then failed to read the task back)."""
    url = server.url.removeprefix("http://") if shape == "no scheme" else server.url + "/nonsense"
    proc = run_demo_cli(tmp_path, "--url", url)

    assert_refused_before_training(proc, tmp_path)
    assert says in proc.stderr


def test_demo_url_with_the_token_in_a_file_trains_and_reports(
    token_server: Any, server_token: str, tmp_path: Path
) -> None:
    """The check lets a good token through: --token-file works as for show and sync."""
    token_file = tmp_path / "token"
    token_file.write_text(server_token + "\n")

    proc = run_demo_cli(tmp_path, "--url", token_server.url, "--token-file", str(token_file))

    assert 0 == proc.returncode, proc.stderr
    assert "job d1: completed after 5 of 5 steps" in proc.stdout
    assert f"chart page: {token_server.url}/jobs/d1/tasks/train" in proc.stdout


def test_demo_whose_final_read_fails_prints_one_line_and_stops_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The read after training failing is one line and exit 1, not a traceback."""
    from trainreport import UnreachableError, client  # noqa: PLC0415
    from trainreport.cli import main  # noqa: PLC0415

    asked: list[str] = []

    def read_task(url: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        asked.append(url)
        message = f"reading task 'train' of job 'd1' at {url}: cannot reach it"
        raise UnreachableError(message, url=url) from ConnectionResetError(104, "Connection reset")

    monkeypatch.setattr(client, "read_task", read_task)  # the module _demo reads through
    monkeypatch.chdir(tmp_path)

    code = main(["demo", "--steps", "3", "--job-id", "d1", "--interval", "0.05"])
    err = capsys.readouterr().err

    assert 1 == code
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"trainreport demo: cannot reach {asked[0]}: connection reset; ")
    with pytest.raises(urllib3.exceptions.HTTPError):  # the embedded server was stopped
        urllib3.request("GET", asked[0] + "/v1/jobs", retries=False, timeout=5.0)


def test_sparkline_of_a_long_flat_series_shows_its_one_point_spike() -> None:
    """10,000 points at 1.0 with one of 100: the character of its bucket is the full bar."""
    values: list[float | None] = [1.0] * 10_000
    values[5001] = 100.0

    chart = sparkline(values)

    assert 48 == len(chart)
    assert 1 == chart.count("█")
    assert {"▁", "█"} == set(chart)


def test_sparkline_of_a_long_flat_series_shows_its_one_point_dip() -> None:
    """The minimum counts too: one point of 0 among 10,000 at 1.0 is the lowest bar."""
    values: list[float | None] = [1.0] * 10_000
    values[7777] = 0.0

    chart = sparkline(values)

    assert 1 == chart.count("▁")
    assert {"▁", "█"} == set(chart)


def test_sparkline_buckets_leave_a_gap_only_where_nothing_is_finite() -> None:
    """A bucket of non-finite points is a space; one finite point is enough to draw it."""
    values: list[float | None] = [1.0] * 100 + [None] * 100 + [2.0] * 100
    values[150] = float("nan")
    values[250] = None

    chart = sparkline(values, width=3)

    assert "▁ █" == chart
