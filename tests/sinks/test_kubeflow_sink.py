"""KubeflowSink against a conformance server of Kubeflow Trainer's status endpoint, over real
TLS sockets; the request body's limits and formatting; ``from_env`` wiring."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from helpers import drive
from kubeflow_conformance import KubeflowConformanceServer, status_path, token_audience
from trainreport import (
    Delivered,
    FileSink,
    HttpSink,
    KubeflowSink,
    Rejected,
    Reporter,
    ReportingConfig,
    RetryLater,
    Update,
)
from trainreport.exceptions import ConfigError
from trainreport.sinks._kubeflow_status import (
    MAX_BODY_BYTES,
    MAX_METRICS,
    MetricPriority,
    build_body,
    format_value,
)
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)

JOB = ("team-a", "llama-ft")
TOKEN = "projected-token-one"
ROTATED = "projected-token-two"
ORPHAN = "projected-token-of-a-deleted-job"
WHEN = "2026-11-29T16:03:39Z"


@pytest.fixture
def kubeflow(tmp_path: Path) -> Iterator[KubeflowConformanceServer]:
    """The conformance server with one TrainJob whose token is ``TOKEN``."""
    server = KubeflowConformanceServer(tmp_path, {JOB: TOKEN})
    yield server
    server.stop()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """The projected token file, holding ``TOKEN``."""
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def sink_for(server: KubeflowConformanceServer, token_file: Path, **kw: Any) -> KubeflowSink:
    return KubeflowSink(server.url(*JOB), token_file=token_file, ca_certs=str(server.ca_path), **kw)


def make(sink: KubeflowSink, **config: Any) -> tuple[Reporter, FakeClock]:
    clock = FakeClock()
    settings = {
        "min_report_interval_seconds": 0.01,
        "backoff_initial_seconds": 1.0,
        "backoff_jitter": 0.0,
        "rejected_backoff_seconds": 30.0,
        **config,
    }
    return Reporter(sink, ReportingConfig(**settings), clock=clock, rank=0), clock


def cycle(reporter: Reporter) -> None:
    worker = reporter._worker
    assert worker is not None
    worker.cycle()


def metrics_of(status: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["value"] for m in status.get("metrics", [])}


def names_of(status: dict[str, Any]) -> list[str]:
    return [m["name"] for m in status.get("metrics", [])]


def update(details: dict[str, Any], status: str = "running") -> Update:
    return Update(status=status, status_details=details, series=(), full_state=False)


# --------------------------------------------------------------------------- a real run


def test_a_run_posts_progress_eta_and_current_values(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """Progress, ETA and every current value reach the TrainJob status, bookkeeping first."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_training_start(max_steps=10, num_epochs=2)
    for step in range(1, 5):
        clock.advance(6.0)
        reporter.report_train_step(
            step=step, epoch=1, metrics={"loss": 1.0 / step, "learning_rate": 1e-4}
        )
        reporter.report_metrics(step=step, metrics={"gpu_util": 55.0}, phase="system")
        cycle(reporter)
    stored = kubeflow.stored[JOB]
    values = metrics_of(stored)
    assert (40, 36, WHEN[:2]) == (
        stored["progressPercentage"],
        stored["estimatedRemainingSeconds"],
        stored["lastUpdatedTime"][:2],
    )
    assert ["status", "phase", "step", "max_steps", "epoch", "num_epochs"] == names_of(stored)[:6]
    assert ("running", "4", "10", "0.25", "0.0001", "55") == (
        values["status"],
        values["step"],
        values["max_steps"],
        values["train_loss"],
        values["train_learning_rate"],
        values["system_gpu_util"],
    )
    reporter.report_completed()
    assert reporter.close(10)
    final = kubeflow.stored[JOB]
    assert (100, 0, "completed") == (
        final["progressPercentage"],
        final["estimatedRemainingSeconds"],
        metrics_of(final)["status"],
    )


def test_each_post_replaces_the_stored_status(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """The endpoint keeps the last post only; every post carries the whole current state."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_training_start(max_steps=4, num_epochs=None)
    for step in range(1, 4):
        clock.advance(6.0)
        reporter.report_train_step(step=step, metrics={f"only_at_{step}": float(step)})
        cycle(reporter)
    assert reporter.close(10)
    posts = kubeflow.accepted[JOB]
    assert len(posts) >= 3
    assert {"train_only_at_1", "train_only_at_2", "train_only_at_3"} <= set(
        metrics_of(kubeflow.stored[JOB])
    )
    assert kubeflow.stored[JOB] is posts[-1]


def test_failure_is_posted_with_the_error(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """A failed run ends ``failed`` with its error (cut to 64 characters) and no ETA."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    reporter.start()
    reporter.report_training_start(max_steps=10, num_epochs=None)
    clock.advance(1.0)
    reporter.report_train_step(step=3, metrics={"loss": 0.5})
    reporter.report_error(RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB " * 3))
    reporter.close(10)
    final = kubeflow.stored[JOB]
    values = metrics_of(final)
    assert ("failed", 30, False, 64) == (
        values["status"],
        final["progressPercentage"],
        "estimatedRemainingSeconds" in final,
        len(values["error"]),
    )
    assert values["error"].startswith("RuntimeError: CUDA out of memory")


def test_a_non_finite_series_value_is_shown_as_such(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """A diverged loss reads ``NaN`` on the TrainJob, not its last finite value."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 0.5})
    cycle(reporter)
    clock.advance(6.0)
    reporter.report_train_step(step=2, metrics={"loss": float("nan")})
    cycle(reporter)
    clock.advance(6.0)
    reporter.report_train_step(step=3, metrics={"other": 1.0})
    cycle(reporter)
    reporter.close(10)
    assert "NaN" == metrics_of(kubeflow.stored[JOB])["train_loss"]


# --------------------------------------------------------------------------- the 5 s floor


def test_posts_are_at_least_five_seconds_apart_whatever_the_config_says(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """Config says 0.01 s, the sink says 1 s: events every second still post every 5 s."""
    sink = sink_for(kubeflow, token_file, min_interval_seconds=1.0)
    reporter, clock = make(sink)
    drive(reporter)
    cycle(reporter)
    posted_at = [clock()]
    for step in range(1, 13):
        clock.advance(1.0)
        before = len(kubeflow.seen)
        reporter.report_checkpoint_saved(path=f"ckpt-{step}", step=step)
        cycle(reporter)
        if len(kubeflow.seen) > before:
            posted_at.append(clock())
    reporter.close(10)
    gaps = [b - a for a, b in itertools.pairwise(posted_at)]
    assert (5.0, [5.0, 5.0]) == (sink.min_interval_seconds, gaps)


# --------------------------------------------------------------------------- tokens and TLS


def test_a_rotated_token_file_is_read_again_mid_run(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """The kubelet rotates the token in place; the next post carries the new one."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    cycle(reporter)
    kubeflow.rotate_token(JOB, ROTATED)
    rotated = token_file.with_name("token.new")
    rotated.write_text(ROTATED)
    rotated.replace(token_file)  # atomic swap, as the kubelet does
    clock.advance(6.0)
    reporter.report_train_step(step=2, metrics={"loss": 0.5})
    cycle(reporter)
    assert reporter.close(10)  # its send carries the completion close() reports
    assert ([200, 200, 200], "0.5") == (
        [s.answer for s in kubeflow.seen],
        metrics_of(kubeflow.stored[JOB])["train_loss"],
    )


def test_a_refused_token_is_a_rejection_then_the_new_file_is_used(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """Server rotated first: one 403 (logged once, long backoff), then the new file's token."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    cycle(reporter)
    kubeflow.rotate_token(JOB, ROTATED)
    with capture_events() as events:
        clock.advance(6.0)
        reporter.report_train_step(step=2, metrics={"loss": 0.5})
        cycle(reporter)
        token_file.write_text(ROTATED)
        for _ in range(5):  # no new data, within the 30 s rejected backoff: no request
            clock.advance(5.0)
            cycle(reporter)
        refused_phase = [s.answer for s in kubeflow.seen]
        clock.advance(10.0)
        reporter.report_train_step(step=3, metrics={"loss": 0.25})
        cycle(reporter)
    reporter.close(10)  # one more post: the completion close() reports
    rejected = [e for e in events if e["event"] == "trainreport.send_rejected"]
    assert ([200, 403], [200, 403, 200, 200]) == (refused_phase, [s.answer for s in kubeflow.seen])
    assert (1, 403) == (len(rejected), rejected[0]["status_code"])
    assert all(TOKEN not in json.dumps(e, default=str) for e in events)
    assert all(ROTATED not in json.dumps(e, default=str) for e in events)


@pytest.mark.parametrize("refusal", [401, 403])
def test_a_refused_token_is_read_again_even_when_the_file_looks_unchanged(
    kubeflow: KubeflowConformanceServer, token_file: Path, refusal: int
) -> None:
    """After a 401 or 403 the next post reads the file again, whatever its stat says."""
    sink = sink_for(kubeflow, token_file)
    assert isinstance(sink.send(update({"updated_at": WHEN}), timeout_seconds=10), Delivered)
    kubeflow.fail_next(refusal)
    refused = sink.send(update({"updated_at": WHEN}), timeout_seconds=10)
    before = token_file.stat()
    with token_file.open("r+") as handle:  # same inode, same size
        handle.write(ROTATED + "\n")
    os.utime(token_file, ns=(before.st_atime_ns, before.st_mtime_ns))  # same mtime
    kubeflow.rotate_token(JOB, ROTATED)
    after = sink.send(update({"updated_at": WHEN}), timeout_seconds=10)
    sink.close()
    assert (refusal, True) == (
        refused.status_code if isinstance(refused, Rejected) else None,
        isinstance(after, Delivered),
    )
    assert [200, refusal, 200] == [s.answer for s in kubeflow.seen]


def test_tls_is_verified_against_the_ca_file(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """Without the job's CA file the test CA is not trusted: no request gets through."""
    sink = KubeflowSink(kubeflow.url(*JOB), token_file=token_file)
    result = sink.send(update({"updated_at": WHEN}), timeout_seconds=10)
    sink.close()
    assert isinstance(result, RetryLater)
    assert "SSL" in result.reason or "certificate" in result.reason.lower()
    assert [] == kubeflow.seen


def test_the_token_is_in_no_repr_and_no_pickle_of_a_started_pool(token_file: Path) -> None:
    """``repr`` masks the token; an unstarted sink pickles without a pool."""
    sink = KubeflowSink("https://127.0.0.1:1/x", token="s3cret-value")
    copy = pickle.loads(pickle.dumps(sink))
    assert "s3cret-value" not in repr(sink)
    assert (copy.url, copy._pool) == (sink.url, None)


# --------------------------------------------------------------------------- rejections and retries


@pytest.mark.parametrize(
    ("path_job", "token", "expected"),
    [
        (JOB, "wrong-token", 403),
        (("team-a", "no-such-job"), ORPHAN, 404),
    ],
)
def test_refused_requests_are_rejections_not_busy_loops(
    kubeflow: KubeflowConformanceServer,
    tmp_path: Path,
    path_job: tuple[str, str],
    token: str,
    expected: int,
) -> None:
    """403 and 404: one request, one log event, nothing more until new data and the backoff."""
    kubeflow.issue_token(("team-a", "no-such-job"), ORPHAN)  # a deleted job's token
    sink = KubeflowSink(kubeflow.url(*path_job), token=token, ca_certs=str(kubeflow.ca_path))
    reporter, clock = make(sink)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})  # queued: part of the first post
    with capture_events() as events:
        drive(reporter)
        cycle(reporter)
        for _ in range(10):  # 50 s, past the 30 s rejected backoff, but no new data
            clock.advance(5.0)
            cycle(reporter)
        answers = [s.answer for s in kubeflow.seen]
        clock.advance(5.0)
        reporter.report_train_step(step=2, metrics={"loss": 0.5})  # new data: one more try
        cycle(reporter)
    reporter.close(5)
    rejected = [e for e in events if e["event"] == "trainreport.send_rejected"]
    assert ([expected], [expected] * 2, 1, expected) == (
        answers,
        [s.answer for s in kubeflow.seen][:2],
        len(rejected),
        rejected[0]["status_code"],
    )


def test_an_invalid_payload_is_a_rejection(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """422 (the server's validation) is Rejected with the server's message."""
    kubeflow.fail_next(422)
    result = sink_for(kubeflow, token_file).send(update({"updated_at": WHEN}), timeout_seconds=10)
    assert isinstance(result, Rejected)
    assert (422, "HTTP 422 InternalError: injected") == (result.status_code, result.reason)


@pytest.mark.parametrize(("status", "retry_after", "delay"), [(503, None, None), (429, "7", 7.0)])
def test_server_errors_and_rate_limits_are_retried_later(
    kubeflow: KubeflowConformanceServer,
    token_file: Path,
    status: int,
    retry_after: str | None,
    delay: float | None,
) -> None:
    """5xx and 429 are RetryLater (Retry-After honoured); the next attempt is delivered."""
    sink = sink_for(kubeflow, token_file)
    kubeflow.fail_next(status, retry_after=retry_after)
    first = sink.send(update({"updated_at": WHEN}), timeout_seconds=10)
    second = sink.send(update({"updated_at": WHEN}), timeout_seconds=10)
    sink.close()
    assert isinstance(first, RetryLater)
    assert (delay, True) == (first.delay_seconds, isinstance(second, Delivered))


def test_a_reporter_recovers_after_an_outage(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """Three 503s, then the endpoint is back: the latest state is posted."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    kubeflow.fail_next(503, count=3)
    drive(reporter)
    for step in range(1, 8):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        clock.advance(6.0)
        cycle(reporter)
    reporter.close(10)
    answers = [s.answer for s in kubeflow.seen]
    assert ([503, 503, 503], 200) == (answers[:3], answers[-1])
    assert "7" == metrics_of(kubeflow.stored[JOB])["step"]


def test_a_hanging_endpoint_cannot_hold_close_past_its_timeout(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """The endpoint accepts the connection and never answers: close(2) returns False in time."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    cycle(reporter)
    kubeflow.hang()
    clock.advance(6.0)
    reporter.report_completed()
    started = time.monotonic()
    closed = reporter.close(timeout=2.0)
    elapsed = time.monotonic() - started
    kubeflow.release()
    assert (False, True) == (closed, elapsed < 8.0)


# --------------------------------------------------------------------------- the body


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (4096, "4096"),
        (4096.0, "4096"),
        (123456789.0, "123456789"),
        (-0.0, "0"),
        (0.1, "0.1"),
        (1e-05, "1e-05"),
        (2.302585092994046, "2.3025851"),
        (0.30000000000000004, "0.3"),
        (1.2345678912e20, "1.2345679e+20"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        ("training", "training"),
        ("x" * 80, "x" * 64),
    ],
)
def test_values_are_formatted_compactly_and_exactly_where_it_matters(
    value: object, text: str
) -> None:
    """Integers exact, floats to 8 significant digits, non-finite spelled out, text cut at 64."""
    assert text == format_value(value)


def test_every_float_reads_back_within_five_parts_in_a_hundred_million() -> None:
    """8 significant digits: the relative error is at most 5e-8, and the text is short."""
    values = [1 / 3, 2 / 3 * 1e-7, 12345.678901234, -9.87654321e-30, 6.02214076e23]
    for value in values:
        text = format_value(value)
        assert abs(float(text) - value) <= 5e-8 * abs(value)
        assert len(text) <= 15


def test_more_than_256_metrics_are_cut_and_the_rest_named() -> None:
    """Bookkeeping counts too: the body has exactly 256 metrics; the others are left out."""
    metrics = [(f"train_m{i:03d}", float(i)) for i in range(300)]
    body = build_body(status="running", details={"step": 3}, metrics=metrics, updated_at=WHEN)
    sent = json.loads(body.data)["trainerStatus"]["metrics"]
    assert (MAX_METRICS, MAX_METRICS, 300 + 2 - MAX_METRICS) == (
        body.metric_count,
        len(sent),
        len(body.left_out),
    )
    assert ("train_m299", "more than 256 metrics") == body.left_out[-1]


def test_the_body_never_exceeds_64_kib() -> None:
    """Long non-ASCII names fill the body: it stops under 64 KiB and names what it left out."""
    metrics = [("\U0001f600" * 60 + f"{i:04d}", 1.0) for i in range(250)]
    body = build_body(status="running", details={}, metrics=metrics, updated_at=WHEN)
    assert len(body.data) <= MAX_BODY_BYTES
    assert body.left_out
    assert {f"body over {MAX_BODY_BYTES} bytes"} == {r for _, r in body.left_out}
    assert body.metric_count + len(body.left_out) == 251


def test_names_longer_than_64_characters_are_left_out() -> None:
    """A qualified name over the limit is left out, not cut (two could collide)."""
    body = build_body(
        status=None, details={}, metrics=[("v" * 65, 1.0), ("ok", 2.0)], updated_at=WHEN
    )
    assert (["ok"], [("v" * 65, "name longer than 64 characters")]) == (
        [m["name"] for m in json.loads(body.data)["trainerStatus"]["metrics"]],
        list(body.left_out),
    )


def test_progress_is_rounded_down_and_clamped() -> None:
    """99.9 % is 99 until completed; the ETA is a non-negative int32."""
    body = build_body(
        status="running",
        details={"percentage_done": 99.9, "eta_seconds": 1e12},
        metrics=[],
        updated_at=WHEN,
    )
    status = json.loads(body.data)["trainerStatus"]
    assert (99, 2**31 - 1) == (status["progressPercentage"], status["estimatedRemainingSeconds"])


def test_left_out_metrics_are_logged_once_by_name(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """300 metrics over three posts: one event per reason naming the left-out ones, once."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    metrics = {f"m{i:03d}": float(i) for i in range(300)}
    with capture_events() as events:
        drive(reporter)
        for step in (1, 2, 3):
            reporter.report_train_step(step=step, metrics=metrics)
            clock.advance(6.0)
            cycle(reporter)
        reporter.close(10)
    left = [e for e in events if e["event"] == "trainreport.kubeflow_metrics_left_out"]
    assert 1 == len(left)
    assert (20, "more than 256 metrics") == (len(left[0]["names"]), left[0]["reason"])
    assert MAX_METRICS == len(kubeflow.stored[JOB]["metrics"])


# ------------------------------------------------------------------------ which metrics come first


#: The bookkeeping metrics every post starts with (``status`` .. ``num_epochs`` here).
BOOKKEEPING = ["status", "phase", "step", "max_steps", "epoch", "num_epochs"]
#: Every bookkeeping name a post may carry.
BOOKKEEPING_ALL = {*BOOKKEEPING, "checkpoint_step", "cancel_reason", "error"}


def layer_metrics(count: int) -> dict[str, float]:
    """``count`` per-layer metrics, as a model with many layers logs them."""
    return {f"layer_{i:03d}_grad_norm": float(i) for i in range(count)}


def test_loss_and_learning_rate_are_posted_after_300_layer_metrics_arrived_first(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """300 layer metrics reported before ``loss``: the TrainJob still shows the loss and the LR."""
    reporter, clock = make(sink_for(kubeflow, token_file))
    drive(reporter)
    reporter.report_training_start(max_steps=10, num_epochs=2)
    reporter.report_train_step(step=1, epoch=1, metrics=layer_metrics(300))
    clock.advance(6.0)
    cycle(reporter)
    reporter.report_train_step(
        step=2, epoch=1, metrics={**layer_metrics(300), "loss": 0.5, "learning_rate": 1e-4}
    )
    reporter.report_metrics(step=2, metrics={"loss": 0.75}, phase="validation")
    clock.advance(6.0)
    cycle(reporter)
    reporter.close(10)
    names = names_of(kubeflow.stored[JOB])
    assert (
        [
            *BOOKKEEPING,
            "train_loss",
            "val_loss",
            "train_learning_rate",
            "train_layer_000_grad_norm",
        ],
        MAX_METRICS,
    ) == (names[:10], len(names))


def test_the_default_priority_is_phase_losses_losses_learning_rates_series_then_the_rest() -> None:
    """Each tier in arrival order; ``time_series_metrics`` (the series) before the scalars."""
    arrived = [
        "train_layer_0_norm",
        "system_gpu_util",
        "train_lr",
        "val_accuracy",
        "train_aux_loss",
        "val_loss",
        "train_loss",
        "test_loss",
        "val_squad_loss",
        "train_learning_rate",
        "train_tokens",
    ]
    series = {"train_layer_0_norm", "val_accuracy", "train_loss", "val_loss", "train_lr"}
    ordered = MetricPriority().order([(name, 1.0) for name in arrived], series=series)
    assert [
        "val_loss",
        "train_loss",
        "test_loss",
        "train_aux_loss",
        "val_squad_loss",
        "train_lr",
        "train_learning_rate",
        "train_layer_0_norm",
        "val_accuracy",
        "system_gpu_util",
        "train_tokens",
    ] == [name for name, _ in ordered]


def test_a_user_list_comes_first_in_the_user_s_order_then_the_default_tiers() -> None:
    """``metrics=["val_*", "train_tokens"]``: a name goes where the first glob it matches is."""
    arrived = ["train_loss", "train_tokens", "val_loss", "val_accuracy", "train_lr", "other"]
    priority = MetricPriority(["val_*", "train_tokens"])
    ordered = priority.order([(n, 0) for n in arrived], series=set())
    assert ["val_loss", "val_accuracy", "train_tokens", "train_loss", "train_lr", "other"] == [
        n for n, _ in ordered
    ]


def test_a_user_list_is_what_the_trainjob_shows_when_not_everything_fits(
    kubeflow: KubeflowConformanceServer, token_file: Path
) -> None:
    """``KubeflowSink(metrics=[...])`` over 300 layers: the named ones first, never over 256."""
    sink = sink_for(kubeflow, token_file, metrics=["train_layer_29*", "train_loss"])
    reporter, clock = make(sink)
    drive(reporter)
    reporter.report_train_step(step=1, metrics={**layer_metrics(300), "loss": 0.5})
    clock.advance(6.0)
    cycle(reporter)
    reporter.close(10)
    names = names_of(kubeflow.stored[JOB])
    values = [n for n in names if n not in BOOKKEEPING_ALL]
    user = [f"train_layer_{i:03d}_grad_norm" for i in range(290, 300)] + ["train_loss"]
    assert (user, "train_layer_000_grad_norm", MAX_METRICS) == (
        values[: len(user)],
        values[len(user)],
        len(names),
    )


@pytest.mark.parametrize("metrics", [["!train_*"], [""], [3]])
def test_a_user_list_takes_globs_only(metrics: list[Any]) -> None:
    """An exclusion, an empty or a non-string entry is a ConfigError naming the entry."""
    with pytest.raises(ConfigError, match=r"\$\.metrics\[0\]"):
        KubeflowSink("https://host/status", metrics=metrics)


# --------------------------------------------------------------------------- the conformance server


def post(
    server: KubeflowConformanceServer,
    body: bytes,
    *,
    token: str = TOKEN,
    authorization: str | None = None,
    path: str = status_path(*JOB),
) -> int:
    """A raw POST to the server (the job's path by default), verified against its CA."""
    header = f"Bearer {token}" if authorization is None else authorization
    with urllib3.PoolManager(ca_certs=str(server.ca_path), cert_reqs="CERT_REQUIRED") as pool:
        response = pool.request(
            "POST",
            server.base_url + path,
            body=body,
            headers={"Authorization": header, "Content-Type": "application/json"},
            retries=False,
        )
        return response.status


def body_with(**fields: Any) -> bytes:
    status = {"lastUpdatedTime": WHEN, **fields}
    return json.dumps({"trainerStatus": status}).encode()


@pytest.mark.parametrize(
    "fields",
    [
        {"progressPercentage": 101},
        {"progressPercentage": -1},
        {"progressPercentage": 50.5},
        {"estimatedRemainingSeconds": -1},
        {"estimatedRemainingSeconds": 2**31},
        {"metrics": [{"name": "", "value": "1"}]},
        {"metrics": [{"name": "n" * 65, "value": "1"}]},
        {"metrics": [{"name": "loss", "value": ""}]},
        {"metrics": [{"name": "loss", "value": "1" * 65}]},
        {"metrics": [{"name": "loss", "value": 0.5}]},
        {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)]},
        {"lastUpdatedTime": "yesterday"},
        {"progress": 3},
    ],
)
def test_the_server_answers_broken_field_limits_with_422(
    kubeflow: KubeflowConformanceServer, fields: dict[str, Any]
) -> None:
    """Every field limit of the contract is a validation error, and nothing is stored."""
    assert 422 == post(kubeflow, body_with(**fields))
    assert JOB not in kubeflow.stored


def test_the_server_checks_the_size_before_the_path_and_the_token(
    kubeflow: KubeflowConformanceServer,
) -> None:
    """Upstream's body-size middleware runs before routing and auth: 413 for any path."""
    big = body_with(metrics=[{"name": "x", "value": "y" * 60}] * 1200)
    assert [413, 413] == [
        post(kubeflow, big, token="nope"),
        post(kubeflow, big, path="/apis/unknown"),
    ]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"bearer {TOKEN}", 200),
        (f"  Bearer \t {TOKEN}  ", 200),
        (f"Bearer {TOKEN} another", 403),
        (f"Basic {TOKEN}", 403),
        (TOKEN, 403),
        ("", 403),
    ],
)
def test_the_server_reads_the_bearer_header_as_upstream_does(
    kubeflow: KubeflowConformanceServer, header: str, expected: int
) -> None:
    """The scheme in any case, any whitespace; exactly one credential (``extractRawToken``)."""
    assert expected == post(kubeflow, body_with(), authorization=header)


def test_a_token_is_good_for_its_own_trainjob_only_and_for_an_hour(tmp_path: Path) -> None:
    """The audience names the job: another job's token is 403, as is one past its hour."""
    now = [1000.0]
    other = ("team-a", "other-job")
    server = KubeflowConformanceServer(tmp_path, {JOB: TOKEN, other: ROTATED}, clock=lambda: now[0])
    try:
        answers = [post(server, body_with(), token=ROTATED), post(server, body_with())]
        now[0] += 3600.0
        answers.append(post(server, body_with()))
    finally:
        server.stop()
    assert (
        [403, 200, 403],
        "trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llama-ft/status",
    ) == (
        answers,
        token_audience(*JOB),
    )


def test_the_server_authorizes_before_it_decodes_and_finds_the_job_after(
    kubeflow: KubeflowConformanceServer,
) -> None:
    """Wrong token and bad JSON: 403; a deleted job's good token: 404; no trainerStatus: 200."""
    kubeflow.issue_token(("team-a", "deleted"), ORPHAN)
    assert [403, 404, 200, 200] == [
        post(kubeflow, b"{not json", token="nope"),
        post(kubeflow, body_with(), token=ORPHAN, path=status_path("team-a", "deleted")),
        post(kubeflow, b"{}"),
        post(kubeflow, b'{"trainerStatus": null}'),
    ]
    assert JOB not in kubeflow.stored


def test_the_server_checks_token_size_and_json(kubeflow: KubeflowConformanceServer) -> None:
    """Wrong token 403, over 64 KiB 413, not JSON 422, a good body 200 and stored."""
    good = body_with(progressPercentage=5, metrics=[{"name": "loss", "value": "0.5"}])
    big = body_with(metrics=[{"name": "x", "value": "y" * 60}] * 1200)
    assert [403, 413, 422, 200] == [
        post(kubeflow, good, token="nope"),
        post(kubeflow, big),
        post(kubeflow, b"{not json"),
        post(kubeflow, good),
    ]
    assert 5 == kubeflow.stored[JOB]["progressPercentage"]


# --------------------------------------------------------------------------- from_env


#: The status server's Service as Kubeflow Trainer v2.3's plugin names it (the webhook
#: Service of the controller manager, the status server's port 10443).
SERVICE = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"


def kubeflow_env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "KUBEFLOW_TRAINER_SERVER_URL": SERVICE + status_path(*JOB),
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(tmp_path / "ca.crt"),
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token"),
        **more,
    }


def test_from_env_reads_the_three_injected_variables(tmp_path: Path) -> None:
    """URL, CA file and token file come from Kubeflow Trainer's variables."""
    sink = KubeflowSink.from_env(kubeflow_env(tmp_path))
    assert (
        SERVICE + status_path(*JOB),
        str(tmp_path / "ca.crt"),
        str(tmp_path / "token"),
    ) == (sink.url, sink.ca_certs, sink._token_file.path if sink._token_file else None)


def test_the_metrics_variable_names_what_comes_first(tmp_path: Path) -> None:
    """``TRAINREPORT_KUBEFLOW_METRICS``: comma-separated globs, blanks dropped, order kept."""
    env = kubeflow_env(tmp_path, TRAINREPORT_KUBEFLOW_METRICS=" val_*, train_loss,, ")
    with capture_events() as events:
        sink = KubeflowSink.from_env(env)
    assert (("val_*", "train_loss"), []) == (
        sink.metrics,
        [e for e in events if e["event"].startswith("trainreport.config_field")],
    )


def test_a_bad_metrics_variable_is_logged_and_the_default_order_kept(tmp_path: Path) -> None:
    """An exclusion in the list is refused (one event naming the variable); nothing is put first."""
    env = kubeflow_env(tmp_path, TRAINREPORT_KUBEFLOW_METRICS="train_loss,!val_*")
    with capture_events() as events:
        sink = KubeflowSink.from_env(env)
    invalid = [e for e in events if e["event"] == "trainreport.config_field_invalid"]
    assert ((), ["TRAINREPORT_KUBEFLOW_METRICS"]) == (
        sink.metrics,
        [e["variable"] for e in invalid],
    )


def test_reporter_from_env_picks_kubeflow_when_it_is_the_only_destination(tmp_path: Path) -> None:
    """Inside a TrainJob without TRAINREPORT_URL, reports go to the TrainJob status."""
    assert isinstance(Reporter.from_env(kubeflow_env(tmp_path)).sink, KubeflowSink)


def test_with_both_urls_the_reporter_sends_to_both_the_job_status_service_first(
    tmp_path: Path,
) -> None:
    """Both set: the HttpSink (first: a resume reads its curves) and the KubeflowSink beside it."""
    env = kubeflow_env(tmp_path, TRAINREPORT_URL="http://127.0.0.1:8321", TRAINREPORT_JOB_ID="j")
    with capture_events() as events:
        reporter = Reporter.from_env(env)
    assert [HttpSink, KubeflowSink] == [type(s) for s in reporter.sinks]
    assert [] == [e for e in events if e["event"] == "trainreport.kubeflow_not_used"]


def test_an_unusable_kubeflow_url_falls_back_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An http:// URL is refused (TLS is required): logged, and the run is kept in a file."""
    monkeypatch.chdir(tmp_path)
    env = kubeflow_env(tmp_path, KUBEFLOW_TRAINER_SERVER_URL="http://plain/status")
    with capture_events() as events:
        sink = Reporter.from_env(env).sink
    assert isinstance(sink, FileSink)
    assert ["KUBEFLOW_TRAINER_SERVER_URL"] == [
        e["variable"] for e in events if e["event"] == "trainreport.config_field_invalid"
    ]


@pytest.mark.parametrize(
    "kwargs", [{"url": "http://x/status"}, {"url": "https:///status"}, {"read_timeout_seconds": 0}]
)
def test_bad_arguments_are_a_config_error(kwargs: dict[str, Any]) -> None:
    """The constructor refuses a plain-HTTP URL, a URL without host, a zero timeout."""
    url = kwargs.pop("url", "https://host/status")
    with pytest.raises(ConfigError):
        KubeflowSink(url, **kwargs)


def test_a_proxy_url_with_credentials_authenticates_to_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTPS_PROXY=http://user:pw@proxy: the credentials go in Proxy-Authorization, not the URL.

    KubeflowSink builds its pool with the HTTP transport's helper, as HttpSink does.
    """
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.internal:3128")
    sink = KubeflowSink("https://kubeflow.internal/status")
    pool = sink._pool_for_this_process()
    assert isinstance(pool, urllib3.ProxyManager)
    assert pool.proxy is not None
    assert ("proxy.internal", None) == (pool.proxy.host, pool.proxy.auth)
    assert pool.proxy_headers["proxy-authorization"].startswith("Basic ")


# --------------------------------------------------------------------------- the final post


@pytest.mark.parametrize(("status", "retry_after"), [(429, "30"), (503, None)])
def test_a_refused_final_post_is_retried_within_the_close_budget(
    kubeflow: KubeflowConformanceServer, token_file: Path, status: int, retry_after: str | None
) -> None:
    """A 429 (Retry-After 30) or a 503 on the final post: close(15) still ends at completed, 100 %.

    The run is at 25 % when it completes; the endpoint refuses the final post
    once, then accepts. The retry waits for the sink's 5 s floor (never less),
    and a Retry-After longer than what is left of the close budget is cut to
    the last attempt that fits (docs/integrations.md, "The final post").
    """
    sink = sink_for(kubeflow, token_file)
    reporter = Reporter(
        sink, ReportingConfig(min_report_interval_seconds=0.01, backoff_jitter=0.0), rank=0
    )
    drive(reporter)
    reporter.report_training_start(max_steps=100)
    reporter.report_train_step(step=25, metrics={"loss": 0.5})
    cycle(reporter)
    assert 25 == kubeflow.stored[JOB]["progressPercentage"]
    reporter.report_completed()
    kubeflow.fail_next(status, retry_after=retry_after)
    started = time.monotonic()
    closed = reporter.close(timeout=15)
    elapsed = time.monotonic() - started
    final = kubeflow.stored[JOB]
    answers = [s.answer for s in kubeflow.seen]
    assert (True, 100, "completed", [200, status, 200]) == (
        closed,
        final["progressPercentage"],
        metrics_of(final)["status"],
        answers,
    )
    assert 5.0 <= elapsed < 15.0


def test_describe_and_repr_show_no_userinfo_query_or_fragment(token_file: Path) -> None:
    """A credential in the endpoint URL's userinfo, query or fragment is never printed."""
    sink = KubeflowSink(
        "https://u:s3cret-A@trainer.example/status?sig=s3cret-B#s3cret-C", token_file=token_file
    )

    shown = sink.describe() + repr(sink)

    assert "s3cret" not in shown
    assert "https://trainer.example/status" in sink.describe()
