"""Each adapter's own default ``time_series_metrics`` (``docs/integrations.md`` has the table).

The defaults chart what people read (losses, accuracies, learning rate,
gradient norm, rewards: anything that is not a counter) and keep throughput
and accounting counters as current values only: they change every step but
nobody reads their history, and on a page of curves they crowd out the ones
that matter. The patterns are over qualified names (``val_runtime``,
``train_num_input_tokens_seen``), so each counter pattern starts with ``*_``
to match after any phase prefix. ``["*"]`` in the config still charts every
metric; any list the user gives replaces the default whole.

Framework-free: importing this module imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from trainreport import STRIPPED_PREFIXES

__all__ = [
    "PREFIX_PHASES",
    "ACCELERATE",
    "COUNTER_EXCLUSIONS",
    "DEFAULT_TIME_SERIES_METRICS",
    "HUGGINGFACE",
    "KERAS",
    "LIGHTNING",
    "NEMO_RL",
]

#: Throughput and accounting counters, kept as current values only.
COUNTER_EXCLUSIONS: Final[tuple[str, ...]] = (
    "!*_runtime",  # HF: eval_runtime, train_runtime
    "!*_per_second",  # HF: eval_samples_per_second, eval_steps_per_second
    "!*tokens*",  # HF: num_input_tokens_seen; NeMo-RL: performance/tokens_per_sec...
    "!*_flos",  # HF: total_flos
    "!*_mem*",  # memory gauges: mem_allocated_gb, memory_reserved
    "!*_tps*",  # tokens per second under its short name
    "!*_num_*",  # NeMo-RL: num_valid_samples, num_unmasked_tokens
    "!*_global_valid_*",  # NeMo-RL: global_valid_seqs, global_valid_toks
)

#: Hugging Face ``Trainer``: counters, and the end-of-training summary
#: (``summary_train_runtime``, ``summary_total_flos``, ``summary_train_loss``...),
#: which is logged once and is never a curve.
HUGGINGFACE: Final[tuple[str, ...]] = ("*", *COUNTER_EXCLUSIONS, "!summary_*")
#: Lightning: counters.
LIGHTNING: Final[tuple[str, ...]] = ("*", *COUNTER_EXCLUSIONS)
#: NeMo-RL: counters (``timing_*`` step durations stay curves: they are diagnostic).
NEMO_RL: Final[tuple[str, ...]] = ("*", *COUNTER_EXCLUSIONS)
#: Accelerate: counters.
ACCELERATE: Final[tuple[str, ...]] = ("*", *COUNTER_EXCLUSIONS)
#: Keras: counters.
KERAS: Final[tuple[str, ...]] = ("*", *COUNTER_EXCLUSIONS)

#: Adapter name -> its default list.
DEFAULT_TIME_SERIES_METRICS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "accelerate": ACCELERATE,
        "huggingface": HUGGINGFACE,
        "keras": KERAS,
        "lightning": LIGHTNING,
        "nemo_rl": NEMO_RL,
    }
)


#: A metric name's own prefix decides its phase whatever the framework's context
#: (``eval_loss`` logged in a training hook is validation); longest prefix first.
#: The phases' prefixes are the core's table (``trainreport.STRIPPED_PREFIXES``)
#: plus ``test_``/``test/``.
PREFIX_PHASES: Final[tuple[tuple[str, str], ...]] = tuple(
    sorted(
        [(p, phase) for phase, ps in STRIPPED_PREFIXES.items() for p in ps]
        + [("test_", "test"), ("test/", "test")],
        key=lambda item: len(item[0]),
        reverse=True,
    )
)
