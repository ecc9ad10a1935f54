"""The ``trainreport`` command as a newcomer runs it: ``show``, ``--version``, ``--help``, serve.

Every command runs in a subprocess (``python -m trainreport.cli``) and its output
is read as a user reads it; ``show --url`` talks to the real reference server.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import clean_env, run_cli
from trainreport import FileSink, HttpSink, Reporter, cli

pytestmark = pytest.mark.timeout(120)

LONG = "val_a_validation_set_with_a_long_name_accuracy"  # 46 characters


def write_task(tmp_path: Path, task: dict[str, Any]) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))
    return path


def points(*values: float) -> list[dict[str, Any]]:
    return [{"step": i + 1, "epoch": 1, "value": v} for i, v in enumerate(values)]


def report_run(url: str, job: str, *, steps: int = 3, token: str | None = None) -> None:
    """A short real run to the server: ``steps`` train steps, completed."""
    reporter = Reporter(HttpSink(url, job, token=token), rank=0).start()
    reporter.report_training_start(max_steps=steps)
    for step in range(1, steps + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
    reporter.report_completed()
    assert reporter.close(timeout=10)


# -- show: the task ---------------------------------------------------------------------


def test_show_aligns_the_series_columns_for_long_names(tmp_path: Path) -> None:
    """A 46-character series name does not push its row's numbers out of line."""
    path = write_task(
        tmp_path,
        {
            "status": "running",
            "status_details": {
                "step": 3,
                "metrics": {
                    "train_loss": points(3.0, 2.0, 1.0),
                    LONG: points(0.5),
                },
            },
        },
    )

    out = run_cli("show", "--file", str(path)).stdout
    rows = [line for line in out.splitlines() if re.match(r"\s+(train_loss|val_a_\w+)\s+\d", line)]
    header = next(line for line in out.splitlines() if "points" in line)

    assert 2 == len(rows)
    # the point counts end in one column (right-aligned under "points"), values start in one
    ends = {re.search(r"\s(\d+)\s", row).end(1) for row in rows}  # type: ignore[union-attr]
    assert {header.index("points") + len("points")} == ends
    assert 1 == len({row.index(value) for row, value in zip(rows, ["1", "0.5"], strict=True)})


def test_show_prints_the_hyperparameters(tmp_path: Path) -> None:
    """Hyperparameters are shown, one per line, keys aligned, values as stored."""
    params = {"optimizer/lr": 0.1, "batch_size": 32, "gradient_accumulation_steps": 4}
    path = write_task(
        tmp_path, {"status": "running", "status_details": {"hyperparameters": params}}
    )

    out = run_cli("show", "--file", str(path)).stdout
    section = out[out.index("hyperparameters") :].splitlines()[1:]

    assert [
        "  batch_size                   32",
        "  gradient_accumulation_steps  4",
        "  optimizer/lr                 0.1",
    ] == section[:3]


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_show_of_a_finished_run_says_done_and_shows_no_eta(tmp_path: Path, status: str) -> None:
    """A record written by an older client (phase checkpointing, ETA 0) still reads as over."""
    details = {"phase": "checkpointing", "step": 10, "max_steps": 10, "eta_seconds": 0.0}
    path = write_task(tmp_path, {"status": status, "status_details": details})

    out = run_cli("show", "--file", str(path)).stdout

    assert f"status {status}, phase done, step 10 of 10" in out
    assert "ETA" not in out
    assert "checkpointing" not in out


def test_show_of_a_running_task_shows_its_eta(tmp_path: Path) -> None:
    """While the task runs, the ETA is part of the status line."""
    details = {"phase": "training", "step": 5, "max_steps": 10, "eta_seconds": 65.2}
    path = write_task(tmp_path, {"status": "running", "status_details": details})

    out = run_cli("show", "--file", str(path)).stdout

    assert "status running, phase training, step 5 of 10" in out
    assert "ETA 1 min 05 s" in out


def log_run(path: Path, steps: int, *, close: bool = True) -> Reporter:
    """A real run to FileSink(path), every step sent; closed unless asked not to."""
    reporter = Reporter(FileSink(path), rank=0).start()
    reporter.report_training_start(max_steps=steps * 2)
    for step in range(1, steps + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        assert reporter.flush(timeout=10)
    if close:
        assert reporter.close(timeout=10)
    return reporter


def test_show_file_reads_a_run_log_while_the_run_goes_on(tmp_path: Path) -> None:
    """The log of a run still going (no record yet) shows its status and every sent point."""
    path = tmp_path / "run.log"
    reporter = log_run(path, 7, close=False)

    result = run_cli("show", "--file", str(path))

    assert 0 == result.returncode, result.stderr
    assert "status running, phase training, step 7 of 14" in result.stdout
    assert re.search(r"train_loss\s+7\s", result.stdout)
    assert "" == result.stderr
    assert reporter.close(timeout=10)


def test_show_file_of_a_damaged_log_shows_what_was_read_and_says_what_was_not(
    tmp_path: Path,
) -> None:
    """A torn tail: the intact records are shown, stderr says what was dropped, exit 0."""
    path = tmp_path / "run.log"
    log_run(path, 5)
    path.write_bytes(path.read_bytes()[:-9])

    result = run_cli("show", "--file", str(path))

    assert 0 == result.returncode
    assert "train_loss" in result.stdout
    assert f"{path} is damaged: read its" in result.stderr
    assert "the log ends inside a record" in result.stderr
    assert "trainreport.run_log_damaged" not in result.stderr  # said once, in a sentence


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"GIF89a", "neither a run log"), (b"trainreport-log\n", "holds no task yet")],
)
def test_show_file_with_nothing_readable_exits_1_with_the_reason(
    tmp_path: Path, content: bytes, says: str
) -> None:
    """Not a log, or a log with no task: one line on stderr, exit 1, no traceback."""
    path = tmp_path / "x.log"
    path.write_bytes(content)

    result = run_cli("show", "--file", str(path))

    assert 1 == result.returncode
    assert says in result.stderr
    assert "Traceback" not in result.stderr


def test_show_file_of_a_record_older_than_its_log_points_to_the_log(tmp_path: Path) -> None:
    """run.json from an earlier close, run.log written since (a run that did not close)."""
    record = tmp_path / "run.json"
    log_run(record, 3)
    later = log_run(record, 4, close=False)
    os.utime(record, (1, 1))

    result = run_cli("show", "--file", str(record))

    assert 0 == result.returncode
    assert f"note: {tmp_path / 'run.log'} is newer than this record" in result.stderr
    assert later.close(timeout=10)


# -- show --url: jobs, tokens, errors ---------------------------------------------------


def test_show_url_without_a_job_lists_the_jobs(server: Any) -> None:
    """``show --url URL`` alone lists every job with its tasks, status and phase."""
    report_run(server.url, "first-job")
    report_run(server.url, "second-job-with-a-long-name", steps=4)

    proc = run_cli("show", "--url", server.url, env=clean_env())
    lines = proc.stdout.splitlines()
    first = next(line for line in lines if line.startswith("first-job"))
    second = next(line for line in lines if line.startswith("second-job-with-a-long-name"))

    assert 0 == proc.returncode, proc.stderr
    assert re.search(r"first-job\s+train\s+completed\s+done\s+3 of 3\s+100\.0 %", first)
    assert re.search(r"\s+train\s+completed\s+done\s+4 of 4\s+100\.0 %", second)
    assert first.index("train") == second.index("train")  # aligned columns
    assert f"trainreport show --url {server.url} JOB_ID" in proc.stdout


def test_show_url_of_a_finished_run_reads_done(server: Any) -> None:
    """A run reported by this version reads "completed, phase done" with no ETA."""
    report_run(server.url, "j1")

    proc = run_cli("show", "--url", server.url, "j1", env=clean_env())

    assert 0 == proc.returncode, proc.stderr
    assert "status completed, phase done, step 3 of 3" in proc.stdout
    assert "ETA" not in proc.stdout


def test_show_401_says_how_to_pass_a_token(token_server: Any, server_token: str) -> None:
    """Without a token the error names --token-file and TRAINREPORT_TOKEN; with one it works."""
    report_run(token_server.url, "j1", token=server_token)

    missing = run_cli("show", "--url", token_server.url, "j1", env=clean_env())

    assert 1 == missing.returncode
    assert "requires a token" in missing.stderr
    assert "--token-file" in missing.stderr
    assert "TRAINREPORT_TOKEN" in missing.stderr
    assert server_token not in missing.stderr


def test_show_reads_the_token_from_a_file_or_the_environment(
    token_server: Any, server_token: str, tmp_path: Path
) -> None:
    """``--token-file``, ``TRAINREPORT_TOKEN`` and ``TRAINREPORT_TOKEN_FILE`` all work."""
    report_run(token_server.url, "j1", token=server_token)
    token_file = tmp_path / "token"
    token_file.write_text(server_token + "\n")
    cli = ("show", "--url", token_server.url, "j1")

    runs = [
        run_cli(*cli, "--token-file", str(token_file), env=clean_env()),
        run_cli(*cli, env=clean_env(TRAINREPORT_TOKEN=server_token)),
        run_cli(*cli, env=clean_env(TRAINREPORT_TOKEN_FILE=str(token_file))),
        run_cli("show", "--url", token_server.url, "--token-file", str(token_file)),
    ]

    assert [0, 0, 0, 0] == [proc.returncode for proc in runs], [p.stderr for p in runs]
    assert all("status completed" in proc.stdout for proc in runs[:3])
    assert "j1" in runs[3].stdout


def test_show_with_a_wrong_token_says_the_token_was_refused(token_server: Any) -> None:
    """A token the server refuses is named as refused (never printed)."""
    proc = run_cli("show", "--url", token_server.url, "j1", env=clean_env(TRAINREPORT_TOKEN="x1"))

    assert 1 == proc.returncode
    assert "refused the token" in proc.stderr
    assert "x1" not in proc.stderr


def test_show_404_names_the_missing_job(server: Any) -> None:
    """An unknown job is named, with the command that lists the jobs."""
    proc = run_cli("show", "--url", server.url, "nope", env=clean_env())

    assert 1 == proc.returncode
    assert f"no job 'nope' at {server.url}" in proc.stderr
    assert f"trainreport show --url {server.url}" in proc.stderr


def test_show_404_names_the_missing_task_and_the_tasks_the_job_has(server: Any) -> None:
    """A job without the asked task names both, and lists the tasks it does have."""
    report_run(server.url, "j1")

    proc = run_cli("show", "--url", server.url, "j1", "--task", "eval", env=clean_env())

    assert 1 == proc.returncode
    assert "job 'j1' has no task 'eval'" in proc.stderr
    assert "its tasks: train" in proc.stderr


def test_show_of_an_unreachable_server_names_the_url() -> None:
    """Nothing listening: exit 1 and the URL in the message."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        proc = run_cli("show", "--url", url, "j1", env=clean_env())

    assert 1 == proc.returncode
    assert f"cannot reach {url}" in proc.stderr


def test_show_without_a_source_reads_the_service_of_trainreport_url(server: Any) -> None:
    """``trainreport show JOB`` uses ``$TRAINREPORT_URL``, as the run that wrote it did."""
    report_run(server.url, "j1")

    proc = run_cli("show", "j1", env=clean_env(TRAINREPORT_URL=server.url))

    assert 0 == proc.returncode, proc.stderr
    assert "status completed, phase done, step 3 of 3" in proc.stdout


def test_show_without_a_source_or_url_names_the_local_server_it_tried() -> None:
    """No --url, --file or $TRAINREPORT_URL: the local reference server's address."""
    proc = run_cli("show", "j1", env=clean_env())

    assert "http://127.0.0.1:8321" in proc.stdout + proc.stderr


def test_show_of_a_url_ending_in_v1_drops_it_and_says_so(server: Any) -> None:
    """A base URL given with the API prefix is read without it (the rule HttpSink follows)."""
    report_run(server.url, "j1")

    for args, shown in ((("j1",), "status completed"), ((), "j1")):
        proc = run_cli("show", "--url", f"{server.url}/v1/", *args, env=clean_env())

        assert 0 == proc.returncode, proc.stderr
        assert f"using {server.url}, the base URL without /v1" in proc.stderr, proc.stderr
        assert shown in proc.stdout


def test_show_file_into_a_closed_pipe_prints_no_traceback(tmp_path: Path) -> None:
    """``show --file LOG | head -1``: the reader going away is not an error to report."""
    path = write_task(
        tmp_path,
        {
            "status": "running",
            "status_details": {
                "metrics": {f"train_m{i}": points(*range(1, 50)) for i in range(200)}
            },
        },
    )
    proc = subprocess.run(
        f"{sys.executable} -m trainreport.cli show --file {path} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=clean_env(),
    )

    assert "Traceback" not in proc.stderr
    assert "BrokenPipeError" not in proc.stderr
    assert 1 == len(proc.stdout.splitlines())


# -- show --follow ----------------------------------------------------------------------


class Screen(io.StringIO):
    """A captured stdout that says whether it is a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def task_at(status: str, step: int) -> dict[str, Any]:
    return {"status": status, "status_details": {"step": step, "max_steps": 3}}


def test_follow_redraws_until_the_task_is_terminal() -> None:
    """One summary per read, one wait of --interval between reads, none after the last."""
    reads = iter([task_at("running", 1), task_at("running", 2), task_at("completed", 3)])
    waits: list[float] = []
    out = Screen(tty=False)

    code = cli._follow(lambda: next(reads), interval_seconds=2.5, sleep=waits.append, out=out)

    assert 0 == code
    assert [2.5, 2.5] == waits
    assert ["step 1 of 3", "step 2 of 3", "step 3 of 3"] == re.findall(
        r"step \d of 3", out.getvalue()
    )
    assert "\x1b[" not in out.getvalue()  # not a terminal: no escape codes


def test_follow_clears_the_screen_before_each_summary_on_a_terminal() -> None:
    """On a terminal each summary replaces the last one."""
    reads = iter([task_at("running", 1), task_at("failed", 2)])
    out = Screen(tty=True)

    cli._follow(lambda: next(reads), interval_seconds=1.0, sleep=lambda _s: None, out=out)

    assert 2 == out.getvalue().count(cli._CLEAR_SCREEN)
    assert out.getvalue().startswith(cli._CLEAR_SCREEN)


def test_follow_ends_quietly_on_ctrl_c() -> None:
    """Ctrl-C while waiting (or reading) is the way to stop: exit 0, nothing raised."""
    out = Screen(tty=False)

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    code = cli._follow(
        lambda: task_at("running", 1), interval_seconds=1.0, sleep=interrupted, out=out
    )

    assert 0 == code
    assert "step 1 of 3" in out.getvalue()


def test_follow_keeps_going_past_a_failed_read_but_not_a_failed_first_one() -> None:
    """A read that fails (it said why) is retried; a first read that fails is exit 1."""
    reads = iter([task_at("running", 1), None, task_at("completed", 3)])
    waits: list[float] = []

    code = cli._follow(lambda: next(reads), interval_seconds=1.0, sleep=waits.append)
    first = cli._follow(lambda: None, interval_seconds=1.0, sleep=waits.append)

    assert (0, 1) == (code, first)
    assert [1.0, 1.0] == waits


def test_show_follow_of_a_finished_run_log_prints_it_once_and_exits_0(tmp_path: Path) -> None:
    """``show --file LOG --follow`` of a closed run returns at once: the task is terminal."""
    path = tmp_path / "run.log"
    reporter = log_run(path, 3, close=False)
    reporter.report_completed()
    assert reporter.close(timeout=10)

    result = run_cli("show", "--file", str(path), "--follow", "--interval", "60")

    assert 0 == result.returncode, result.stderr
    assert 1 == result.stdout.count("status completed, phase done, step 3 of 6")


def test_show_follow_of_a_finished_task_on_the_server_exits_0(server: Any) -> None:
    """``show --url URL JOB --follow`` reads the server the same way."""
    report_run(server.url, "j1")

    result = run_cli("show", "--url", server.url, "j1", "-f", "--interval", "60", env=clean_env())

    assert 0 == result.returncode, result.stderr
    assert 1 == result.stdout.count("status completed, phase done, step 3 of 3")


def test_show_follow_without_a_job_is_a_usage_error(server: Any) -> None:
    """Following needs one task: the job list is not followed."""
    result = run_cli("show", "--url", server.url, "--follow", env=clean_env())

    assert 2 == result.returncode
    assert "--follow needs a JOB_ID" in result.stderr


# -- the command itself -----------------------------------------------------------------


def test_version_prints_the_installed_version() -> None:
    """``trainreport --version`` prints the package version and exits 0."""
    proc = run_cli("--version")

    assert (0, f"trainreport {importlib.metadata.version('trainreport')}") == (
        proc.returncode,
        proc.stdout.strip(),
    )


def _option_help(help_text: str, option: str) -> str:
    """The description of ``option`` in argparse's help, on one line."""
    match = re.search(
        rf"^  {option}\b[^\n]*?(?:\s{{2,}}|\n)(.*?)(?=^  -|\Z)", help_text, re.M | re.S
    )
    assert match is not None, help_text
    return " ".join(match.group(1).split())


def test_demo_help_explains_interval_in_whole_sentences() -> None:
    """``demo --help`` says what --interval is without a cut-off sentence."""
    proc = run_cli("demo", "--help")
    interval = _option_help(proc.stdout, "--interval")

    assert 0 == proc.returncode
    assert "the run is (" not in interval
    assert re.fullmatch(r"[A-Za-z].*seconds.*\(default: 0\.2\)", interval), interval


def test_serve_on_a_busy_port_exits_1_and_leaves_no_database(tmp_path: Path) -> None:
    """A port in use is reported before anything is created: no empty database is left."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("serve", "--db", str(tmp_path / "runs.db"), "--port", str(port))

    assert 1 == proc.returncode
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert [] == sorted(p.name for p in tmp_path.iterdir())


def test_no_name_of_the_cli_package_is_also_one_of_its_submodules() -> None:
    """A handler named like a submodule (``_sync`` beside ``cli/_sync.py``) is replaced.

    Importing ``trainreport.cli._sync`` binds the module to the package's name
    ``_sync``, so a parser built after the first ``sync`` would call the module
    (``TypeError: 'module' object is not callable``) and a second command in one
    process fails.
    """
    import ast  # noqa: PLC0415 - next to its only use
    import pkgutil  # noqa: PLC0415

    package = Path(cli.__file__).parent
    submodules = {info.name for info in pkgutil.iter_modules([str(package)])}
    tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
    } | {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert set() == defined & submodules
