"""Metric names for the recorder: qualify, admit (series or scalar, name cap), cache.

Each ``(phase, dataset qualifier)`` has a table from the caller's raw key to
what it resolved to: ``(qualified name, the Series to append to)``,
``(qualified name, None)`` for a scalar or a name two keys share (``loss``
and ``eval_loss`` both become ``val_loss``), or ``None`` for a refused key
(logged once when first seen). The name cap applies before anything per
name is kept: refused keys are cached only up to a bound in all, and tables
only up to a bound, so a loop that logs ``metric_{step}``, or a new phase or
dataset per step, cannot grow memory past the cap (docs/design.md#metrics).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from trainreport._logging import describe_exception, get_logger
from trainreport._record._name_rules import qualify
from trainreport._record._run_record import RunRecord
from trainreport._record._store import Series
from trainreport._wire._protocol import check_name

__all__ = ["RESERVED_KEYS", "Entry", "NameTables"]

#: ``status_details`` keys that belong to the reporter; a metric whose
#: qualified name equals one of them is dropped (it would overwrite them).
RESERVED_KEYS = frozenset(
    {
        "phase",
        "step",
        "epoch",
        "max_steps",
        "num_epochs",
        "percentage_done",
        "eta_seconds",
        "updated_at",
        "checkpoint_path",
        "checkpoint_step",
        "metrics",
        "val_datasets",
        "hyperparameters",
        "error",
        "cancel_reason",
    }
)

#: What a raw key resolved to (see the module docstring).
Entry = tuple[str, Series | None] | None
_log = get_logger()


class NameTables:
    """The per-``(phase, qualifier)`` tables of resolved keys.

    Args:
        record: the attempt's shared record.

    Attributes:
        version: bumped whenever any table changes (a cached plan built from
            the tables is current only while it is unchanged).
    """

    __slots__ = ("_max_cached", "_record", "_refused_cached", "tables", "version")

    def __init__(self, record: RunRecord) -> None:
        self._record = record
        self.tables: dict[tuple[str, str | None], dict[object, Entry]] = {}
        self._max_cached = 4 * record.config.max_metric_names
        self._refused_cached = 0
        self.version = 0

    def table(self, phase: str, qualifier: str | None) -> dict[object, Entry]:
        """The table of ``(phase, qualifier)`` (a throwaway one past the bound)."""
        names = self.tables.get((phase, qualifier))
        if names is None:
            names = {}
            if len(self.tables) < self._max_cached:
                self.tables[(phase, qualifier)] = names
        return names

    def clear(self) -> None:
        """Forget every table (cached entries may hold series that were replaced)."""
        self.tables.clear()
        self.version += 1

    def resolve(
        self,
        raw_name: object,
        phase: str,
        qualifier: str | None,
        report: str,
        names: dict[object, Entry],
    ) -> Entry:
        """Resolve a key not in ``names`` yet (admitting its name) and cache it there."""
        self.version += 1
        entry = self._resolve(raw_name, phase, qualifier, report, names)
        if entry is not None:
            names[raw_name] = entry
        elif self._refused_cached < self._max_cached:
            names[raw_name] = entry
            self._refused_cached += 1
        return entry

    def _resolve(
        self,
        raw_name: object,
        phase: str,
        qualifier: str | None,
        report: str,
        names: dict[object, Entry],
    ) -> Entry:
        name = self._admit_guarded(raw_name, phase, qualifier, report)
        if name is None:
            return None
        if any(entry is not None and entry[0] == name for entry in names.values()):
            # Two keys of one report can share a series (``loss`` and ``eval_loss`` both
            # become ``val_loss``): the shared one takes store.record(), which replaces
            # a point at the same step instead of appending it twice.
            for key, entry in list(names.items()):
                if entry is not None and entry[0] == name:
                    names[key] = (name, None)
            return (name, None)
        return (name, self._record.store.series.get(name))

    def _admit_guarded(
        self, raw_name: object, phase: str, qualifier: str | None, report: str
    ) -> str | None:
        try:
            return self._admit(raw_name, phase, qualifier, report)
        except Exception as exc:  # a hostile key (its repr or hash raises) drops only itself
            record = self._record
            record.drops["invalid_name"] += 1
            record.once.warning(
                ("admit", report),
                "trainreport.report_dropped",
                report=report,
                reason=describe_exception(exc),
            )
            return None

    def _admit(
        self, raw_name: object, phase: str, qualifier: str | None, report: str
    ) -> str | None:
        record = self._record
        reason = check_name(raw_name)
        if reason is not None:
            record.drop_once("invalid_name", repr(raw_name)[:100], report, reason)
            return None
        assert isinstance(raw_name, str)
        name = qualify(raw_name, phase, qualifier)
        if name in RESERVED_KEYS or check_name(name) is not None:
            record.drop_once("invalid_name", name, report, "reserved or unusable qualified name")
            return None
        store = record.store
        if name in store:
            return name
        as_series = record.selector.is_series(name)
        # Before the stored task is read every name keeps its points: a name stored
        # as a series must stay one, whatever arrives first.
        provisional = not as_series and not record.seeded
        replaces = name in record.preserved  # a stored series this client cannot parse
        if not store.admit(name, as_series=as_series or provisional or replaces):
            record.refuse_for_name_cap(None, name)
            return None
        if provisional and not replaces:
            record.provisional.add(name)
        if replaces:
            del record.preserved[name]
            _log.warning("trainreport.stored_series_replaced", series=name[:200])
        return name
