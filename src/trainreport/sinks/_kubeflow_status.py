"""Kubeflow Trainer's TrainJob status endpoint: the contract and the request body (pure).

The contract, re-read in kubeflow/trainer v2.3.0 (tag ``v2.3.0``, commit
658725bdae5c7e3a0854d93ac6ff492e109a22ab): the status server in
``pkg/statusserver/`` (``server.go``, ``middleware.go``, ``auth.go``,
``utils.go``), the ``TrainerStatus`` / ``Metric`` /
``UpdateTrainJobStatusRequest`` types in
``pkg/apis/trainer/v1alpha1/trainjob_types.go`` and the ``TrainJobStatus``
runtime plugin in ``pkg/runtime/framework/plugins/trainjobstatus/``; stated
in ``docs/integrations.md``:

- Behind the alpha feature gate ``TrainJobStatus`` (off by default,
  ``pkg/features/features.go``). The server runs in the controller manager,
  HTTPS only, on port 10443 (``StatusServer.Port``), with the webhook's
  certificate; the plugin injects ``KUBEFLOW_TRAINER_SERVER_URL``
  (``https://<webhook service>.<operator namespace>.svc:10443`` + the path),
  ``KUBEFLOW_TRAINER_SERVER_CA_CERT`` and ``KUBEFLOW_TRAINER_SERVER_TOKEN``
  (files under ``/var/run/secrets/kubeflow/trainer/``).
- ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status``,
  ``Authorization: Bearer <projected service-account token>``: the token is
  verified against the cluster's OIDC issuer (signature, expiry, the
  audience ``trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status``
  of that one TrainJob, and the pod's namespace); it is projected with
  ``expirationSeconds: 3600``. JSON body ``{"trainerStatus":
  {"progressPercentage": 0..100, "estimatedRemainingSeconds": 0..2**31-1,
  "metrics": [{"name": 1..64 chars, "value": 1..64 chars}] (at most 256),
  "lastUpdatedTime": RFC 3339}}``; the body is capped at 64 KiB.
- Each post replaces the stored trainer status (server-side apply of the whole
  field, ``metrics`` an atomic list): there is no history and nothing to read back.
- 413: ``Content-Length`` over 64 KiB (checked first); 404: another path or
  method, or a TrainJob that does not exist; 403: any token it refuses
  (never 401); 422: undecodable payload or a field limit broken; 500:
  anything else (the body of every error a Kubernetes ``Status``).

Nothing here does I/O; :func:`build_body` is used by
:class:`trainreport.sinks.KubeflowSink` and its tests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs

from trainreport._record._selection import matches

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_METRICS",
    "MAX_NAME_CHARS",
    "MAX_REMAINING_SECONDS",
    "MAX_VALUE_CHARS",
    "MIN_INTERVAL_SECONDS",
    "Body",
    "MetricPriority",
    "build_body",
    "format_value",
]

#: The endpoint's guidance (kubeflow/trainer v2.3, its user guide "TrainJob Progress"; its SDK's
#: and the Hugging Face callback's throttle): one post per 5 s.
MIN_INTERVAL_SECONDS: Final[float] = 5.0
#: ``metrics`` items per post (``TrainerStatus.Metrics``, ``+kubebuilder:validation:MaxItems=256``).
MAX_METRICS: Final[int] = 256
#: Request body cap of the status server (``pkg/statusserver/server.go``, ``1 << 16``), bytes.
MAX_BODY_BYTES: Final[int] = 64 * 1024
#: ``Metric.name`` length limit (``MaxLength=64``), characters.
MAX_NAME_CHARS: Final[int] = 64
#: ``Metric.value`` length limit (``MaxLength=64``), characters.
MAX_VALUE_CHARS: Final[int] = 64
#: ``estimatedRemainingSeconds`` is an ``int32``.
MAX_REMAINING_SECONDS: Final[int] = 2**31 - 1

#: Floats that are whole numbers below this magnitude are written as integers (exact).
_EXACT_INTEGER: Final[float] = 2.0**53
#: Significant digits of every other float.
_DIGITS: Final[int] = 8
#: Bookkeeping fields sent as metrics first, in this order.
_BOOKKEEPING: Final[tuple[str, ...]] = (
    "phase",
    "step",
    "max_steps",
    "epoch",
    "num_epochs",
    "checkpoint_step",
    "cancel_reason",
)
_TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})

#: Other losses: names ending in ``loss`` (``train_aux_loss``, ``val_squad_loss``).
_LOSS_GLOB: Final[str] = "*loss"
#: Learning rates (``train_lr``, ``train_learning_rate``, ``train_group0_lr``).
_LEARNING_RATE_GLOBS: Final[tuple[str, ...]] = ("lr", "*_lr", "*learning_rate")
#: The default tiers, in the order they are posted (after the user's globs, tier 0).
_PHASE_LOSS, _LOSS, _LEARNING_RATE, _SERIES, _REST = 1, 2, 3, 4, 5
_T = TypeVar("_T")


def _is_phase_loss(name: str) -> bool:
    """``loss`` or ``<phase>_loss``: ``train_loss``, ``val_loss``, ``test_loss``."""
    phase, _, rest = name.rpartition("_")
    return name == "loss" or (rest == "loss" and bool(phase) and "_" not in phase)


class MetricPriority:
    """Which current values a post carries first, so the 256 it can hold are the ones read first.

    The rule (``docs/integrations.md``, "Which metrics come first"), by
    qualified name, each tier in arrival order (a stable sort):

    0. names matching the user's globs (``KubeflowSink(metrics=...)``,
       ``TRAINREPORT_KUBEFLOW_METRICS``), in the order of the first glob each
       matches;
    1. the loss of each phase: ``train_loss``, ``val_loss``, ``test_loss``
       (``<phase>_loss``);
    2. every other name ending in ``loss`` (``train_aux_loss``, ``val_squad_loss``);
    3. learning rates: ``lr``, ``*_lr``, ``*learning_rate``;
    4. the series: the names the run's ``time_series_metrics`` keeps a history
       of (as :class:`trainreport._record._selection.SeriesSelector` decided them);
    5. the rest (the scalars).

    Globs match as ``time_series_metrics`` does
    (:func:`trainreport._record._selection.matches`). A name's tier by pattern is
    decided once and remembered. Not thread-safe (the reporter thread's).

    Args:
        first: the user's globs, already checked (``_record._selection.check_globs``).
    """

    def __init__(self, first: Sequence[str] = ()) -> None:
        self.first = tuple(first)
        self._by_pattern: dict[str, tuple[int, int] | None] = {}

    def _pattern_rank(self, name: str) -> tuple[int, int] | None:
        for index, pattern in enumerate(self.first):
            if matches(name, pattern):
                return (0, index)
        if _is_phase_loss(name):
            return (_PHASE_LOSS, 0)
        if matches(name, _LOSS_GLOB):
            return (_LOSS, 0)
        if any(matches(name, pattern) for pattern in _LEARNING_RATE_GLOBS):
            return (_LEARNING_RATE, 0)
        return None

    def rank(self, name: str, *, is_series: bool) -> tuple[int, int]:
        """``(tier, index of the user's glob)``: smaller comes first. Never raises for a ``str``."""
        try:
            by_pattern = self._by_pattern[name]
        except KeyError:
            by_pattern = self._by_pattern[name] = self._pattern_rank(name)
        if by_pattern is not None:
            return by_pattern
        return (_SERIES, 0) if is_series else (_REST, 0)

    def order(
        self, metrics: Iterable[tuple[str, _T]], *, series: Container[str]
    ) -> list[tuple[str, _T]]:
        """``metrics`` (in arrival order) in posting order; each tier keeps arrival order.

        Args:
            metrics: ``(qualified name, current value)`` pairs, first arrived first.
            series: the names that are series (tier 4).

        Returns:
            The same pairs, reordered. Never raises for ``str`` names.
        """
        return sorted(metrics, key=lambda item: self.rank(item[0], is_series=item[0] in series))


def format_value(value: object) -> str:
    """A metric value as the endpoint's string: compact, and exact where a person needs it.

    - ``int`` (and whole floats below 2**53): every digit (``4096``, ``123456789``);
    - other floats: 8 significant digits, shortest form (``0.1``, ``2.3025851``,
      ``1e-05``, ``1.2345679e+20``): a relative error of at most 5e-8, at
      most 15 characters;
    - NaN and infinities: ``NaN``, ``+Inf``, ``-Inf``;
    - text: as given, cut at 64 characters.

    Args:
        value: a number or a string.

    Returns:
        The text, 0 to 64 characters (empty only for an empty string). Never raises.
    """
    if isinstance(value, str):
        return value[:MAX_VALUE_CHARS]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)[:MAX_VALUE_CHARS]
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return str(value)[:MAX_VALUE_CHARS]
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number.is_integer() and abs(number) < _EXACT_INTEGER:
        return str(int(number))
    return format(number, f".{_DIGITS}g")


@attrs.frozen
class Body:
    """One request body and what it had to leave out.

    Attributes:
        data: the JSON body, UTF-8, at most :data:`MAX_BODY_BYTES`.
        metric_count: metrics in the body.
        left_out: ``(name, reason)`` for each metric that is not in it.
    """

    data: bytes
    metric_count: int
    left_out: tuple[tuple[str, str], ...]


def _encode(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _progress(status: str | None, details: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    done = details.get("percentage_done")
    if status == "completed":
        out["progressPercentage"] = 100
    elif isinstance(done, int | float) and math.isfinite(done):
        out["progressPercentage"] = min(max(math.floor(done), 0), 100)
    eta = details.get("eta_seconds")
    if status == "completed":
        out["estimatedRemainingSeconds"] = 0
    elif status not in _TERMINAL and isinstance(eta, int | float) and math.isfinite(eta):
        out["estimatedRemainingSeconds"] = min(max(round(eta), 0), MAX_REMAINING_SECONDS)
    return out


def _bookkeeping(status: str | None, details: Mapping[str, Any]) -> list[tuple[str, object]]:
    entries: list[tuple[str, object]] = []
    if status is not None:
        entries.append(("status", status))
    for key in _BOOKKEEPING:
        value = details.get(key)
        if value is not None and not isinstance(value, dict | list):
            entries.append((key, value))
    error = details.get("error")
    if isinstance(error, Mapping):
        entries.append(("error", f"{error.get('type', '')}: {error.get('message', '')}"))
    return entries


def build_body(
    *,
    status: str | None,
    details: Mapping[str, Any],
    metrics: Iterable[tuple[str, object]],
    updated_at: str,
) -> Body:
    """The request body for the current state, within every limit of the contract.

    ``metrics`` keeps its order (the sink's :class:`MetricPriority`);
    bookkeeping (``status``, ``phase``, ``step``, ``max_steps``, ``epoch``,
    ``num_epochs``, ``checkpoint_step``, ``cancel_reason``, ``error``) comes
    before them. A metric whose name is empty or longer than 64 characters,
    whose value formats to nothing, beyond the 256th, or that would take the
    body over 64 KiB is left out and named in :attr:`Body.left_out`; a later,
    smaller one may still fit.

    Args:
        status: the task status (``running``, ``completed``, ...), or ``None``.
        details: the merged ``status_details`` (``percentage_done``,
            ``eta_seconds``, the bookkeeping keys).
        metrics: ``(qualified name, current value)`` pairs.
        updated_at: the observation time, RFC 3339 (``2026-11-29T16:03:39Z``).

    Returns:
        The :class:`Body`. Never raises for numbers and strings.
    """
    trainer_status: dict[str, Any] = _progress(status, details)
    trainer_status["lastUpdatedTime"] = updated_at
    trainer_status["metrics"] = []
    used = len(_encode({"trainerStatus": trainer_status}))
    chosen: list[dict[str, str]] = []
    left_out: list[tuple[str, str]] = []
    for name, value in [*_bookkeeping(status, details), *metrics]:
        text = format_value(value)
        if not name or len(name) > MAX_NAME_CHARS:
            left_out.append((name, f"name longer than {MAX_NAME_CHARS} characters"))
            continue
        if not text:
            left_out.append((name, "empty value"))
            continue
        if len(chosen) >= MAX_METRICS:
            left_out.append((name, f"more than {MAX_METRICS} metrics"))
            continue
        entry = {"name": name, "value": text}
        size = len(_encode(entry)) + (1 if chosen else 0)
        if used + size > MAX_BODY_BYTES:
            left_out.append((name, f"body over {MAX_BODY_BYTES} bytes"))
            continue
        chosen.append(entry)
        used += size
    trainer_status["metrics"] = chosen
    data = _encode({"trainerStatus": trainer_status})
    return Body(data=data, metric_count=len(chosen), left_out=tuple(left_out))
