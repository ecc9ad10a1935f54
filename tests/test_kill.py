"""kill -9 at a random moment: after recovery, every point recorded an interval before is kept.

A child process (``tests/kill_child.py``) runs a training loop and writes the
wall time of every report call to a side file; the test kills it with
SIGKILL at a random moment, then recovers:

- through the journal in front of a real reference server (both wire modes:
  the series-suffix extension and the full-state baseline a plain job API
  speaks), with the service up during the run and with it down (a closed
  port, the server started only for recovery); recovery by restarting a
  process on the same job and task, or by ``trainreport sync`` of the journal;
- through the embedded default's run log (``FileSink``): ``read_task`` of the
  log after the kill.

Every point recorded at least ``journal_interval_seconds`` (plus
:data:`SLACK_SECONDS` for the reporter thread to be scheduled on a loaded
machine) before the kill must be stored, each exactly once, with the value
the child reported. CI runs :data:`KILLS` kills per combination with short
intervals; ``TRAINREPORT_KILLS=20`` runs 20 (docs/engine.md, "The journal in
front of a service", has the command and the figures).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3

from faults import FaultProxy, closed_port
from kill_child import METRICS, value_of
from trainreport import read_task
from trainreport.server import ServerHandle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: Kills per combination: a few in CI; ``TRAINREPORT_KILLS=20`` for the documented run.
KILLS = int(os.environ.get("TRAINREPORT_KILLS", "2"))
#: Kills per case of a hanging service (one in CI: each waits out a hang).
HANG_KILLS = max(1, KILLS // 2)
#: The journal interval the children use (seconds).
INTERVAL = 0.25
#: Time for the reporter thread to be scheduled and write, on top of the interval (seconds).
SLACK_SECONDS = 0.25
#: Steps an earlier attempt stored before the killed one started with the service down.
PRIOR = 40
CHILD = Path(__file__).with_name("kill_child.py")
ROOT = Path(__file__).resolve().parents[1]
FIGURES: list[dict[str, Any]] = []


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINREPORT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    return env


def _spawn(spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start the child; its stderr goes to ``<side>.err`` (read by :func:`_errors`)."""
    with open(f"{spec['side']}.err", "ab") as err:
        return subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(spec)], env=_env(), stderr=err
        )


def _errors(spec: dict[str, Any]) -> str:
    return Path(f"{spec['side']}.err").read_text(errors="replace")[-3000:]


def _run_and_kill(
    spec: dict[str, Any],
    rng: random.Random,
    *,
    hang: FaultProxy | None = None,
    hang_for: tuple[float, float] = (0.3, 2.5),
) -> tuple[float, list[tuple[int, float]]]:
    """Start the child, kill it at a random moment after its first report.

    Args:
        spec: the child's spec.
        rng: draws the moments.
        hang: a proxy the child talks through, switched to hang (accept and
            never answer) 0.5-1 s after the first report; ``None``: none.
        hang_for: the range the kill's delay is drawn from (seconds after the
            first report, or after the hang began).

    Returns:
        the kill's wall time and ``(step, wall time)`` of every report.
    """
    side = Path(spec["side"])
    child = _spawn(spec)
    deadline = time.monotonic() + 30
    while not (side.exists() and side.stat().st_size) and time.monotonic() < deadline:
        assert child.poll() is None, _errors(spec)
        time.sleep(0.01)
    if hang is not None:
        time.sleep(rng.uniform(0.5, 1.0))
        hang.hang(60.0)
    time.sleep(rng.uniform(*hang_for))
    kill_time = time.time()
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    reports = []
    for line in side.read_text().splitlines():
        step, at = line.split()
        reports.append((int(step), float(at)))
    return kill_time, reports


def _check(
    task: dict[str, Any] | None, kill_time: float, reports: list[tuple[int, float]], label: str
) -> dict[str, Any]:
    """Every point of ``reports`` recorded a window before ``kill_time`` is in ``task``, once."""
    assert task is not None, label
    metrics = task["status_details"].get("metrics", {})
    window = INTERVAL + SLACK_SECONDS
    expected = [step for step, at in reports if at <= kill_time - window]
    strict = [step for step, at in reports if at <= kill_time - INTERVAL]
    figures: dict[str, Any] = {"label": label, "expected": len(expected) * len(METRICS)}
    lost = duplicates = lost_strict = wrong = 0
    for name in METRICS:
        points = metrics.get(f"train_{name}", [])
        counts = Counter(p["step"] for p in points)
        duplicates += sum(n - 1 for n in counts.values() if n > 1)
        lost += sum(1 for step in expected if step not in counts)
        lost_strict += sum(1 for step in strict if step not in counts)
        wrong += sum(1 for p in points if p["value"] != value_of(p["step"], name))
        steps = [p["step"] for p in points]
        assert steps == sorted(steps), label
    figures.update(lost=lost, lost_strict=lost_strict, duplicates=duplicates)
    FIGURES.append(figures)
    assert (0, 0, 0) == (lost, duplicates, wrong), figures
    return figures


def _stored(url: str, job: str) -> Any:
    answer = urllib3.request("GET", f"{url}/v1/jobs/{job}/tasks/train", timeout=10.0)
    return json.loads(answer.data) if answer.status == 200 else None


def _sync(journal: Path, url: str, extension: bool) -> None:
    args = [sys.executable, "-m", "trainreport.cli", "sync", str(journal), "--url", url]
    if not extension:
        args.append("--full-state")
    done = subprocess.run(args, env=_env(), capture_output=True, timeout=60, check=False)
    assert 0 == done.returncode, done.stderr.decode()


@pytest.mark.parametrize("extension", [True, False], ids=["extension", "full-state"])
@pytest.mark.parametrize("service", ["up", "down"])
def test_a_killed_run_loses_nothing_recorded_a_journal_interval_before_the_kill(
    extension: bool,
    service: str,
    start_server: Callable[..., ServerHandle],
    tmp_path: Path,
) -> None:
    """kill -9, then recovery (restart or trainreport sync): every point is stored once."""
    rng = random.Random(f"{extension}-{service}")
    server = start_server()
    for kill in range(KILLS):
        job = f"kill-{kill}"
        journal_dir = tmp_path / "journal"
        spec = {
            "sink": "http",
            "job": job,
            "extension": extension,
            "journal_dir": str(journal_dir),
            "interval": INTERVAL,
            "side": str(tmp_path / f"{job}.side"),
            "steps": 10**7,
            "step_seconds": 0.002,
            # Sends farther apart than the kill comes: without the journal, the service
            # would hold only what the first send carried.
            "send_interval": 5.0,
        }
        if service == "up":
            spec["url"] = server.url
            kill_time, reports = _run_and_kill(spec, rng)
        else:
            # An earlier attempt stored steps 1..PRIOR; the killed one resumes after it
            # with the service down, so its journal never learns the stored lengths.
            earlier = {**spec, "url": server.url, "steps": PRIOR, "step_seconds": 0.0}
            earlier["side"] = f"{spec['side']}.earlier"
            assert 0 == _spawn(earlier).wait(60), _errors(earlier)
            spec["first_step"] = PRIOR + 1
            with closed_port() as port:
                spec["url"] = f"http://127.0.0.1:{port}"
                kill_time, reports = _run_and_kill(spec, rng)
            reports = [(step, 0.0) for step in range(1, PRIOR + 1)] + reports
        by_sync = kill % 2 == 1
        journal = journal_dir / job / "train.log"
        assert journal.exists()
        if by_sync:
            _sync(journal, server.url, extension)
        else:
            restart = _spawn({**spec, "url": server.url, "recover_only": True})
            assert 0 == restart.wait(60), _errors(spec)
            assert not journal.exists()  # delivered: removed at the clean close
            assert not (journal_dir / job / "train.left").exists()
        how = "sync" if by_sync else "restart"
        label = f"{'extension' if extension else 'full-state'}, service {service}, {how}"
        _check(_stored(server.url, job), kill_time, reports, label)


@pytest.mark.parametrize("extension", [True, False], ids=["extension", "full-state"])
@pytest.mark.parametrize("hang_from", ["start", "mid-run"])
def test_a_service_that_hangs_never_stops_the_journal_of_a_killed_run(
    hang_from: str, extension: bool, start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """A service that accepts and never answers, from the start or mid-run; kill -9 2-3 s in.

    The child's requests get HttpSink's default timeouts (5 s connect, 10 s
    read), so every request made during the hang is still in flight at the
    kill: whatever was recorded a window before the kill can only be in the
    journal, and a restart against the service delivers it, once.
    """
    rng = random.Random(f"hang-{hang_from}-{extension}")
    server = start_server()
    for kill in range(HANG_KILLS):
        job = f"hang-{hang_from}-{kill}"
        journal_dir = tmp_path / "journal"
        spec = {
            "sink": "http",
            "job": job,
            "extension": extension,
            "journal_dir": str(journal_dir),
            "interval": INTERVAL,
            "side": str(tmp_path / f"{job}.side"),
            "steps": 10**7,
            "step_seconds": 0.002,
            "send_interval": 0.3,  # a send soon after the hang begins: it hangs too
            "connect_timeout": 5.0,
            "read_timeout": 10.0,
        }
        with FaultProxy.for_url(server.url) as proxy:
            spec["url"] = proxy.url
            if hang_from == "start":
                proxy.hang(60.0)
            kill_time, reports = _run_and_kill(
                spec, rng, hang=None if hang_from == "start" else proxy, hang_for=(2.0, 3.0)
            )
        journal = journal_dir / job / "train.log"
        assert journal.exists()
        restart = _spawn({**spec, "url": server.url, "recover_only": True})
        assert 0 == restart.wait(60), _errors(spec)
        mode = "extension" if extension else "full-state"
        _check(_stored(server.url, job), kill_time, reports, f"{mode}, hangs from {hang_from}")


#: Kills per kind in the close tests: one in CI; ``TRAINREPORT_KILLS`` for more.
CLOSE_KILLS = max(1, KILLS // 2)


def _wait_for(path: Path, child: subprocess.Popen[bytes], spec: dict[str, Any]) -> None:
    """Wait (10 s at most) until ``path`` exists and is not empty."""
    deadline = time.monotonic() + 10
    while not (path.exists() and path.stat().st_size) and time.monotonic() < deadline:
        assert child.poll() is None, _errors(spec)
        time.sleep(0.01)
    assert path.exists(), _errors(spec)


@pytest.mark.parametrize("how", ["close", "sigterm"])
def test_a_kill_during_a_hanging_close_finds_the_end_of_the_run_in_the_journal(
    how: str, start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """kill -9 1-2 s into close() with the service hanging: the journal has the end (issue 21, 3).

    ``close``: the loop ends and calls ``close()``; ``sigterm``: the opt-in
    SIGTERM hook reports ``preempted`` and closes. The service accepts and
    never answers from that moment, so the close sequence runs to its 20 s
    deadline; the job system's SIGKILL comes first. The journal must hold the
    terminal status, and it and the service together every step reported.
    """
    rng = random.Random(how)
    server = start_server()
    with FaultProxy.for_url(server.url) as proxy:
        for kill in range(CLOSE_KILLS):
            job = f"close-{how}-{kill}"
            journal_dir = tmp_path / "journal"
            stop = tmp_path / f"{job}.stop"
            spec: dict[str, Any] = {
                "sink": "http",
                "url": proxy.url,
                "job": job,
                "extension": True,
                "journal_dir": str(journal_dir),
                "interval": INTERVAL,
                "side": str(tmp_path / f"{job}.side"),
                "steps": 10**7,
                "step_seconds": 0.002,
                "send_interval": 5.0,  # no send is due when the close begins
                "read_timeout": 0.5,
                "stop_file": str(stop),
                "sigterm_hook": how == "sigterm",
            }
            child = _spawn(spec)
            _wait_for(Path(spec["side"]), child, spec)
            time.sleep(rng.uniform(0.3, 1.0))
            proxy.hang(120.0)
            if how == "close":
                stop.touch()
                _wait_for(Path(f"{stop}.closing"), child, spec)
            else:
                child.send_signal(signal.SIGTERM)
            time.sleep(rng.uniform(1.2, 2.0))
            assert child.poll() is None, _errors(spec)  # still closing: the service hangs
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            proxy.pass_through()
            reported = {
                int(line.split()[0]) for line in Path(spec["side"]).read_text().split("\n") if line
            }
            journal = read_task(journal_dir / job / "train.log")
            expected = "completed" if how == "close" else "cancelled"
            assert expected == journal["status"], journal["status_details"]
            if how == "sigterm":
                assert "preempted" == journal["status_details"].get("cancel_reason")
            stored = _stored(server.url, job)
            for name in METRICS:
                kept = {
                    p["step"]
                    for task in (journal, stored)
                    if task is not None
                    for p in task["status_details"].get("metrics", {}).get(f"train_{name}", [])
                }
                assert set() == reported - kept, (name, max(reported))


def test_the_embedded_run_log_keeps_every_point_recorded_a_second_before_the_kill(
    tmp_path: Path,
) -> None:
    """FileSink (no URL): after kill -9, read_task of the log shows every point once."""
    rng = random.Random("file")
    for kill in range(KILLS):
        log = tmp_path / f"run-{kill}.log"
        spec = {
            "sink": "file",
            "job": f"run-{kill}",
            "path": str(log),
            "interval": INTERVAL,
            "send_interval": 10.0,  # the default: the embedded log is sent to every interval
            "side": str(tmp_path / f"run-{kill}.side"),
            "steps": 10**7,
            "step_seconds": 0.002,
        }
        kill_time, reports = _run_and_kill(spec, rng)
        _check(read_task(log), kill_time, reports, "embedded run log")


def teardown_module() -> None:
    """Print the figures (kills, points expected, lost, duplicates) for the docs and the note."""
    if not FIGURES:
        return
    by_label: dict[str, Counter[str]] = {}
    for f in FIGURES:
        c = by_label.setdefault(f["label"], Counter())
        c["kills"] += 1
        for key in ("expected", "lost", "lost_strict", "duplicates"):
            c[key] += f[key]
    for label, c in sorted(by_label.items()):
        print(
            f"\n[kill figures] {label}: kills={c['kills']} points_expected={c['expected']} "
            f"lost_beyond_window={c['lost']} lost_strict_interval="
            f"{c['lost_strict']} duplicates={c['duplicates']}"
        )
