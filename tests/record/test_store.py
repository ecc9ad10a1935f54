"""MetricStore: columns, rewind, delivered tracking, the name cap."""

from __future__ import annotations

from array import array

from trainreport._record import _store
from trainreport._record._store import RELEASE_MIN_POINTS, MetricStore, Series
from trainreport._record._thinning import thin_columns


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


# --- memory bounded by what is not yet held everywhere (docs/engine.md, "Memory") ---------


def _acknowledge_all(store: MetricStore) -> None:
    """Every destination says it holds every series as the store holds it now."""
    for d in range(store.destinations):
        sent = {name: len(s) for name, s in store.series.items()}
        store.mark_built(d, list(sent))
        store.acknowledge(d, sent, dict(sent))


def _long_store(points: int, destinations: int = 2, every: int = 100) -> MetricStore:
    """``points`` steps of ``a`` and, every 10 steps, of ``v``; acknowledged every ``every``."""
    store = MetricStore(destinations=destinations)
    store.admit("a", as_series=True)
    store.admit("v", as_series=True)
    for step in range(1, points + 1):
        store.record("a", step, 1 + step // 1000, step * 0.5)
        if step % 10 == 0:
            store.record("v", step, 1, -step * 1.0)
        if step % every == 0:
            _acknowledge_all(store)
    return store


def test_points_every_destination_holds_leave_memory_and_the_lengths_stay_absolute() -> None:
    """After acknowledgements the store keeps a bounded tail; lengths count the whole series."""
    store = _long_store(50_000)

    a = store.series["a"]
    assert 50_000 == len(a)
    assert [50_000, 50_000] == a.delivered
    assert store.retained_points() <= 2 * (RELEASE_MIN_POINTS + 100)
    assert 1 == len(a.runs)  # one step a point: one run remembers where every step was
    assert 50_000 == a.last_step
    assert [("a", 25_000.0), ("v", -50_000.0)] == list(store.current_values())
    assert 0 == store.unsent_points(0)
    assert 55_000 == store.delivered_points(1)


def test_the_retained_tail_stays_bounded_over_a_long_run() -> None:
    """Retained points do not grow with the run (structural: no RSS involved)."""
    bound = 2 * (RELEASE_MIN_POINTS + 100)  # two series: a batch not yet released + a send
    retained = [_long_store(points).retained_points() for points in (5_000, 20_000, 100_000)]
    assert [True] * 3 == [0 < n <= bound for n in retained], retained


def test_the_release_batch_is_the_stores_release_min_points() -> None:
    """Acknowledged points leave in batches of ``release_min_points`` (default 256), newest kept."""
    default, small = MetricStore(), MetricStore(release_min_points=4)
    for store in (default, small):
        store.admit("a", as_series=True)
        for step in range(1, 11):
            store.record("a", step, 1, float(step))
        _acknowledge_all(store)

    assert (RELEASE_MIN_POINTS, 4) == (default.release_min_points, small.release_min_points)
    assert (10, 1) == (default.retained_points(), small.retained_points())
    assert (0, 9) == (default.points_released, small.points_released)
    assert 10 == len(small.series["a"])


def test_nothing_leaves_memory_until_every_destination_holds_it() -> None:
    """Points one destination has not acknowledged stay, and so do those of a kept destination."""
    store = MetricStore(destinations=2)
    store.admit("a", as_series=True)
    for step in range(1, 2001):
        store.record("a", step, 1, float(step))
    store.acknowledge(0, {"a": 2000}, {"a": 2000})
    assert 2000 == store.retained_points()
    store.keep_every_point(1)
    store.acknowledge(1, {"a": 2000}, {"a": 2000})
    assert 2000 == store.retained_points()


def test_a_rewind_to_a_step_that_left_memory_cuts_at_its_absolute_index() -> None:
    """Stepping back before the retained base truncates there; the next suffix starts there."""
    store = _long_store(10_000, destinations=1)
    a = store.series["a"]
    assert a.base > 5_000

    store.record("a", 4_000, 1, -1.0)

    assert 4_000 == len(a)  # steps 1 .. 3999 and the new 4000
    assert 3_999 == a.base
    assert [4_000] == list(a.steps)
    assert [3_999] == a.delivered
    assert [("a", 10_000, 6_001)] == store.end_report()
    store.record("a", 4_001, 1, -2.0)
    assert 4_000 == a.index_left(4_001)
    assert 1_000 == a.index_left(1_001)
    assert 0 == a.index_left(-5)


def test_a_rewind_finds_steps_reported_at_a_stride_and_irregularly() -> None:
    """Every 10 steps, then irregular steps: each forgotten step's index is still found."""
    s = Series()
    given = [10 * i for i in range(1, 301)] + [3001, 3007, 3008, 3020, 3500, 3501, 3502, 3600]
    for step in given:
        s.append(step, 1, float(step))
    s.forget(len(given) - 1)
    assert 3 <= len(s.runs) <= 6
    for i, step in enumerate(given):
        assert i == s.index_left(step), step
        assert i == s.index_left(step - 1 if i == 0 else given[i - 1] + 1), step
    assert len(given) - 1 == s.index_left(3599)


def test_series_released_together_share_one_step_progression_and_a_long_one_is_not_kept() -> None:
    """100 series leaving memory at the same steps build their run's progression once.

    Building it is what a release costs a point (about 40 ns); what is kept for
    the next series is bounded: a progression longer than 65,536 steps is built
    each time.
    """
    _store._shared_progression.cache_clear()
    store = MetricStore(release_min_points=4)
    names = [f"m{k}" for k in range(100)]
    for name in names:
        store.admit(name, as_series=True)
    for step in range(1, 1001):
        for name in names:
            store.record(name, step, 0, float(step))
    _acknowledge_all(store)
    info = _store._shared_progression.cache_info()
    assert (1, 99) == (info.misses, info.hits)
    assert all(1 == len(s.runs) for s in store.series.values())
    assert 1000 == store.series["m7"].index_left(1001)
    long = _store._SHARED_PROGRESSION_STEPS + 1
    assert list(range(5, 5 + 3 * long, 3)) == list(_store._progression(5, 3, long))
    assert 1 == _store._shared_progression.cache_info().currsize


def test_a_purge_after_a_step_that_left_memory_keeps_the_right_prefix() -> None:
    """The run-wide purge (resume from a checkpoint) cuts forgotten points at the right index."""
    store = _long_store(3_000, destinations=1)
    cut = store.purge_after(1_500)
    assert [("a", 3_000, 1_500), ("v", 3_000, 150)] == cut
    assert 1_500 == len(store.series["a"])
    assert 150 == len(store.series["v"])
    assert 1_500 == store.series["a"].last_step
    store.record("a", 1_500, 1, 7.0)  # the purged step itself is replaced, not duplicated
    assert 1_500 == len(store.series["a"])
    assert [7.0] == list(store.series["a"].values)


# --- a thinned full-state destination (docs/engine.md, "Memory") -------------------------


def _full_state_store(points: int, budgets: list[int | None], spike_at: int = 0) -> MetricStore:
    """Series ``a`` to full-state destinations thinned to ``budgets``, acknowledged every 100."""
    store = MetricStore(destinations=len(budgets))
    store.admit("a", as_series=True)
    for d, budget in enumerate(budgets):
        store.keep_every_point(d)
        if budget is not None:
            store.thin(d, budget)
    for step in range(1, points + 1):
        store.record("a", step, 1, 50.0 if step == spike_at else 1.0 / step)
        if step % 100 == 0:
            _acknowledge_all(store)
    return store


def _whole(points: int, spike_at: int = 0) -> tuple[array[int], array[int], array[float]]:
    steps = array("q", range(1, points + 1))
    values = array("d", (50.0 if s == spike_at else 1.0 / s for s in steps))
    return steps, array("i", [1] * points), values


def test_a_thinned_full_state_destination_lets_points_leave_memory_as_a_summary() -> None:
    """Thinned to 100 points: a tail and a bounded summary stay, and the body is unchanged.

    Before thinning (``thin`` not called) the same destination keeps every point.
    """
    kept = _full_state_store(20_000, [None])
    assert 20_000 == kept.retained_points()
    store = _full_state_store(20_000, [100], spike_at=12_345)
    a = store.series["a"]
    assert store.retained_points() <= RELEASE_MIN_POINTS + 100
    assert 19_000 < store.points_released
    assert store.summarised_points() <= 2 * 100
    steps, epochs, values = _whole(20_000, spike_at=12_345)
    expected = thin_columns(steps, epochs, values, None, 100)
    sent = a.thinned(100)
    assert (list(expected[0]), list(expected[2])) == (list(sent[0]), list(sent[2]))
    assert 12_345 in sent[0]
    assert 20_000 == len(a)


def test_a_full_state_destination_not_thinned_keeps_every_point_beside_a_thinned_one() -> None:
    """One full-state destination still sent every point: nothing leaves."""
    store = _full_state_store(2_000, [100, None])
    assert 2_000 == store.retained_points()
    assert 0 == store.points_released


def test_the_summary_serves_every_thinned_budget_at_once() -> None:
    """Thinned to 100 and to 40: the summary is bucketed for 100, each body is its own thinning."""
    store = _full_state_store(20_000, [100, 40], spike_at=777)
    steps, epochs, values = _whole(20_000, spike_at=777)
    a = store.series["a"]
    assert 0 < store.points_released
    for budget in (100, 40):
        expected = thin_columns(steps, epochs, values, None, budget)
        assert list(expected[0]) == list(a.thinned(budget)[0])


def test_the_journal_still_holds_points_back_from_a_thinned_destination() -> None:
    """A journal that was not given the points: they stay, thinned or not."""
    store = MetricStore(destinations=1)
    store.journal_fed = True
    store.admit("a", as_series=True)
    store.keep_every_point(0)
    store.thin(0, 100)
    for step in range(1, 2_001):
        store.record("a", step, 1, float(step))
    _acknowledge_all(store)
    assert 2_000 == store.retained_points()


def test_a_rewind_into_summarised_points_cuts_the_summary_too() -> None:
    """Back to step 4,000 of 10,000: the body covers steps 1 to 4,000, none after the cut."""
    store = _full_state_store(10_000, [100])
    a = store.series["a"]
    assert a.base > 5_000
    store.record("a", 4_000, 2, -1.0)
    assert (4_000, 3_999) == (len(a), a.base)
    sent = a.thinned(100)
    assert (1, 4_000) == (sent[0][0], sent[0][-1])
    assert all(s < 4_000 for s in sent[0][:-1])
    assert -1.0 == sent[2][-1]
    assert len(sent[0]) <= 100


def test_seeding_a_series_drops_its_summary() -> None:
    """A resume's seed replaces the series' start: every point it has is in memory again."""
    store = _full_state_store(5_000, [100])
    in_memory = list(store.series["a"].steps)
    assert store.series["a"].summary is not None
    store.seed("a", array("q", [1, 2]), array("i", [1, 1]), array("d", [1.0, 0.5]))
    a = store.series["a"]
    assert (None, 0) == (a.summary, a.base)
    assert [1, 2, *in_memory] == list(a.steps)
    assert list(thin_columns(a.steps, a.epochs, a.values, None, 100)[0]) == list(a.thinned(100)[0])
