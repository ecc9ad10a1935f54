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
  log after the kill;
- after points had left the child's memory (``docs/engine.md``, "Memory":
  points past the 256-a-series release batch that every destination and the
  journal held), through the run log and through the journal (suffix mode).

Every point recorded at least ``journal_interval_seconds`` (plus
:data:`SLACK_SECONDS` for the reporter thread to be scheduled on a loaded
machine) before the kill must be stored, each exactly once, with the value
the child reported. CI runs :data:`KILLS` kills per combination with short
intervals; ``TRAINREPORT_KILLS=20`` runs 20 (docs/engine.md, "The journal in
front of a service", has the command and the figures).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
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
CHILD = Path(__file__).parents[1] / "kill_child.py"
ROOT = Path(__file__).resolve().parents[2]
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
    released: Path | None = None,
) -> tuple[float, list[tuple[int, float]]]:
    """Start the child, kill it at a random moment after its first report.

    Args:
        spec: the child's spec.
        rng: draws the moments.
        hang: a proxy the child talks through, switched to hang (accept and
            never answer) 0.5-1 s after the first report; ``None``: none.
        hang_for: the range the kill's delay is drawn from (seconds after the
            first report, or after the hang began, or after points left memory).
        released: the child's ``released_file``: the delay starts once it
            says points left the child's memory; ``None``: do not wait.

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
    while released is not None and not _released(released) and time.monotonic() < deadline:
        assert child.poll() is None, _errors(spec)
        time.sleep(0.01)
    time.sleep(rng.uniform(*hang_for))
    kill_time = time.time()
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    reports = []
    for line in side.read_text().splitlines():
        step, at = line.split()
        reports.append((int(step), float(at)))
    return kill_time, reports


def _released(path: Path) -> int:
    """What the child's ``released_file`` says: points that left its memory (0: none yet)."""
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else 0


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


@pytest.mark.parametrize("sink", ["run log", "extension"])
def test_a_kill_after_points_left_memory_still_loses_only_the_window(
    sink: str, start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """Points past the release batch left memory before the kill: recovery still keeps them.

    The child says when the first points every destination (and the
    journal) held left its memory (``docs/engine.md``, "Memory"); it is
    killed 0.1-1 s later. The embedded run log (``read_task``) or the
    service after a restart through the journal (series-suffix mode; a
    full-state destination keeps every point) holds every point recorded
    :data:`WINDOW` before the kill, once.
    """
    rng = random.Random(f"released-{sink}")
    server = start_server() if sink == "extension" else None
    for kill in range(KILLS):
        job = f"released-{kill}"
        spec: dict[str, Any] = {
            "job": job,
            "interval": INTERVAL,
            "side": str(tmp_path / f"{job}.side"),
            "released_file": str(tmp_path / f"{job}.released"),
            "steps": 10**7,
            "step_seconds": 0.001,
            "journal_dir": str(tmp_path / "journal"),
        }
        if server is None:
            spec.update(sink="file", path=str(tmp_path / f"{job}.log"), send_interval=10.0)
        else:
            spec.update(sink="http", url=server.url, extension=True, send_interval=0.2)
        released = Path(spec["released_file"])
        kill_time, reports = _run_and_kill(spec, rng, hang_for=(0.1, 1.0), released=released)
        assert 0 < _released(released), "no point left the child's memory before the kill"
        if server is None:
            task = read_task(Path(spec["path"]))
        else:
            restart = _spawn({**spec, "recover_only": True})
            assert 0 == restart.wait(60), _errors(spec)
            task = _stored(server.url, job)
        _check(task, kill_time, reports, f"{sink}, after points left memory")


# --- faults combined at random (issue 21, "The test that would have found them") ----------

#: Kills per wire mode of the combined faults: 2 in CI; ``TRAINREPORT_KILLS`` scales them.
COMBINED_KILLS = KILLS
#: Where a hang of the service begins: never, before the run, during it, just before close.
HANGS = ("none", "start", "mid-run", "before-close")
#: How the process ends: killed mid-run, killed during close(), killed during the SIGTERM hook.
ENDS = ("kill", "close", "sigterm")
#: What happens to the journal's disk mid-run: nothing, ``rm -rf`` of its directory, full.
DISKS = ("ok", "deleted", "full")
#: The recovering process's wall clock against the killed one's (seconds): an NTP step.
CLOCK_STEPS = (-3600.0, 0.0, 3600.0)
#: The window a promised point is recorded before (seconds): the interval plus slack.
WINDOW = INTERVAL + SLACK_SECONDS


@attrs.frozen
class Run:
    """What one process recorded, and what of it a recovery must deliver.

    Attributes:
        reports: ``(step, wall time)`` of every report call (its side file).
        salt: added to every value it reported (:func:`kill_child.value_of`).
        until: every point recorded at least :data:`WINDOW` before this wall
            time must be stored (``inf``: every one; ``-inf``: none).
        first_step: its first step; a later run's points replace its own from
            that run's first step on.
    """

    reports: list[tuple[int, float]]
    salt: float = 0.0
    until: float = -math.inf
    first_step: int = 1


def _side(spec: Mapping[str, Any]) -> list[tuple[int, float]]:
    """``(step, wall time)`` of every report the child made (its side file)."""
    path = Path(spec["side"])
    if not path.exists():
        return []
    reports = []
    for line in path.read_text().splitlines():
        step, at = line.split()
        reports.append((int(step), float(at)))
    return reports


def _check_record(
    task: dict[str, Any] | None,
    label: str,
    runs: list[Run],
    *,
    status: str | None = None,
    cancel_reason: str | None = None,
) -> dict[str, Any]:
    """The stored task holds what the newest run recorded up to its window, once, and its status.

    Each run owns the steps from its ``first_step`` up to the next run's: a
    stored point must carry the value of the run that owns its step, and be
    one that run reported (or the one it was reporting when killed); each is
    stored once; every point a run recorded a window before its ``until`` is
    there.
    """
    assert task is not None, label
    metrics = task["status_details"].get("metrics", {})
    expected = lost = lost_strict = duplicates = wrong = 0
    for i, run in enumerate(runs):
        end = min((later.first_step for later in runs[i + 1 :]), default=math.inf)
        last = max((step for step, _ in run.reports), default=run.first_step - 1)
        promised = [s for s, at in run.reports if at <= run.until - WINDOW and s < end]
        strict = [s for s, at in run.reports if at <= run.until - INTERVAL and s < end]
        expected += len(promised) * len(METRICS)
        for name in METRICS:
            points = [
                p for p in metrics.get(f"train_{name}", []) if run.first_step <= p["step"] < end
            ]
            counts = Counter(p["step"] for p in points)
            duplicates += sum(n - 1 for n in counts.values() if n > 1)
            lost += sum(1 for s in promised if s not in counts)
            lost_strict += sum(1 for s in strict if s not in counts)
            wrong += sum(
                1
                for p in points
                if p["step"] > last + 1 or p["value"] != value_of(p["step"], name, run.salt)
            )
    for name in METRICS:
        steps = [p["step"] for p in metrics.get(f"train_{name}", [])]
        assert steps == sorted(steps), label
        wrong += sum(1 for s in steps if s < runs[0].first_step)
    figures = {
        "label": label,
        "expected": expected,
        "lost": lost,
        "lost_strict": lost_strict,
        "duplicates": duplicates,
    }
    FIGURES.append(figures)
    assert (0, 0, 0) == (lost, duplicates, wrong), {**figures, "wrong": wrong}
    if status is not None:
        assert status == task["status"], (label, task["status"], task["status_details"])
    if cancel_reason is not None:
        assert cancel_reason == task["status_details"].get("cancel_reason"), label
    return figures


def _draws(rng: random.Random, n: int) -> list[tuple[str, str, str, str, float]]:
    """``n`` combinations of (hang, end, disk, recovery, clock step), each once before repeats."""
    every = list(itertools.product(HANGS, ENDS, DISKS, ("restart", "sync"), CLOCK_STEPS))
    rng.shuffle(every)
    return [every[i % len(every)] for i in range(n)]


def _kill_at_random_amid_faults(
    spec: dict[str, Any],
    draw: tuple[str, str, str, str, float],
    rng: random.Random,
    proxy: FaultProxy,
) -> tuple[Run, str | None, bool]:
    """Run the child through ``draw``'s faults and kill it; what it recorded and must keep.

    Returns:
        the child's :class:`Run` (``until`` already accounts for a full disk
        and a close that finished), the terminal status it must have recorded
        (``None``: none promised), and whether the kill found it alive.
    """
    hang, end, disk, _, _ = draw
    journal_job = Path(spec["journal_dir"]) / spec["job"]
    stop = Path(spec["stop_file"])
    if hang == "start":
        proxy.hang(120.0)
    child = _spawn(spec)
    _wait_for(Path(spec["side"]), child, spec)
    time.sleep(rng.uniform(0.2, 0.6))
    if hang == "mid-run":
        proxy.hang(120.0)
    full_at = math.inf
    if disk == "deleted":
        time.sleep(rng.uniform(0.1, 0.4))
        shutil.rmtree(journal_job, ignore_errors=True)  # a cleanup job
    elif disk == "full":
        time.sleep(rng.uniform(0.1, 0.4))
        full_at = time.time()
        Path(spec["disk_full_file"]).touch()
    # Past a window after the deletion: the journal has noticed and holds everything again.
    time.sleep(rng.uniform(WINDOW + 0.2, WINDOW + 0.8))
    terminal: str | None = None
    ended_at = math.inf
    if end != "kill":
        if hang == "before-close":
            proxy.hang(120.0)
        if end == "close":
            stop.touch()
            _wait_for(Path(f"{stop}.closing"), child, spec)
            terminal = "completed"
        else:
            child.send_signal(signal.SIGTERM)
            terminal = "cancelled"
        ended_at = time.time()  # no report after this one
        time.sleep(rng.uniform(WINDOW + 0.3, 2.0))
    kill_time = time.time()
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    proxy.pass_through()
    finished = child.returncode != -signal.SIGKILL
    if finished:  # the close ended before the kill: the service holds everything
        return Run(_side(spec), until=math.inf), terminal, False
    if full_at < math.inf:
        return Run(_side(spec), until=full_at), None, True
    until = kill_time if ended_at == math.inf else math.inf  # a close journals everything
    return Run(_side(spec), until=until), terminal, True


@pytest.mark.parametrize("extension", [True, False], ids=["extension", "full-state"])
def test_faults_combined_at_random_then_recovery_holds_the_newest_record_once(
    extension: bool, start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """Hangs, kills in close() and the SIGTERM hook, a deleted or full disk, a stepped clock.

    Each kill draws one combination (seeded, so a failure replays): where a
    hang of the service begins (never, before the run, mid-run, just before
    close), how the child ends (killed mid-run, killed 0.8-2 s into
    ``close()``, killed during the SIGTERM hook's close), what happens to the
    journal's disk (nothing, its directory deleted, full), the recovery
    (a restart whose wall clock is stepped an hour back, forward or not, or
    ``trainreport sync``). After recovery the service must hold every point
    recorded a window before the kill (before the disk filled), once, with
    the run's value, and no point it did not record; the terminal status
    reached the journal and, through ``sync``, the service.
    """
    mode = "extension" if extension else "full-state"
    rng = random.Random(f"combined-{mode}")
    server = start_server()
    for kill, draw in enumerate(_draws(rng, COMBINED_KILLS)):
        hang, end, disk, recovery, clock = draw
        job = f"mix-{kill}"
        journal_dir = tmp_path / "journal"
        spec: dict[str, Any] = {
            "sink": "http",
            "job": job,
            "extension": extension,
            "journal_dir": str(journal_dir),
            "interval": INTERVAL,
            "side": str(tmp_path / f"{job}.side"),
            "steps": 10**7,
            "step_seconds": 0.002,
            "send_interval": 0.5,
            "read_timeout": 10.0,
            "stop_file": str(tmp_path / f"{job}.stop"),
            "sigterm_hook": end == "sigterm",
            "disk_full_file": str(tmp_path / f"{job}.full") if disk == "full" else None,
        }
        label = f"{mode}: hang {hang}, end {end}, disk {disk}, {recovery}"
        if recovery == "restart":
            label += f", clock {clock:+.0f} s"
        with FaultProxy.for_url(server.url) as proxy:
            spec["url"] = proxy.url
            run, terminal, killed = _kill_at_random_amid_faults(spec, draw, rng, proxy)
        journal = journal_dir / job / "train.log"
        if terminal is not None and killed:
            journaled = read_task(journal)
            assert terminal == journaled["status"], (label, journaled["status_details"])
        if recovery == "sync":
            if journal.exists():
                _sync(journal, server.url, extension)
            _check_record(
                _stored(server.url, job),
                label,
                [run],
                status=terminal,
                cancel_reason="preempted" if terminal == "cancelled" else None,
            )
        else:
            restart_spec = {**spec, "url": server.url, "recover_only": True}
            restart_spec.update(sigterm_hook=False, disk_full_file=None, clock_offset=clock)
            restart = _spawn(restart_spec)
            assert 0 == restart.wait(60), (label, _errors(spec))
            assert not journal.exists(), label  # delivered: removed at the clean close
            assert not (journal_dir / job / "train.left").exists(), label
            _check_record(_stored(server.url, job), label, [run], status="completed")


#: Kills per lock order of two attempts on one node: one in CI.
ZOMBIE_KILLS = max(1, KILLS // 2)
#: The newer attempt's values are its step's plus this (the zombie's are not).
NEWER_SALT = 1000.0


def _last_step(spec: Mapping[str, Any]) -> int:
    return max((step for step, _ in _side(spec)), default=0)


def _kill(child: subprocess.Popen[bytes]) -> float:
    """SIGKILL ``child`` (if it still runs) and reap it; the wall time of the kill."""
    kill_time = time.time()
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    return kill_time


def _sync_process(journal: Path, url: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "trainreport.cli", "sync", str(journal), "--url", url]
    return subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("lock", ["zombie-holds-the-lock", "newer-holds-the-lock"])
def test_a_zombie_attempt_on_the_same_node_never_replaces_the_newer_attempts_record(
    lock: str, start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """Two attempts on one node and one journal directory; the older outlives the newer's start.

    ``zombie-holds-the-lock``: attempt 0 runs and holds the journal; attempt 1
    starts (its journal is busy), resumes from an earlier step, takes the task
    over (attempt 0's sends get 409) and completes; attempt 0 goes on
    recording and is killed at a random moment after. ``newer-holds-the-lock``:
    attempt 1 runs and holds the journal; attempt 0 starts late (its journal
    is busy, its claim is refused); attempt 1 is killed mid-run or ends with
    ``close()``, then attempt 0 is killed. Recovery (attempt 1's restart, or
    ``trainreport sync`` of the journal on disk) must leave exactly the newer
    attempt's record: its points up to the window, once, none of the zombie's
    from its first step on. Extension only: a plain job API cannot fence.
    """
    rng = random.Random(f"zombie-{lock}")
    server = start_server()
    for kill in range(ZOMBIE_KILLS):
        job = f"zombie-{lock}-{kill}"
        journal_dir = tmp_path / "journal"
        base: dict[str, Any] = {
            "sink": "http",
            "url": server.url,
            "job": job,
            "extension": True,
            "journal_dir": str(journal_dir),
            "interval": INTERVAL,
            "steps": 10**7,
            "step_seconds": 0.002,
            "send_interval": 0.3,
        }
        zombie = {**base, "attempt": 0, "side": str(tmp_path / f"{job}.zombie")}
        newer = {**base, "attempt": 1, "salt": NEWER_SALT, "side": str(tmp_path / f"{job}.newer")}
        newer["stop_file"] = str(tmp_path / f"{job}.stop")
        runs: list[Run] = []
        if lock == "zombie-holds-the-lock":
            old = _spawn(zombie)
            _wait_for(Path(zombie["side"]), old, zombie)
            time.sleep(rng.uniform(0.5, 1.0))
            first = max(1, int(_last_step(zombie) * rng.uniform(0.3, 0.9)))
            newer["first_step"] = first  # resumed from an earlier checkpoint
            new = _spawn(newer)
            _wait_for(Path(newer["side"]), new, newer)
            time.sleep(rng.uniform(0.5, 1.5))
            Path(newer["stop_file"]).touch()  # its journal is busy: a clean close delivers all
            assert 0 == new.wait(30), _errors(newer)
            time.sleep(rng.uniform(0.2, 1.0))  # the zombie outlives it
            _kill(old)
            runs.append(Run(_side(zombie)))
            runs.append(Run(_side(newer), NEWER_SALT, math.inf, first))
            ended = "completed"
        else:
            new = _spawn(newer)
            _wait_for(Path(newer["side"]), new, newer)
            time.sleep(rng.uniform(0.3, 0.8))
            old = _spawn(zombie)  # opens late: its claim is older than the holder's
            _wait_for(Path(zombie["side"]), old, zombie)
            time.sleep(rng.uniform(0.3, 1.0))
            ended = rng.choice(["killed", "completed"])
            if ended == "completed":
                Path(newer["stop_file"]).touch()
                assert 0 == new.wait(30), _errors(newer)
                until = math.inf
            else:
                until = _kill(new)
            time.sleep(rng.uniform(0.2, 0.8))
            _kill(old)
            runs.append(Run(_side(newer), NEWER_SALT, until))
        journal = journal_dir / job / "train.log"
        recovery = ("restart", "sync")[kill % 2]  # CI's one kill: the restart
        label = f"two attempts, {lock}, the newer {ended}, {recovery}"
        if recovery == "sync" and journal.exists():
            done = _sync_process(journal, server.url)
            if lock == "zombie-holds-the-lock":  # the zombie's: refused, and says why
                assert 0 != done.returncode, done.stdout + done.stderr
                assert "--force" in done.stdout + done.stderr
            else:
                assert 0 == done.returncode, done.stdout + done.stderr
        elif recovery == "restart":
            restart = _spawn({**newer, "recover_only": True, "stop_file": None})
            restart.wait(60)
            if lock == "newer-holds-the-lock":
                assert 0 == restart.returncode, _errors(newer)
                assert not journal.exists(), label
        _check_record(
            _stored(server.url, job),
            label,
            runs,
            status="completed" if (recovery == "restart" or ended == "completed") else "running",
        )


@pytest.mark.parametrize("extension", [True, False], ids=["extension", "full-state"])
def test_left_over_journals_of_restarts_on_a_stepped_clock_leave_the_newest_points(
    extension: bool, start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """Two processes killed in turn with the service down, the second's clock stepped.

    The first records from step 1 and is killed; the second, its wall clock
    an hour back or forward (drawn), resumes from an earlier step with other
    values and is killed too; a restart (its clock drawn again) recovers both
    left-overs against the service. The second's points must replace the
    first's from its first step on, every point of each a window before its
    kill stored once, and the task's ``step`` the second's.
    """
    mode = "extension" if extension else "full-state"
    rng = random.Random(f"clock-{mode}")
    server = start_server()
    for kill in range(CLOSE_KILLS):
        job = f"clock-{kill}"
        # Back first (CI runs one kill): the step that made the older journal look newer.
        first_clock, restart_clock = CLOCK_STEPS[::2][kill % 2], rng.choice(CLOCK_STEPS)
        base: dict[str, Any] = {
            "sink": "http",
            "job": job,
            "extension": extension,
            "journal_dir": str(tmp_path / "journal"),
            "interval": INTERVAL,
            "steps": 10**7,
            "step_seconds": 0.002,
            "send_interval": 0.3,
        }
        runs: list[Run] = []
        with closed_port() as port:
            base["url"] = f"http://127.0.0.1:{port}"
            first = {**base, "side": str(tmp_path / f"{job}.1")}
            child = _spawn(first)
            _wait_for(Path(first["side"]), child, first)
            time.sleep(rng.uniform(0.6, 1.2))
            runs.append(Run(_side(first), until=_kill(child)))
            resume = max(1, int(_last_step(first) * rng.uniform(0.3, 0.9)))
            second = {**base, "side": str(tmp_path / f"{job}.2"), "first_step": resume}
            second.update(salt=NEWER_SALT, clock_offset=first_clock)
            child = _spawn(second)
            _wait_for(Path(second["side"]), child, second)
            time.sleep(rng.uniform(0.6, 1.2))
            until = _kill(child)
            runs.append(Run(_side(second), NEWER_SALT, until, resume))
        restart = _spawn(
            {**second, "url": server.url, "recover_only": True, "clock_offset": restart_clock}
        )
        assert 0 == restart.wait(60), _errors(second)
        label = (
            f"{mode}: two left-overs, the second's clock {first_clock:+.0f} s, "
            f"the restart's {restart_clock:+.0f} s"
        )
        task = _stored(server.url, job)
        _check_record(task, label, runs, status="completed")
        assert task is not None
        journaled = [s for s, at in runs[1].reports if at <= until - WINDOW]
        assert max(journaled) <= task["status_details"]["step"] <= _last_step(second) + 1, label


def test_a_restart_on_a_clock_stepped_back_is_not_fenced_as_an_older_attempt(
    start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """Killed with the service up (it claimed the task); the restart's clock an hour back.

    Found by the combined faults (issue 21's harness). The order of attempts
    without a number is their start time, a wall-clock reading; a restart that
    takes the dead process's journal is ordered after it
    (``_wire._attempt.follow``), so it recovers the journal and writes the task.
    """
    server = start_server()
    spec: dict[str, Any] = {
        "sink": "http",
        "url": server.url,
        "job": "clock-back",
        "extension": True,
        "journal_dir": str(tmp_path / "journal"),
        "interval": INTERVAL,
        "side": str(tmp_path / "clock-back.side"),
        "steps": 10**7,
        "step_seconds": 0.002,
        "send_interval": 5.0,
    }
    kill_time, reports = _run_and_kill(spec, random.Random("clock-back"))
    restart = _spawn({**spec, "recover_only": True, "clock_offset": -3600.0})
    assert 0 == restart.wait(60), _errors(spec)
    _check_record(
        _stored(server.url, "clock-back"), "restart, clock -3600 s", [Run(reports, until=kill_time)]
    )


def test_two_file_sinks_on_one_log_keep_each_run_s_points_once(tmp_path: Path) -> None:
    """Two processes given one run log, the log compacted at every send; both killed.

    The second opens while the first holds the log (refused, retried), and
    resumes from an earlier step with other values once the first is killed
    at a random moment; then it is killed too, or closes. The log must hold
    the first's points before the second's first step and the second's from
    it, every point of each a window before its kill, once; a closed run's
    ``.json`` record the same.
    """
    rng = random.Random("two-file-sinks")
    for kill in range(KILLS):
        log = tmp_path / f"shared-{kill}.log"
        base: dict[str, Any] = {
            "sink": "file",
            "job": f"shared-{kill}",
            "path": str(log),
            "interval": INTERVAL,
            "send_interval": 0.05,
            "steps": 10**7,
            "step_seconds": 0.002,
            "compact_always": True,
            "rejected_backoff": 0.2,  # a refused open is tried again soon (default 300 s)
        }
        first = {**base, "side": str(tmp_path / f"shared-{kill}.1")}
        child = _spawn(first)
        _wait_for(Path(first["side"]), child, first)
        time.sleep(rng.uniform(0.3, 0.8))
        resume = max(1, int(_last_step(first) * rng.uniform(0.3, 0.9)))
        second = {**base, "side": str(tmp_path / f"shared-{kill}.2"), "first_step": resume}
        second.update(salt=NEWER_SALT, stop_file=str(tmp_path / f"shared-{kill}.stop"))
        other = _spawn(second)
        _wait_for(Path(second["side"]), other, second)
        time.sleep(rng.uniform(0.2, 1.0))
        runs = [Run(_side(first), until=_kill(child))]
        time.sleep(rng.uniform(1.0, 2.0))  # its open is retried (backoff <= 0.3 s), then it sends
        closes = rng.random() < 0.5
        if closes:
            Path(second["stop_file"]).touch()
            assert 0 == other.wait(30), _errors(second)
            until = math.inf
        else:
            until = _kill(other)
        runs.append(Run(_side(second), NEWER_SALT, until, resume))
        label = f"two FileSinks on one log, the second {'closed' if closes else 'killed'}"
        _check_record(read_task(log), label, runs, status="completed" if closes else None)
        if closes:  # the log is the record: no JSON is rewritten at close
            assert not log.with_suffix(".json").exists()


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
