"""MetricStore: columns, rewind, delivered tracking, the name cap."""

from __future__ import annotations

from trainreport._store import MetricStore, Series


def steps(series: Series) -> list[int]:
    return list(series.steps)


def test_point_costs_twenty_eight_bytes_in_columns() -> None:
    """A point is an int64 step, an int32 epoch, a float64 value and a float64 time.

    See docs/design.md#performance: < 40 B.
    """
    s = Series()
    for i in range(1000):
        s.append(i, 1, 0.5, 1_767_225_600.0 + i)
    assert 28 * 1000 == s.nbytes()


def test_same_step_replaces_the_last_point() -> None:
    """Re-reporting a step replaces that point; it is not duplicated."""
    s = Series()
    s.append(1, 1, 1.0)
    s.append(1, 1, 2.0)
    assert [1] == steps(s)
    assert [2.0] == list(s.values)


def test_series_step_going_back_replaces_the_tail() -> None:
    """A point at or before the last step truncates the tail from it on (validation rule)."""
    s = Series()
    for i in (5, 10, 15):
        s.append(i, 1, float(i))
    assert 2 == s.append(10, 1, 0.0)
    assert [5, 10] == steps(s)


def test_purge_after_discards_later_points_in_every_series() -> None:
    """The run-wide purge (a resume from an earlier checkpoint) cuts every series after a step."""
    store = MetricStore()
    store.admit("train_loss", as_series=True)
    store.admit("val_loss", as_series=True)
    for step in range(1, 11):
        store.record("train_loss", step, 1, float(step))
        if step % 5 == 0:
            store.record("val_loss", step, 1, float(step))
    assert 5 == sum(discarded for _, _, discarded in store.purge_after(6))
    store.record("train_loss", 6, 1, 60.0)
    assert [1, 2, 3, 4, 5, 6] == steps(store.series["train_loss"])
    assert [5] == steps(store.series["val_loss"])
    assert 1 == store.rewinds


def test_truncation_lowers_what_is_known_delivered() -> None:
    """After a rewind the destination must be sent the series from the cut on."""
    store = MetricStore()
    store.admit("train_loss", as_series=True)
    for step in range(1, 6):
        store.record("train_loss", step, 1, 1.0)
    store.mark_built(0, ["train_loss"])
    store.acknowledge(0, {"train_loss": 5}, None)
    assert not store.series["train_loss"].needs_send(0)
    store.purge_after(2)
    series = store.series["train_loss"]
    assert 2 == series.delivered[0]
    assert 5 == series.server_length[0]
    assert series.needs_send(0)  # even with no new point: the server holds too many


def test_acknowledge_trusts_the_destination_lengths() -> None:
    """When the destination reports fewer points than sent, they are resent."""
    store = MetricStore()
    store.admit("a", as_series=True)
    for step in range(1, 4):
        store.record("a", step, 1, 1.0)
    store.mark_built(0, ["a"])
    store.acknowledge(0, {"a": 3}, {"a": 2})
    assert 2 == store.series["a"].delivered[0]
    assert 1 == store.unsent_points(0)


def test_name_cap_refuses_new_names() -> None:
    """Beyond max_names distinct names, admit() refuses (docs/design.md#failure-handling)."""
    store = MetricStore(max_names=2)
    assert store.admit("a", as_series=True)
    assert store.admit("b", as_series=False)
    assert not store.admit("c", as_series=True)


def test_current_values_include_series_tails_and_scalars() -> None:
    """Every metric's current value: the newest point of each series and each scalar."""
    store = MetricStore()
    store.admit("a", as_series=True)
    store.admit("b", as_series=False)
    store.record("a", 1, 1, 1.0)
    store.record("a", 2, 1, 2.0)
    store.record("b", 2, 1, 7.0)
    assert {"a": 2.0, "b": 7.0} == dict(store.current_values())
