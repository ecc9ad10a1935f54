"""The one guard every adapter hook runs under: a hook's error never reaches training.

This is also the one place the integrations reach the core's private modules:
trainreport's logger (``get_logger``, ``OnceLogger``) is re-exported from here, so
the adapters and hooks import only the public API plus their own package
(pinned by ``tests/api/test_public_api.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trainreport._logging import OnceLogger, get_logger

__all__ = ["OnceLogger", "adapter_guard", "get_logger"]


@contextlib.contextmanager
def adapter_guard(once: OnceLogger, adapter: str, hook: str) -> Iterator[None]:
    """Run an adapter hook; an ``Exception`` is logged once per hook and swallowed.

    Args:
        once: the adapter's once-per-key logger.
        adapter: the adapter's name for the log event (``"huggingface"``, ...).
        hook: the framework hook or method being run.

    Logs ``trainreport.adapter_error`` (WARNING) with ``adapter``, ``hook`` and
    ``error``. Never raises an ``Exception``; interrupts propagate.
    """
    try:
        yield
    except Exception as exc:  # an adapter must never break the user's training
        once.warning(
            ("hook", hook),
            "trainreport.adapter_error",
            adapter=adapter,
            hook=hook,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
