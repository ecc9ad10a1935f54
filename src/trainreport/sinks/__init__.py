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
from trainreport._wire._protocol import ID_PATTERN as _ID_PATTERN
from trainreport._wire._sink_interface import (
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
from trainreport.sinks._http._sink import HttpSink
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
    "default_sinks_from_env",
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


def _kubeflow_sink(destination: _environment.KubeflowDestination) -> Sink | None:
    """A :class:`KubeflowSink` for the TrainJob's endpoint, or None (logged) when unusable."""
    try:
        return KubeflowSink.from_destination(destination)
    except _exceptions.ConfigError as exc:
        _log.warning(
            "trainreport.config_field_invalid",
            field="url",
            variable=_environment.KUBEFLOW_URL,
            problem="; ".join(exc.problems)[:300],
        )
        return None


def default_sinks_from_env(environ: Mapping[str, str] | None = None) -> list[Sink]:
    """The destinations a job system's environment asks for (``Reporter.from_env()``).

    ``TRAINREPORT_URL`` and ``KUBEFLOW_TRAINER_SERVER_URL`` both set: two
    destinations, the job-status service's :class:`HttpSink` first (a resume
    reads its curves; the TrainJob status keeps none) and the TrainJob's
    :class:`KubeflowSink` second, so a job gets Kubeflow's progress bar and
    trainreport's full curves at once. Otherwise the one sink of
    :func:`default_sink_from_env`. The environment is read once
    (``trainreport._environment.read_destinations``).

    Args:
        environ: the environment (default ``os.environ``).

    Never raises for bad values (an unusable Kubeflow URL is logged and left out).
    """
    settings = _environment.read_destinations(environ)
    if settings.http is None:
        return [_first_sink(settings)]
    http: Sink = HttpSink.from_destination(settings.http)
    kubeflow = None if settings.kubeflow is None else _kubeflow_sink(settings.kubeflow)
    return [http] if kubeflow is None else [http, kubeflow]


def default_sink_from_env(environ: Mapping[str, str] | None = None) -> Sink:
    """The sink a job system's environment asks for.

    The variables are docs/configuration.md#other-trainreport_-variables.

    The environment is read once (``trainreport._environment.read_destinations``,
    which also names each misspelled ``TRAINREPORT_*`` variable):

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
    return _first_sink(_environment.read_destinations(environ))


def _first_sink(settings: _environment.DestinationSettings) -> Sink:
    """The first destination of ``settings``: the service, else Kubeflow, else the file."""
    if settings.http is not None:
        return HttpSink.from_destination(settings.http)
    if settings.kubeflow is not None:
        kubeflow = _kubeflow_sink(settings.kubeflow)
        if kubeflow is not None:
            return kubeflow
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
