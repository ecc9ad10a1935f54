"""Process hooks: report uncaught exceptions and SIGTERM (preemption) to a Reporter.

docs/design.md#failure-handling: "An opt-in SIGTERM hook reports the run as cancelled (reason:
"preempted") before the process dies", and a crash must not leave a task
``running``. The Reporter's own ``atexit`` fallback already closes a forgotten
reporter; these hooks report *why* the process is ending, at the moment it
happens, and also cover exceptions that kill a thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, TypeAlias

from trainreport import Reporter
from trainreport.integrations._guard import get_logger

__all__ = ["PREEMPTED", "install_failure_hooks"]

_log = get_logger()

#: The cancel reason reported on SIGTERM (preemption is ``cancelled`` with
#: ``reason: "preempted"``, :meth:`Reporter.report_outcome`).
PREEMPTED = Reporter.PREEMPTED

_SignalHandler: TypeAlias = "Callable[[int, FrameType | None], Any] | int | signal.Handlers | None"


def _report(reporter: Reporter, exc: BaseException | None) -> None:
    """Report an uncaught exception with :meth:`Reporter.report_outcome`.

    ``SystemExit`` ending a thread is no outcome of the run (Python ignores it too).
    """
    if exc is None or isinstance(exc, SystemExit):
        return
    reporter.report_outcome(exc)


def install_failure_hooks(reporter: Reporter, *, sigterm: bool = False) -> Callable[[], None]:
    """Report uncaught exceptions (and, optionally, SIGTERM) to ``reporter``.

    Installs, each chained in front of the hook that was there before:

    - ``sys.excepthook``: an exception that ends the main thread is reported
      with ``report_error`` (``KeyboardInterrupt`` with
      ``report_cancelled(reason="interrupted")``), then the previous hook runs
      (it prints the traceback). The Reporter's ``atexit`` fallback then closes
      the reporter within the config's ``atexit_timeout_seconds``.
    - ``threading.excepthook``: the same for an exception that ends another
      thread (``SystemExit`` in a thread is not a failure, as in Python).
    - with ``sigterm=True``, and only when called from the main thread (Python
      allows signal handlers nowhere else; otherwise this part is skipped and
      ``trainreport.sigterm_hook_skipped`` is logged): a SIGTERM handler that
      reports ``cancelled`` with reason ``"preempted"``, closes the reporter
      (bounded by the config's ``atexit_timeout_seconds``) and then does what
      the previous handler would have done: calls it when it was a function,
      returns when it was ``SIG_IGN``, and otherwise restores ``SIG_DFL`` and
      sends SIGTERM to the process again, so the process still dies of SIGTERM
      (exit status 128 + 15 as the job system expects).

    Args:
        reporter: the reporter to report to (normally started).
        sigterm: also handle SIGTERM (a job system's preemption notice).

    Returns:
        A function that uninstalls the hooks: each previous hook is restored
        when ours is still the installed one; when someone chained in front of
        ours since, ours is left in place but does nothing any more. Calling it
        again does nothing. It must be called from the main thread to restore
        the SIGTERM handler. Never raises.

    Never raises. The hooks themselves never raise into the interpreter.
    """
    active = True
    previous_excepthook = sys.excepthook
    previous_threading_hook = threading.excepthook

    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if active:
            _report(reporter, exc)
        previous_excepthook(exc_type, exc, tb)

    def threading_excepthook(args: threading.ExceptHookArgs) -> None:
        if active:
            _report(reporter, args.exc_value)
        previous_threading_hook(args)

    sys.excepthook = excepthook
    threading.excepthook = threading_excepthook

    previous_signal: _SignalHandler = None
    signal_installed = False

    def on_sigterm(signum: int, frame: FrameType | None) -> Any:
        if active:
            reporter.report_outcome(preempted=True)
            with contextlib.suppress(Exception):  # strict mode's TransitionError (tests only)
                reporter.close(reporter.config.atexit_timeout_seconds)
        if callable(previous_signal):
            return previous_signal(signum, frame)
        if previous_signal == signal.SIG_IGN:
            return None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return None

    if sigterm:
        if threading.current_thread() is threading.main_thread():
            previous_signal = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, on_sigterm)
            signal_installed = True
        else:
            _log.warning("trainreport.sigterm_hook_skipped", reason="not the main thread")

    def uninstall() -> None:
        nonlocal active
        if not active:
            return
        active = False
        if sys.excepthook is excepthook:
            sys.excepthook = previous_excepthook
        if threading.excepthook is threading_excepthook:
            threading.excepthook = previous_threading_hook
        if signal_installed:
            try:
                if signal.getsignal(signal.SIGTERM) is on_sigterm:
                    restored = signal.SIG_DFL if previous_signal is None else previous_signal
                    signal.signal(signal.SIGTERM, restored)
            except (
                ValueError,
                TypeError,
            ) as exc:  # not the main thread, or an unrestorable handler
                _log.warning("trainreport.sigterm_hook_not_restored", error=type(exc).__name__)

    return uninstall
