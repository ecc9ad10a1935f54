"""Sinks: where a Reporter's updates go (docs/design.md#public-api).

``MemorySink`` (tests, notebooks), ``FileSink`` (a run log on local disk, the
embedded default), ``HttpSink`` (a job-status service), ``KubeflowSink`` (Kubeflow
Trainer's TrainJob status), and the :class:`Sink` interface to write your own.
"""

from __future__ import annotations

import datetime
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from trainreport import _environment, _logging
from trainreport import exceptions as _exceptions
from trainreport._protocol import ID_PATTERN as _ID_PATTERN
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
from trainreport.sinks._file import FileSink
from trainreport.sinks._http import HttpSink
from trainreport.sinks._kubeflow import KubeflowSink
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
    "default_file_sink",
    "default_sink_from_env",
    "new_run_id",
    "run_name_from_env",
]

#: Where the embedded default FileSink writes when no URL is configured.
DEFAULT_RUNS_DIRECTORY = "trainreport-runs"
_log = _logging.get_logger()


def new_run_id() -> str:
    """A run id unique per run: UTC time, pid and random bits (``run-20261129-160339-42-a1b2``)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{os.getpid()}-{secrets.token_hex(2)}"


def run_name_from_env(environ: Mapping[str, str] | None = None) -> str:
    """The run's name: ``TRAINREPORT_JOB_ID`` when set, else a fresh :func:`new_run_id`.

    Args:
        environ: the environment (default ``os.environ``).

    Never raises.
    """
    env = os.environ if environ is None else environ
    return str(env.get(_environment.JOB_ID, "")).strip() or new_run_id()


def default_sink_from_env(environ: Mapping[str, str] | None = None) -> Sink:
    """The sink a job system's environment asks for.

    The variables are docs/configuration.md#other-trainreport_-variables.

    The environment is read once (``trainreport._environment.read_destinations``,
    which also names each misspelled ``TRAINREPORT_*`` variable):

    - ``TRAINREPORT_URL`` set: an :class:`HttpSink` for ``TRAINREPORT_JOB_ID`` /
      ``TRAINREPORT_TASK_ID`` (default ``train``) with the token from
      ``TRAINREPORT_TOKEN`` or ``TRAINREPORT_TOKEN_FILE``. When
      ``KUBEFLOW_TRAINER_SERVER_URL`` is set too, it is not used yet (one
      reporter sends to one sink): ``trainreport.kubeflow_not_used`` is logged.
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
    settings = _environment.read_destinations(environ)
    if settings.http is not None:
        if settings.kubeflow is not None:
            _log.warning(
                "trainreport.kubeflow_not_used",
                reason="TRAINREPORT_URL is set too and a reporter sends to one destination; "
                "the Kubeflow TrainJob status gets no progress from this reporter",
                variable=_environment.KUBEFLOW_URL,
            )
        return HttpSink.from_destination(settings.http)
    if settings.kubeflow is not None:
        try:
            return KubeflowSink.from_destination(settings.kubeflow)
        except _exceptions.ConfigError as exc:
            _log.warning(
                "trainreport.config_field_invalid",
                field="url",
                variable=_environment.KUBEFLOW_URL,
                problem="; ".join(exc.problems)[:300],
            )
    return default_file_sink(settings.job_id, settings.task_id)


def default_file_sink(job_id: str | None, task_id: str = "train") -> FileSink:
    """The embedded default: a :class:`FileSink` under ``./trainreport-runs/``.

    Args:
        job_id: the job's id (``None``: a fresh unique run id names the file).
        task_id: the task's id; a task other than ``train`` is part of the name.

    Never raises for bad values: an unsafe job id is logged and replaced.
    """
    run_id = new_run_id()
    if job_id:
        candidate = job_id if task_id == "train" else f"{job_id}.{task_id}"
        if _ID_PATTERN.fullmatch(candidate):
            run_id = candidate
        else:
            _log.warning("trainreport.unsafe_run_id", replaced_by=run_id)
    return FileSink(
        Path(DEFAULT_RUNS_DIRECTORY) / f"{run_id}.log",
        job_id=job_id or run_id,
        task_id=task_id,
    )
