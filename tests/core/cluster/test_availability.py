"""Availability over the last hour and Ready flips, against a brute-force reading of the history."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.cluster.availability import Change, Fleet, ReadyHistory

HOUR = 3600.0


def test_half_an_hour_down_of_one_hour_is_half_available() -> None:
    history = ReadyHistory()
    assert history.ratio(0.0) is None
    assert history.observe(0.0, True) is False  # the first value is no flip
    assert history.ratio(0.0) == 1.0
    assert history.observe(1800.0, False) is True
    assert history.ratio(3600.0) == 0.5
    assert history.flips(3600.0) == 1
    # An hour later the window holds only the outage.
    assert history.ratio(5400.0) == 0.0
    assert history.flips(5400.0) == 0
    assert history.observe(5400.0, False) is False  # the same value again: no flip


def test_watched_time_counts_not_the_hour_before_the_manager_started() -> None:
    history = ReadyHistory()
    history.observe(100.0, True)
    history.observe(160.0, False)
    assert history.ratio(220.0) == 0.5


steps = st.lists(
    st.tuples(st.floats(0.0, 2 * HOUR, allow_nan=False), st.booleans()), min_size=1, max_size=40
)


def reference(observed: list[tuple[float, bool]], now: float) -> tuple[float, int]:
    """Integrate Ready over [max(first, now - hour), now] second by exact segment."""
    start = max(observed[0][0], now - HOUR)
    changes = [observed[0]]
    for at, ready in observed[1:]:
        if ready != changes[-1][1]:
            changes.append((at, ready))
    up = 0.0
    for index, (at, ready) in enumerate(changes):
        end = changes[index + 1][0] if index + 1 < len(changes) else now
        if ready:
            up += max(0.0, min(end, now) - max(at, start))
    flips = sum(1 for at, _ in changes[1:] if at > now - HOUR)
    if now <= start:
        return (1.0 if changes[-1][1] else 0.0), flips
    return up / (now - start), flips


@given(steps, st.floats(0.0, 2 * HOUR))
def test_ratio_and_flips_match_the_whole_history(
    gaps: list[tuple[float, bool]], tail: float
) -> None:
    history = ReadyHistory()
    now = 0.0
    observed = []
    for gap, ready in gaps:
        now += gap
        history.observe(now, ready)
        observed.append((now, ready))
    now += tail
    ratio, flips = reference(observed, now)
    got = history.ratio(now)
    assert got is not None
    assert 0.0 <= got <= 1.0
    assert abs(got - ratio) < 1e-6
    assert history.flips(now) == flips


def cluster(name: str, status: str | None, reason: str = "", held: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": "team", "name": name, "finalizers": []}}
    if held:
        obj["metadata"]["finalizers"] = ["f"]
    if status is not None:
        condition = {"type": "Ready", "status": status, "reason": reason, "message": "m"}
        obj["status"] = {"conditions": [condition]}
    return obj


def test_the_fleet_counts_reasons_and_registrations_and_reports_each_change_once() -> None:
    fleet = Fleet("f")
    changes = fleet.resync(
        [cluster("a", "True", "Ready", held=True), cluster("b", None), cluster("c", "False", "X")],
        0.0,
    )
    assert changes == [
        Change("team", "a", None, ("True", "Ready", "m")),
        Change("team", "c", None, ("False", "X", "m")),
    ]
    assert fleet.by_reason() == {"Ready": 1, "": 1, "X": 1}
    assert fleet.registrations() == 1
    # The same state again (a resync, a label change) is no change.
    assert fleet.update(cluster("a", "True", "Ready", held=True), 5.0) == []
    assert fleet.update(cluster("a", "False", "Unreachable"), 10.0) == [
        Change("team", "a", ("True", "Ready"), ("False", "Unreachable", "m"))
    ]
    assert fleet.clusters[("team", "a")].flips_total == 1
    assert fleet.registrations() == 0
    fleet.delete(cluster("c", None))
    assert fleet.resync([cluster("a", "False", "Unreachable")], 20.0) == []
    assert set(fleet.clusters) == {("team", "a")}
