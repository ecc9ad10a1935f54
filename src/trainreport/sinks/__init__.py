"""Sinks: where a Reporter's updates go (DESIGN §2).

``MemorySink`` (tests, notebooks), ``FileSink`` (a run log on local disk, the
embedded default), ``HttpSink`` (a job-status service), ``KubeflowSink`` (Kubeflow
Trainer's TrainJob status), and the :class:`Sink` interface to write your own.
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from trainreport._logging import get_logger
from trainreport._sink import (
    CAPABILITY_GZIP,
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Rejected,
    Resynchronise,
    RetryLater,
    SendResult,
    SeriesUpdate,
    Sink,
    Split,
    Update,
)
from trainreport.exceptions import ConfigError
from trainreport.sinks._file import FileSink
from trainreport.sinks._http import HttpSink
from trainreport.sinks._kubeflow import KubeflowSink
from trainreport.sinks._kubeflow_status import ENV_URL as KUBEFLOW_URL_VARIABLE
from trainreport.sinks._memory import MemorySink

__all__ = [
    "CAPABILITY_GZIP",
    "CAPABILITY_SERIES_SUFFIX",
    "DEFAULT_RUNS_DIRECTORY",
    "Delivered",
    "FileSink",
    "HttpSink",
    "KubeflowSink",
    "MemorySink",
    "OpenResult",
    "Opened",
    "Rejected",
    "Resynchronise",
    "RetryLater",
    "SendResult",
    "SeriesUpdate",
    "Sink",
    "Split",
    "Update",
    "default_sink_from_env",
    "default_sinks_from_env",
    "new_run_id",
]

#: Where the embedded default FileSink writes when no URL is configured.
DEFAULT_RUNS_DIRECTORY = "trainreport-runs"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_log = get_logger()


def new_run_id() -> str:
    """A run id unique per run: UTC time, pid and random bits (``run-20261129-160339-42-a1b2``)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{os.getpid()}-{secrets.token_hex(2)}"


def _kubeflow_from_env(env: Mapping[str, str]) -> Sink | None:
    """A :class:`KubeflowSink` from the TrainJob's variables, or None (logged) when unusable."""
    try:
        return KubeflowSink.from_env(env)
    except ConfigError as exc:
        _log.warning(
            "trainreport.invalid_environment",
            variable=KUBEFLOW_URL_VARIABLE,
            reason="; ".join(exc.problems)[:300],
        )
        return None


def default_sinks_from_env(environ: Mapping[str, str] | None = None) -> list[Sink]:
    """The destinations a job system's environment asks for (``Reporter.from_env()``).

    ``TRAINREPORT_URL`` and ``KUBEFLOW_TRAINER_SERVER_URL`` both set: two
    destinations, the job-status service's :class:`HttpSink` first (a resume
    reads its curves; the TrainJob status keeps none) and the TrainJob's
    :class:`KubeflowSink` second, so a job gets Kubeflow's progress bar and
    trainreport's full curves at once. Otherwise the one sink of
    :func:`default_sink_from_env`.

    Args:
        environ: the environment (default ``os.environ``).

    Never raises for bad values (an unusable Kubeflow URL is logged and left out).
    """
    env = os.environ if environ is None else environ
    first = default_sink_from_env(env)
    if isinstance(first, HttpSink) and env.get(KUBEFLOW_URL_VARIABLE, "").strip():
        kubeflow = _kubeflow_from_env(env)
        if kubeflow is not None:
            return [first, kubeflow]
    return [first]


def default_sink_from_env(environ: Mapping[str, str] | None = None) -> Sink:
    """The sink a job system's environment asks for (DESIGN §2).

    - ``TRAINREPORT_URL`` set: an :class:`HttpSink` for ``TRAINREPORT_JOB_ID`` /
      ``TRAINREPORT_TASK_ID`` (default ``train``) with the token from
      ``TRAINREPORT_TOKEN`` or ``TRAINREPORT_TOKEN_FILE`` (with
      ``KUBEFLOW_TRAINER_SERVER_URL`` set too, :func:`default_sinks_from_env`
      adds a :class:`KubeflowSink` as a second destination).
    - else ``KUBEFLOW_TRAINER_SERVER_URL`` set (inside a Kubeflow TrainJob): a
      :class:`KubeflowSink` (an unusable URL is logged and falls through to the
      file).
    - otherwise a :class:`FileSink` writing the run log
      ``./trainreport-runs/<run id>.log`` (and ``<run id>.json``, the task
      record, at close), where the run id is ``TRAINREPORT_JOB_ID`` (with
      ``.<TRAINREPORT_TASK_ID>`` when the task is not ``train``) when it is a
      safe file name (so a job resumes its own log) and a fresh unique id
      otherwise (so a second run never rewinds the first). The log records
      the job and task ids for ``trainreport sync``.

    Args:
        environ: the environment (default ``os.environ``).

    Never raises for bad values: an unsafe job id is logged and replaced.
    """
    env = os.environ if environ is None else environ
    url = env.get("TRAINREPORT_URL", "").strip()
    kubeflow_url = env.get(KUBEFLOW_URL_VARIABLE, "").strip()
    job_id = env.get("TRAINREPORT_JOB_ID", "").strip()
    if url:
        return HttpSink.from_env(env)
    if kubeflow_url:
        kubeflow = _kubeflow_from_env(env)
        if kubeflow is not None:
            return kubeflow
    run_id = new_run_id()
    task_id = env.get("TRAINREPORT_TASK_ID", "").strip() or "train"
    if job_id:
        candidate = job_id if task_id == "train" else f"{job_id}.{task_id}"
        if _SAFE_ID.match(candidate):
            run_id = candidate
        else:
            _log.warning("trainreport.unsafe_run_id", replaced_by=run_id)
    return FileSink(
        Path(DEFAULT_RUNS_DIRECTORY) / f"{run_id}.log",
        job_id=job_id or run_id,
        task_id=task_id,
    )
