"""Metric names: phase prefixes, validation datasets, what a name may be.

The rules are docs/design.md#metrics. Pure functions and one small stateful
helper (:class:`DatasetOrder`, not thread-safe: it belongs to the reporter
thread). The other rules a metric meets live beside this module:
``_record/_values.py`` (values, steps, epochs), ``_record/_selection.py`` (which names keep a
history) and ``_record/_params.py`` (hyperparameters).

In the order a reported metric meets them: the protocol's
:func:`~trainreport._wire._protocol.check_name` refuses names that cannot be
metric names (a limit of the wire, so it is defined there); :func:`qualify`
adds the phase prefix (``train_``, ``val_``, ``<phase>_``) after stripping one
prefix the caller already wrote (``eval_loss`` -> ``val_loss``), and
:class:`DatasetOrder` supplies the validation dataset qualifier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from trainreport._wire._protocol import MAX_SERIES_NAME_CHARS

__all__ = [
    "MAX_NAME_LENGTH",
    "STRIPPED_PREFIXES",
    "UNNAMED_DATASET",
    "DatasetOrder",
    "canonical_prefix",
    "qualify",
]


STRIPPED_PREFIXES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "train": ("train_", "train/"),
        "validation": (
            "val_",
            "val/",
            "eval_",
            "eval/",
            "valid_",
            "validation_",
            "validation/",
        ),
    }
)
"""Per phase, the prefixes stripped from a reported name before the canonical one
is added (docs/design.md#metrics). A phase not listed strips ``"<phase>_"`` and ``"<phase>/"``."""

_CANONICAL_PREFIXES: Final[Mapping[str, str]] = MappingProxyType(
    {"train": "train_", "validation": "val_"}
)

MAX_NAME_LENGTH: Final[int] = MAX_SERIES_NAME_CHARS
"""Longest accepted metric name, in characters (as reported, before the phase prefix):
the protocol's series name limit, which :func:`~trainreport._wire._protocol.check_name`
applies."""


def canonical_prefix(phase: str) -> str:
    """Return the prefix every metric of ``phase`` is stored under (docs/design.md#metrics).

    Args:
        phase: ``"train"``, ``"validation"`` or any other phase name (``"test"``, ``"system"``).

    Returns:
        ``"train_"`` for train, ``"val_"`` for validation, ``f"{phase}_"`` otherwise.
        Never raises for a ``str``.
    """
    return _CANONICAL_PREFIXES.get(phase, f"{phase}_")


def _stripped_prefixes(phase: str) -> tuple[str, ...]:
    prefixes = STRIPPED_PREFIXES.get(phase, (f"{phase}_", f"{phase}/"))
    return tuple(sorted(prefixes, key=len, reverse=True))


def qualify(name: str, phase: str, dataset_qualifier: str | None = None) -> str:
    """Return the qualified (stored) name of metric ``name`` reported in ``phase``.

    At most one prefix of the phase's :data:`STRIPPED_PREFIXES` entry is stripped
    (longest match first, and only when something remains after it), then the
    canonical prefix is added, followed by ``dataset_qualifier + "_"`` when a
    qualifier is given (docs/design.md#metrics)::

        qualify("eval_loss", "validation")          == "val_loss"
        qualify("train/loss", "train")              == "train_loss"
        qualify("train_train_loss", "train")        == "train_train_loss"  (one prefix stripped)
        qualify("loss", "validation", "squad")      == "val_squad_loss"
        qualify("val_", "validation")               == "val_val_"  (nothing would remain)

    Args:
        name: the metric name as the caller reported it (already checked with
            :func:`~trainreport._wire._protocol.check_name`).
        phase: the phase the metric was reported in.
        dataset_qualifier: from :meth:`DatasetOrder.qualifier`; ``None`` for plain names.
            The reporter passes one for validation only; any phase accepts it.

    Returns:
        The qualified name. Never raises for ``str`` arguments.
    """
    for prefix in _stripped_prefixes(phase):
        if len(name) > len(prefix) and name.startswith(prefix):
            name = name[len(prefix) :]
            break
    prefix = canonical_prefix(phase)
    if dataset_qualifier:
        return f"{prefix}{dataset_qualifier}_{name}"
    return f"{prefix}{name}"


UNNAMED_DATASET: Final[str] = "unnamed"
"""The name of the unnamed validation dataset (``dataset=None``) in ``val_datasets``
and, when it is not the first dataset, in its metric names (``val_unnamed_<name>``)."""


class DatasetOrder:
    """Order in which validation datasets were seen (stored with the task as ``val_datasets``).

    The unnamed dataset (``None``) is a dataset like any other: whichever dataset
    is seen first, named or not, keeps plain ``val_N`` names, and every later
    distinct dataset gets ``val_<dataset>_N``, so two datasets never share a
    curve. The unnamed dataset is called :data:`UNNAMED_DATASET` (``"unnamed"``)
    in the order and in its names; ``""`` and ``"unnamed"`` name it too. Seeding
    from a resumed task's ``val_datasets`` keeps the names stable across restarts.

    Args:
        seen: dataset names in first-seen order, e.g. the stored ``val_datasets``.
            Entries that are not non-empty strings, and repeats, are skipped.

    Not thread-safe (reporter thread only). Never raises for iterables of str.
    """

    def __init__(self, seen: Iterable[str] = ()) -> None:
        self._order: list[str] = []
        self._known: set[str] = set()
        for dataset in seen:
            if isinstance(dataset, str) and dataset:
                self._remember(str.__str__(dataset))

    def _remember(self, dataset: str) -> None:
        if dataset not in self._known:
            self._known.add(dataset)
            self._order.append(dataset)

    def qualifier(self, dataset: str | None) -> str | None:
        """Return the qualifier for metrics of ``dataset``, remembering it if new.

        Args:
            dataset: the ``dataset`` argument of a validation report; ``None``
                and ``""`` are the unnamed dataset.

        Returns:
            ``None`` (plain ``val_`` names) for the first dataset seen, named
            or not; the dataset's name (``"unnamed"`` for the unnamed one) for
            every later one. Never raises for ``str | None``.
        """
        name = dataset or UNNAMED_DATASET
        self._remember(name)
        return None if name == self._order[0] else name

    def knows(self, dataset: str | None) -> bool:
        """Whether ``dataset`` (``None``: the unnamed one) was seen already."""
        return (dataset or UNNAMED_DATASET) in self._known

    @property
    def datasets(self) -> tuple[str, ...]:
        """Datasets in first-seen order, the unnamed one included (stored as ``val_datasets``)."""
        return tuple(self._order)
