"""The public surface: pinned ``__all__``, docstrings, and no framework imports."""

from __future__ import annotations

import inspect
import subprocess
import sys

import trainreport

EXPECTED = [
    "AttemptIdentity",
    "ClientError",
    "ConfigError",
    "Delivered",
    "FileSink",
    "HttpSink",
    "KubeflowSink",
    "MemorySink",
    "NotFoundError",
    "Opened",
    "Phase",
    "ProtocolError",
    "Rejected",
    "Reporter",
    "ReporterStats",
    "ReportingConfig",
    "Resynchronise",
    "RetryLater",
    "RunLogError",
    "SeriesUpdate",
    "Sink",
    "SinkError",
    "Split",
    "TaskStatus",
    "TrainReportError",
    "TransitionError",
    "TransportError",
    "UnauthorizedError",
    "UnreachableError",
    "Update",
    "read_task",
]


def test_all_is_pinned_and_sorted() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert EXPECTED == trainreport.__all__
    assert sorted(trainreport.__all__) == trainreport.__all__


def test_every_public_name_and_method_has_a_docstring() -> None:
    """Public classes, functions and their public methods are documented."""
    missing = []
    for name in trainreport.__all__:
        obj = getattr(trainreport, name)
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member):
                    continue
                if not inspect.getdoc(member):
                    missing.append(f"{name}.{attr}")
    assert [] == missing


def test_report_methods_say_they_never_raise() -> None:
    """Each report_* docstring states the never-raises contract."""
    methods = [m for m in vars(trainreport.Reporter) if m.startswith("report_")]
    assert 10 == len(methods)
    for m in methods:
        assert "Never raises" in (inspect.getdoc(getattr(trainreport.Reporter, m)) or ""), m


def test_import_trainreport_imports_no_framework() -> None:
    """``import trainreport`` pulls in no ML framework, numpy, or server stack."""
    code = (
        "import sys, trainreport, trainreport.integrations; "
        "print(sorted(m for m in ('torch','transformers','lightning','numpy','starlette',"
        "'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[]" == out.stdout.strip()
