"""Which metrics keep a history: ``time_series_metrics`` as a selector of names.

The rules are docs/design.md#metrics. :class:`SeriesSelector` decides once per
qualified name whether it is a series (its points are kept) or a scalar (its
latest value only). Not thread-safe: it belongs to the reporter thread.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Final, cast

from trainreport._logging import get_logger

__all__ = [
    "EXCLUDE_PREFIX",
    "MAX_CHARTED_LISTED",
    "MAX_SCALAR_NOTES",
    "SeriesSelector",
    "check_globs",
    "matches",
]


#: Prefix that makes a ``time_series_metrics`` entry an exclusion (``"!*_runtime"``).
EXCLUDE_PREFIX: Final[str] = "!"
#: Names kept as current values only that are logged (one event each) per reporter.
MAX_SCALAR_NOTES: Final[int] = 50
#: Charted names listed beside each of those events.
MAX_CHARTED_LISTED: Final[int] = 20


def matches(name: str, pattern: str) -> bool:
    """Return whether the qualified metric ``name`` matches the glob ``pattern``.

    The one matching rule of metric-name patterns (``time_series_metrics``,
    ``KubeflowSink(metrics=...)``): :func:`fnmatch.fnmatchcase`, so globs are
    case-sensitive and ``*`` also matches ``_`` and ``/``.

    Args:
        name: a qualified metric name (``train_loss``).
        pattern: a glob without the exclusion prefix (``val_*``).

    Returns:
        Whether it matches. Never raises for two ``str``.
    """
    return fnmatch.fnmatchcase(name, pattern)


def check_globs(patterns: object, *, field: str) -> tuple[tuple[str, ...], list[str]]:
    """A list of plain globs (no ``!`` exclusions), and what is wrong with it.

    For settings that name metrics to pick out rather than to keep or drop
    (``KubeflowSink(metrics=...)``), matched with :func:`matches`. A bare
    ``str`` is one pattern, as in ``time_series_metrics``.

    Args:
        patterns: the setting (an iterable of ``str``, or one ``str``).
        field: the setting's name, for the problems' ``@ $.<field>[i]`` paths.

    Returns:
        ``(globs, problems)``: the usable globs in the order given, without
        repeats, and one line per unusable entry (empty, not a ``str``, or an
        exclusion). Never raises an ``Exception``.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    try:
        if isinstance(patterns, (bytes, bytearray)):
            raise TypeError("bytes are not a list of patterns")
        entries = list(cast("Iterable[object]", patterns))
    except Exception:
        return (), [f"expected a list of glob patterns @ $.{field}"]
    globs: list[str] = []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry:
            problems.append(f"expected a non-empty glob pattern @ $.{field}[{index}]")
        elif entry.startswith(EXCLUDE_PREFIX):
            problems.append(
                f"expected a glob to put first, not an exclusion ({EXCLUDE_PREFIX!r})"
                f" @ $.{field}[{index}]"
            )
        else:
            globs.append(str.__str__(entry))
    return tuple(dict.fromkeys(globs)), problems


class SeriesSelector:
    """Decides, once per qualified name, whether a metric keeps a history (docs/design.md#metrics).

    Rules, over qualified names (``train_loss``, ``val_runtime``), matched
    with :func:`fnmatch.fnmatchcase` (case-sensitive globs):

    - an entry ``"pattern"`` selects the names it matches (a series: every
      point kept); an entry ``"!pattern"`` excludes them (a scalar: the latest
      value only);
    - the *last* entry that matches a name decides (gitignore's rule), so
      ``["*", "!*_runtime", "val_runtime"]`` charts everything but runtimes,
      and ``val_runtime`` after all;
    - a name no entry matches is a scalar, except when the first entry is an
      exclusion: then the list starts from "every metric" (an implicit ``*``
      in front), so ``["!*_runtime"]`` alone charts everything but runtimes.

    Args:
        patterns: the ``time_series_metrics`` setting. ``None`` means
            ``default``; ``["*"]`` every metric; ``[]`` no history at all; a bare
            ``str`` is one pattern. Non-string entries are dropped with one
            warning each (``trainreport.config_pattern_dropped``); if entries were
            given but none is usable, or ``patterns`` is not iterable, every
            metric gets a history (warning ``trainreport.config_patterns_unusable``).
        default: the patterns used for ``None`` (an adapter's own default list).

    Each name decided to be a scalar is logged once at INFO
    (``trainreport.metric_kept_as_current_value`` with the ``name``, the
    ``rule`` that decided it and, as ``charted``, up to 20 names charted so
    far), for at most :data:`MAX_SCALAR_NOTES` names; then one
    ``trainreport.metric_kept_as_current_value_limit`` event.

    Only patterns the user gave are reported as never matched; ``default`` and
    the all-unusable fallback are not. Not thread-safe (reporter thread only).
    Never raises an ``Exception``.
    """

    def __init__(self, patterns: object, *, default: tuple[str, ...] = ("*",)) -> None:
        self._explicit = patterns is not None
        if patterns is None:
            chosen: list[str] = list(default)
        else:
            chosen = self._parse(patterns)
        self._patterns = tuple(dict.fromkeys(chosen))
        self._rules = tuple(
            (p, p.startswith(EXCLUDE_PREFIX), p[1:] if p.startswith(EXCLUDE_PREFIX) else p)
            for p in self._patterns
        )
        self._start_as_series = bool(self._rules) and self._rules[0][1]
        self._matched: set[str] = set()
        self._charted: list[str] = []
        self._scalar_notes = 0

    def _every_name(self, patterns: object) -> list[str]:
        """The fallback for patterns with nothing usable in them: every name, and a log event."""
        self._explicit = False
        get_logger().warning(
            "trainreport.config_patterns_unusable", type=type(patterns).__name__, using=["*"]
        )
        return ["*"]

    def _parse(self, patterns: object) -> list[str]:
        logger = get_logger()
        if isinstance(patterns, str):
            return [str.__str__(patterns)]
        entries: list[object] = []
        try:
            if isinstance(patterns, (bytes, bytearray)):
                raise TypeError("bytes are not a list of patterns")
            entries = list(cast("Iterable[object]", patterns))
        except Exception:
            return self._every_name(patterns)
        usable: list[str] = []
        for index, entry in enumerate(entries):
            if isinstance(entry, str):
                usable.append(str.__str__(entry))
            else:
                logger.warning(
                    "trainreport.config_pattern_dropped",
                    index=index,
                    type=type(entry).__name__,
                )
        if entries and not usable:
            return self._every_name(patterns)
        return usable

    @property
    def patterns(self) -> tuple[str, ...]:
        """The patterns in effect, in the order given, without repeats."""
        return self._patterns

    def is_series(self, name: str) -> bool:
        """Return whether the metric ``name`` keeps a history; remember which patterns matched.

        Every pattern is tried (the last match decides), so a pattern shadowed
        by another is not later reported as never matched. A scalar decision
        is logged (see the class docs).

        Args:
            name: a qualified metric name (``train_loss``).

        Returns:
            ``True`` for a series, ``False`` for a scalar. Never raises for a ``str``.
        """
        series = self._start_as_series
        rule: str | None = None
        for pattern, excludes, glob in self._rules:
            if matches(name, glob):
                self._matched.add(pattern)
                series = not excludes
                rule = pattern
        if series:
            if len(self._charted) < MAX_CHARTED_LISTED:
                self._charted.append(name)
        else:
            self._note_scalar(name, rule)
        return series

    def _note_scalar(self, name: str, rule: str | None) -> None:
        self._scalar_notes += 1
        if self._scalar_notes > MAX_SCALAR_NOTES + 1:
            return
        if self._scalar_notes == MAX_SCALAR_NOTES + 1:
            get_logger().info(
                "trainreport.metric_kept_as_current_value_limit", logged=MAX_SCALAR_NOTES
            )
            return
        get_logger().info(
            "trainreport.metric_kept_as_current_value",
            name=name,
            rule=rule if rule is not None else "no pattern matched",
            charted=sorted(self._charted),
        )

    def unmatched_patterns(self) -> tuple[str, ...]:
        """User-given patterns that matched no name passed to :meth:`is_series` so far."""
        if not self._explicit:
            return ()
        return tuple(p for p in self._patterns if p not in self._matched)

    def log_unmatched(self, arrived: Iterable[str]) -> None:
        """Warn once per never-matched pattern (at ``close()``, docs/design.md#metrics).

        Each warning is ``trainreport.pattern_never_matched`` with ``pattern=...``
        and ``arrived=`` the sorted list of at most 20 of the names that did
        arrive (plus ``arrived_count``), so a typo is easy to spot.

        Args:
            arrived: the qualified names the run reported.

        Never raises for an iterable of ``str``.
        """
        unmatched = self.unmatched_patterns()
        if not unmatched:
            return
        names = sorted(set(arrived))
        for pattern in unmatched:
            get_logger().warning(
                "trainreport.pattern_never_matched",
                pattern=pattern,
                arrived=names[:20],
                arrived_count=len(names),
            )
