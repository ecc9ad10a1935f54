"""Per-destination delivery: building each destination's update and what it acknowledged.

For each destination ``d`` (its position in ``Reporter(sinks=[...])``) this
keeps what ``d`` is known to hold beside its series lengths (those live in
the store): which sticky fields in which version, the change count of the
last delivered update, whether ``d`` refused the full-state curves for size
or takes them thinned (docs/engine.md, "Thinning under a body limit"), and
(full-state mode) series ``d`` holds that this run does not.
Updates are series suffixes from what ``d`` holds, or the full state
(docs/design.md#wire-modes).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from trainreport._logging import get_logger
from trainreport._record._details import DetailsView
from trainreport._record._run_record import RunRecord
from trainreport._record._seeding import points_json
from trainreport._record._store import Series
from trainreport._wire._payloads import StoredState, encode_details
from trainreport._wire._sink_interface import SeriesUpdate, Update

__all__ = ["Build", "Delivery"]

_log = get_logger()


@attrs.define
class _Held:
    """What one destination is known to hold, beside its series lengths (in the store)."""

    #: The recorder's change count the last delivered update was built at (-1: none).
    changes: int = -1
    #: Sticky key -> the version of its value the destination holds.
    sticky: dict[str, int] = attrs.field(factory=dict)
    #: The destination refused full-state ``metrics`` for size (it goes on without them).
    too_large: bool = False
    #: Full-state mode over the destination's body limit: the most points a series
    #: is sent with (``_record/_thinning.py``), or ``None`` (every point).
    thinned_to: int | None = None
    #: Full-state mode: series the destination holds that this run does not (as
    #: stored), sent back inside ``metrics`` so that a wholesale replace keeps them.
    foreign: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Build:
    """An update built for one destination, and what to acknowledge once it is delivered.

    Args:
        update: what is sent.
        sent: each series in the update -> the length it had when built.
        sticky: each sticky key in the update -> the version of its value.
        changes: the recorder's change count when built.
        details: the ``status_details`` it carries (for ``snapshot()``).
    """

    update: Update
    sent: Mapping[str, int]
    sticky: Mapping[str, int]
    changes: int
    details: Mapping[str, Any]


def _suffix(name: str, s: Series, d: int, record: RunRecord) -> SeriesUpdate:
    """``s`` from what ``d`` holds on (its points from ``delivered[d]``, an absolute index)."""
    start = s.delivered[d]
    if start < s.base:
        # d lost points it had acknowledged (a restored backup), and they left memory
        # once every destination held them: what is in memory goes, from the base.
        record.once.warning(
            ("points_not_retained", d),
            "trainreport.points_not_retained",
            series=name,
            destination=d,
            held=start,
            first_in_memory=s.base,
            hint="the destination lost points it had acknowledged; upload the run log "
            "with trainreport sync to restore them",
        )
        start = s.base
    i = start - s.base
    return SeriesUpdate(name, start, s.steps[i:], s.epochs[i:], s.values[i:], s.times[i:])


class Delivery:
    """Builds updates for each destination and applies what each acknowledged.

    Args:
        record: the attempt's shared record.
        details: the attempt's details view.
        destinations: how many destinations the reporter sends to.
    """

    __slots__ = ("_details", "_held", "_record")

    def __init__(self, record: RunRecord, details: DetailsView, destinations: int) -> None:
        self._record = record
        self._details = details
        self._held = [_Held() for _ in range(destinations)]

    def dirty_sticky(self, d: int) -> dict[str, int]:
        """Sticky keys ``d`` does not hold in their current version -> that version."""
        return self._record.sticky.dirty(self._held[d].sticky)

    def has_changes(self, d: int) -> bool:
        """Something recorded could still be sent to ``d`` and is not known delivered."""
        held = self._held[d]
        if held.changes != self._record.changes or self.dirty_sticky(d):
            return True
        series = self._record.store.series.values()
        return not held.too_large and any(s.needs_send(d) for s in series)

    def all_delivered(self, d: int) -> bool:
        """``d`` holds everything recorded."""
        series = self._record.store.series.values()
        return not self.has_changes(d) and not any(s.needs_send(d) for s in series)

    def build_update(self, d: int, wall: str, full_state: bool, include_metrics: bool) -> Build:
        """Build the next update for ``d`` (see ``Recorder.build_update``)."""
        record = self._record
        sticky = self.dirty_sticky(d)
        details = self._details.details(wall, sticky)
        self._details.built(wall, details)
        held = self._held[d]
        series_updates: tuple[SeriesUpdate, ...] | None = None
        sent: dict[str, int] = {}
        store_series = record.store.series
        if include_metrics and any(s.needs_send(d) for s in store_series.values()):
            if full_state:
                record.store.keep_every_point(d)  # the whole state goes every time
                if record.seeded and not held.too_large:
                    budget = held.thinned_to
                    series_updates = tuple(
                        SeriesUpdate(n, 0, s.steps[:], s.epochs[:], s.values[:], s.times[:])
                        if budget is None
                        else SeriesUpdate(n, 0, *s.thinned(budget))
                        for n, s in store_series.items()
                        if s
                    )
            else:
                series_updates = tuple(
                    _suffix(n, s, d, record) for n, s in store_series.items() if s.needs_send(d)
                )
            if series_updates is not None:
                sent = (
                    {n: len(s) for n, s in store_series.items()}
                    if full_state
                    else {u.name: u.offset + len(u) for u in series_updates}
                )
                record.store.mark_built(d, list(sent))
        foreign: dict[str, Any] = {}
        if full_state and series_updates:
            foreign = {n: p for n, p in held.foreign.items() if n not in store_series}
            foreign.update(record.preserved)
        update = Update(
            status=record.machine.status.value,
            status_details=details,
            series=series_updates,
            full_state=full_state,
            foreign_series=foreign,
        )
        return Build(update, sent, sticky, record.changes, details)

    def on_delivered(self, d: int, build: Build, lengths: Mapping[str, int] | None) -> None:
        """``d`` applied ``build``'s update (holding ``lengths``, if it says)."""
        self._record.store.acknowledge(d, build.sent, lengths)
        held = self._held[d]
        held.sticky.update(build.sticky)
        held.changes = build.changes
        self._details.delivered_details.update(build.details)

    def resynchronise(self, d: int, lengths: Mapping[str, int] | None) -> None:
        """``d``'s state disagrees with ours: resend from ``lengths`` and every sticky field."""
        if lengths is not None:
            self._record.store.resynchronise(d, lengths)
        self._mark_all_dirty(d)

    def adopt(self, d: int, state: StoredState, full_state: bool) -> int:
        """Bring ``d`` up to date from its own stored task; how many stored points are replaced."""
        store = self._record.store
        replaced = store.adopt(d, state.series)
        held = self._held[d]
        if full_state:
            held.foreign = dict(state.damaged)
            for name, (steps, epochs, values) in state.series.items():
                if name not in store.series:
                    held.foreign[name] = points_json(steps, epochs, values)
        self._mark_all_dirty(d)
        return replaced

    def _mark_all_dirty(self, d: int) -> None:
        held = self._held[d]
        held.sticky.clear()
        held.changes = -1

    def drop_field(self, d: int, update: Update, metrics_bytes: int, floor: int) -> bool:
        """``d`` refused ``update``'s size: drop its largest once-sent field (see the Recorder)."""
        record = self._record
        sticky = record.sticky
        best: tuple[str, int] | None = None
        for key, version in self.dirty_sticky(d).items():
            if key in update.status_details and version == sticky.versions.get(key):
                size = len(encode_details({key: update.status_details[key]}).encode())
                if best is None or size > best[1]:
                    best = (key, size)
        if best is None or best[1] < max(metrics_bytes, floor):
            return False
        key, size = best
        record.drops["field_too_large"] += 1
        record.once.warning(
            ("field_too_large", key),
            "trainreport.field_too_large",
            field=key,
            encoded_bytes=size,
        )
        delivered = self._details.delivered_details
        if key in delivered:
            sticky.set(key, delivered[key])
        else:
            sticky.forget(key)
        if key in sticky.versions:
            self._held[d].sticky[key] = sticky.versions[key]
        else:
            self._held[d].sticky.pop(key, None)
        return True

    def refuse_metrics(self, d: int) -> None:
        """``d`` cannot take the full-state ``metrics`` (413): go on without them."""
        self._held[d].too_large = True
        self._record.drops["metrics_too_large"] += 1

    def thin_metrics(self, d: int, budget: int) -> int | None:
        """Thin ``d``'s full-state curves to ``budget`` points a series; returns the last budget."""
        held = self._held[d]
        before, held.thinned_to = held.thinned_to, budget
        self._record.store.thin(d, budget)  # its points may leave memory, summarised
        return before

    def thinned_to(self, d: int) -> int | None:
        """The most points a series is sent to ``d`` with, or ``None`` (every point)."""
        return self._held[d].thinned_to

    def metrics_refused(self, d: int) -> bool:
        """Whether ``d`` refused the full-state ``metrics`` for size."""
        return self._held[d].too_large
