"""The report calls that record progress and metrics, the hot path among them.

Every method here copies its arguments on the caller's thread (turning
tensor-like values into plain numbers: a tensor's value is taken at call time;
a CUDA tensor's by a copy that does not wait for the device, ``_device.py``),
appends one report to the queue and returns; it never raises and never blocks
on I/O (docs/design.md#public-api, #guarantees). ``report_train_step`` is the
hot path: it inlines the queue's append, guard and wake test and the
building of its report, because each function call is a measurable share of
a one-microsecond call (``docs/performance.md``). One call in ``TIMED_EVERY``
is timed (``_histogram``); its duration is one ``array.append``, folded into
the latency histogram off the hot path, where it stands for ``TIMED_EVERY`` calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from time import perf_counter_ns
from typing import Any

from trainreport import _reports as reports
from trainreport._params import MAX_PARAM_ITEMS, flatten_params_bounded
from trainreport._report_queue import UNTIMED_MASK, ReportQueue, report_call, safe_str
from trainreport._reports import (
    HEADER_KEYS,
    REPORT_BYTES,
    TRAIN_EPOCH,
    TRAIN_STEP,
    TRAIN_TIME,
    VALUE_BYTES,
    queued_bytes,
)
from trainreport._values import MetricValue

__all__ = ["ReportCalls"]

_train = reports.train
_to_numbers = reports.to_numbers
_deferred = reports.deferred
#: Epochs the short form carries as they are (anything else takes the general form).
_EPOCH_TYPES = frozenset({int, float, type(None)})


class ReportCalls(ReportQueue):
    """Training-step, validation, metrics and event reports (a base of ``Reporter``)."""

    def _put_train(self, step: object, epoch: object, metrics: object) -> None:
        """Queue a training step's general form (a ``TRAIN`` tuple; no wake here)."""
        item = _train(self._clock(), step, epoch, metrics)
        self._queue.append(item)
        self._queued_bytes += queued_bytes(item)

    def report_train_step(
        self,
        *,
        step: int | None = None,
        epoch: float | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
    ) -> None:
        """Report one completed optimizer step and its metrics (stored as ``train_<name>``).

        Args:
            step: 1-based count of completed optimizer steps (int; numpy/tensor ints accepted).
                Omitted (``None``): the last training step recorded + 1, as wandb
                and Trackio count, whether that step was given or omitted; the
                first omitted step of a run is 1, or the stored last training
                step + 1 when the run resumes a stored task
                (docs/design.md#metrics). Resolved on the reporter thread.
            epoch: the epoch the step falls in: an int index (0-based if the
                run's first int epoch is 0) or a float of epochs completed (HF);
                see docs/design.md#metrics. ``None`` keeps the last epoch.
            metrics: metric name -> number (CPU tensors and numpy scalars are
                converted here with ``.item()``; a CUDA tensor is copied off
                the device without a sync, docs/design.md#device-values).

        Never raises, never blocks on I/O; bad values are dropped with one log event each.
        """
        self._train_calls = (calls := self._train_calls) + 1  # one line: no switch inside
        t0 = 0 if calls & UNTIMED_MASK else perf_counter_ns()  # one call in TIMED_EVERY
        try:  # the hot path: one copy, one append, no lock, no Event.set
            if self._accepting and self._queued_bytes < self._max_queue_bytes:
                queue = self._queue
                if (
                    type(metrics) is dict
                    and (type(step) is int or step is None)
                    and type(epoch) in _EPOCH_TYPES
                ):
                    # the short form (_reports): the copy is the report
                    copied = metrics.copy()
                    pending = None  # device values on their way (_device), if any
                    try:  # one C loop: a float sum means every value is an int or a float
                        if type(sum(copied.values(), 0.0)) is not float:
                            pending = _to_numbers(copied)  # on the copy: one copy in all
                    except Exception:  # a value sum() cannot add (_to_numbers never raises)
                        pending = _to_numbers(copied)
                    n = len(copied)
                    copied[TRAIN_TIME] = self._clock()
                    copied[TRAIN_STEP] = step
                    copied[TRAIN_EPOCH] = epoch
                    if len(copied) == n + HEADER_KEYS:
                        queue.append(copied if pending is None else _deferred(copied, pending))
                        self._queued_bytes += REPORT_BYTES + VALUE_BYTES * n  # = queued_bytes()
                    else:  # a metric under a header key: the general form keeps it
                        self._put_train(step, epoch, metrics)
                else:
                    self._put_train(step, epoch, metrics)
                if len(queue) >= self._wake_depth:  # the first point, or a deep queue
                    self._wake_for_depth()
            else:
                self._refuse_report()
        except Exception as exc:
            self._failed("report_train_step", exc)
        if t0:
            self._sampled.append(perf_counter_ns() - t0)  # folded off this thread (_histogram)

    @report_call
    def report_validation(
        self,
        *,
        step: int,
        epoch: float | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
        dataset: str | None = None,
    ) -> None:
        """Report validation metrics at ``step`` (stored as ``val_<name>``, docs/design.md#metrics).

        Args:
            step: the training step the validation belongs to.
            epoch: as in :meth:`report_train_step`.
            metrics: metric name -> number; ``eval_``/``val_`` prefixes are not doubled.
            dataset: validation dataset name; the first dataset keeps plain
                ``val_`` names, others get ``val_<dataset>_<name>``.

        Never raises, never blocks on I/O.
        """
        self._put(reports.validation(self._clock(), step, epoch, metrics, dataset), wake=False)

    @report_call
    def report_metrics(
        self, *, step: int, metrics: Mapping[str, MetricValue] | None, phase: str
    ) -> None:
        """Report metrics of another phase (``test``, or a stream such as ``system``).

        Stored as ``<phase>_<name>``; never moves training progress or the phase.

        Args:
            step: the step the metrics belong to.
            metrics: metric name -> number.
            phase: an identifier such as ``"test"`` or ``"system"``.

        Never raises, never blocks on I/O.
        """
        self._put(reports.metrics_report(self._clock(), step, metrics, phase), wake=False)

    @report_call
    def report_training_start(
        self, *, max_steps: int | None = None, num_epochs: int | None = None
    ) -> None:
        """Report that training begins (phase ``training``); sent at once.

        Args:
            max_steps: total optimizer steps planned (for ``percentage_done`` and ETA).
            num_epochs: epochs planned (caps the epoch of each point).

        Never raises, never blocks on I/O.
        """
        self._put(reports.training_start(self._clock(), max_steps, num_epochs), wake=True)

    @report_call
    def report_hyperparameters(self, *, params: Mapping[str, Any]) -> None:
        """Report hyperparameters, flattened with ``/`` and stored once as ``hyperparameters``.

        Args:
            params: a (nested) mapping; values that are not JSON scalars are
                stored as strings. At most ``MAX_PARAM_ITEMS`` (10,000) items
                are flattened on the caller's thread (each key and each element
                of a list counts one); keys past that are left out, counted
                (``hyperparameters_truncated``) and logged once. A value too
                large for any request to the destination is dropped there
                (``field_too_large``) and never holds back the curves.

        Never raises, never blocks on I/O.
        """
        given: object = params  # callers may pass anything; never trust the annotation
        if isinstance(given, Mapping):
            # Bounded: the caller's thread never flattens more than MAX_PARAM_ITEMS items.
            flat, left_out = flatten_params_bounded(given, MAX_PARAM_ITEMS)
        else:
            flat, left_out = None, 0
        if flat is None:
            self._once.warning(
                "hyperparameters",
                "trainreport.report_dropped",
                report="report_hyperparameters",
                reason="params is not a mapping",
            )
        else:
            self._put(reports.hyperparameters(self._clock(), flat, left_out), wake=False)

    @report_call
    def report_epoch_end(self, *, epoch: float) -> None:
        """Report that ``epoch`` ended (same epoch rule as train steps); sent at once.

        Never raises, never blocks on I/O.
        """
        self._put(reports.epoch_end(self._clock(), epoch), wake=True)

    @report_call
    def report_checkpoint_saved(self, *, path: object, step: int | None = None) -> None:
        """Report a saved checkpoint (``checkpoint_path``, phase ``checkpointing``); sent at once.

        Args:
            path: where the checkpoint is (str or ``os.PathLike``; stored as text).
                ``None`` or an empty path is never sent: the report is logged
                once and the last good ``checkpoint_path`` stays.
            step: the step it holds.

        Never raises, never blocks on I/O.
        """
        text = (
            None
            if path is None
            else safe_str(os.fspath(path) if isinstance(path, os.PathLike) else path)
        )
        self._put(reports.checkpoint(self._clock(), text, step), wake=True)
