"""The engine core (``_engine/_core.py``) driven directly: no thread, no clock read, no sink called.

Time is an argument (tests/core_driving.py). The close's deadline properties,
asserted exactly on the core, are in tests/contracts/test_deadlines.py.
"""

from __future__ import annotations

from core_driving import deliver, make_core, open_all, record
from trainreport._engine._core import Regime


def test_the_regime_is_running_then_flushing_then_closing() -> None:
    """One core, three regimes: a waiting flush() and then close() change which rules decide."""
    core = make_core()
    seen = [core.regime]
    core.flush.request()
    seen.append(core.regime)
    core.close(deadline=10.0, started=0.0)
    seen.append(core.regime)

    assert [Regime.RUNNING, Regime.FLUSHING, Regime.CLOSING] == seen


def test_a_flush_forces_a_send_inside_the_debounce() -> None:
    """Running, a send just delivered: nothing is due; flushing, a send goes now, curves and all."""
    core = make_core()
    open_all(core)
    dest = core.destinations[0]
    record(core, 0.0, 1)
    deliver(core, 0.0)  # the next send is the heartbeat's, at 60 s

    running = core.running_request(dest, 2.0)
    core.flush.request()
    flushing = core.running_request(dest, 2.0)

    assert running is None
    assert flushing is not None
    assert (True, True) == (flushing.complete, flushing.include_metrics)
