"""Shared workload for the benchmarks: 14 metrics a step, like a real training loop logs."""

from __future__ import annotations

import math

METRIC_NAMES = (
    "loss",
    "lr",
    "grad_norm",
    "accuracy",
    "tokens_per_second",
    "loss_scale",
    "step_time",
    "data_time",
    "memory_allocated",
    "throughput",
    "perplexity",
    "weight_norm",
    "update_ratio",
    "clip_fraction",
)
assert len(METRIC_NAMES) == 14


def metrics_for(step: int) -> dict[str, float]:
    """Fourteen plausible float metrics for ``step`` (a fresh dict each call, as a loop makes)."""
    base = 1.0 / math.sqrt(step + 1)
    return {name: base * (i + 1) for i, name in enumerate(METRIC_NAMES)}


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of an already sorted list (nearest rank)."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]
