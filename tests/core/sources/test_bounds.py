"""What one ClusterSource may make: a Secret's contexts read once and cut at the manager's bound,
the source's Clusters cut at its own, each cut said in the status and no Cluster lost to it."""

from __future__ import annotations

import base64
from collections.abc import Callable
from types import ModuleType
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from kokumi.core.kubeconfig import entries, reader
from kokumi.core.kubeconfig.connection import Refusal
from kokumi.core.kubeconfig.reader import examine, parse
from kokumi.core.reasons import Reason
from kokumi.core.sources import bounds
from kokumi.core.sources import secretplan as sp
from kokumi.core.sources.plan import Existing
from kokumi.core.sources.spec import ClusterSource
from kokumi.core.sources.status import status_of
from tests.core.kubeconfig.test_contexts import many_contexts, shared
from tests.core.sources.test_secretsource import MARK, UID, source
from tests.support.sources import applied


def all_contexts() -> ClusterSource:
    return source(key="kubeconfig", contexts="All")


def secret_of(text: str) -> dict[str, Any]:
    return {"data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


# --- one read for all the contexts --------------------------------------------------------------


def _old_context_verdicts(secret: dict[str, Any]) -> object:
    """The sources' verdicts as they were made before: examine, then a parse per context."""
    text = base64.b64decode(secret["data"]["kubeconfig"]).decode()
    names, first = examine(text)
    if not names:
        assert isinstance(first, Refusal)
        return (Reason.INVALID_KUBECONFIG, first.message), ()
    verdicts = []
    for name in names:
        checked = parse(text, context=name)
        problem = (
            (Reason.INVALID_KUBECONFIG, checked.message) if isinstance(checked, Refusal) else None
        )
        verdicts.append((name, problem))
    return None, tuple(verdicts)


@given(many_contexts())
def test_a_sources_verdicts_are_those_of_a_parse_per_context(text: str) -> None:
    shape = all_contexts().shape
    assert shape is not None
    assert sp.context_verdicts(secret_of(text), shape) == _old_context_verdicts(secret_of(text))


def counting(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[int]:
    calls: list[int] = []
    real: Callable[..., Any] = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_secret_of_many_contexts_is_read_once_and_its_cluster_checked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read once per context, 2,000 contexts took a minute of the manager's loop."""
    loads = counting(monkeypatch, reader, "load")
    authorities = counting(monkeypatch, entries, "certificate_authority")
    shape = all_contexts().shape
    assert shape is not None
    whole, each = sp.context_verdicts(secret_of(shared(300)), shape)
    assert whole is None and len(each) == 300 and all(p is None for _, p in each)
    assert (len(loads), len(authorities)) == (1, 1)


def test_a_sources_verdicts_are_those_of_a_parse_per_context_cut_at_the_bound_too() -> None:
    shape = all_contexts().shape
    assert shape is not None
    secret = secret_of(shared(250))
    problem, verdicts, beyond = sp.judge_contexts(secret, shape, 100)
    whole, every = sp.context_verdicts(secret, shape)
    assert (problem, verdicts, beyond) == (whole, every[:100], 150)
    assert [name for name, _ in verdicts] == [f"ctx-{i:05d}" for i in range(100)]


# --- the contexts of one Secret -----------------------------------------------------------------


def fleet(contexts: int, limit: int) -> sp.Labelled:
    """A Secret of ``contexts`` contexts as the actor reads it under a bound of ``limit``."""
    names = [f"edge-{i:04d}" for i in range(contexts)]
    judged = tuple((n, None) for n in names[:limit])
    return sp.Labelled("fleet", MARK, None, judged, beyond=max(0, contexts - limit))


def test_a_secret_of_2000_contexts_makes_the_first_100_and_says_so() -> None:
    src = all_contexts()
    decided = sp.plan_secrets(src, [fleet(2000, 100)], {})
    assert [d.context for d in decided.create] == [f"edge-{i:04d}" for i in range(100)]
    status = status_of(src, decided, {})
    assert (status.ready, status.reason) == (False, Reason.TOO_MANY_CONTEXTS)
    assert "1 matched Secret has more than 100 contexts (--max-contexts-per-secret)" in (
        status.message
    )
    (entry,) = [e for e in status.not_imported if e.reason is Reason.TOO_MANY_CONTEXTS]
    assert entry.secret == "fleet"
    assert "it has 2,000 contexts" in entry.message and "the other 1,900" in entry.message
    assert "\n" not in status.message + entry.message


def test_clusters_of_contexts_past_the_bound_stay() -> None:
    """Made under a higher bound (or before the Secret grew): the cut deletes none of them."""
    src = all_contexts()
    existing: dict[str, Existing] = {}
    existing = applied(src, sp.plan_secrets(src, [fleet(300, 300)], existing), existing)
    assert len(existing) == 300
    lowered = sp.plan_secrets(src, [fleet(300, 100)], existing)
    assert (lowered.create, lowered.delete) == ((), ())
    assert len(lowered.kept) == 300
    assert status_of(src, lowered, {}).reason is Reason.TOO_MANY_CONTEXTS
    # Under the bound again: as before, a context gone takes its Cluster with it.
    fewer = sp.plan_secrets(src, [fleet(90, 100)], existing)
    assert len(fewer.delete) == 210 and fewer.bounded == ()


# --- the Clusters of one source -----------------------------------------------------------------


def secrets(count: int) -> list[sp.Labelled]:
    return [sp.Labelled(f"s{i:04d}", MARK) for i in range(count)]


def test_a_source_makes_the_first_clusters_by_secret_name_and_says_so() -> None:
    src = source()
    decided = bounds.cap_clusters(sp.plan_secrets(src, secrets(30), {}), 10)
    assert [d.secret for d in decided.create] == [f"s{i:04d}" for i in range(10)]
    status = status_of(src, decided, {})
    assert (status.ready, status.reason) == (False, Reason.TOO_MANY_CLUSTERS)
    assert "20 Clusters are not made: one ClusterSource keeps at most 10" in status.message
    waiting = [e for e in status.not_imported if e.reason is Reason.TOO_MANY_CLUSTERS]
    assert [e.secret for e in waiting] == [f"s{i:04d}" for i in range(10, 30)]
    assert status.not_usable == 0 and status.conflicts == 0
    within = bounds.cap_clusters(sp.plan_secrets(src, secrets(10), {}), 10)
    assert status_of(src, within, {}).reason is Reason.READY


@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=4),
    st.lists(st.integers(1, 25), min_size=1, max_size=4),
)
def test_the_bound_holds_keeps_existing_clusters_and_is_stable(
    counts: list[int], limits: list[int]
) -> None:
    """Secrets come and go and the bound changes between passes: the source never holds more
    than the bound through its own creates, never deletes a Cluster whose Secret is still
    matched, makes the first by name, and a second pass changes nothing."""
    src = source()
    existing: dict[str, Existing] = {}
    for i, count in enumerate(counts):
        limit = limits[i % len(limits)]
        matched = secrets(count)
        decided = bounds.cap_clusters(sp.plan_secrets(src, matched, existing), limit)
        before = set(existing)
        after = applied(src, decided, existing)
        names = {s.name for s in matched}
        assert before & names <= set(after)  # none of those still matched went
        assert len(after) <= max(limit, len(before & names))
        if len(after) < len(names):
            assert status_of(src, decided, {}).reason is Reason.TOO_MANY_CLUSTERS
            made = sorted(set(after) - before)
            waiting = sorted(names - set(after))
            assert not made or not waiting or made[-1] < waiting[0]
        again = bounds.cap_clusters(sp.plan_secrets(src, matched, after), limit)
        assert (again.create, again.update, again.delete) == ((), (), ())
        assert status_of(src, again, {}) == status_of(
            src, bounds.cap_clusters(sp.plan_secrets(src, matched, after), limit), {}
        )
        existing = after
    assert all(e.owner == ("team", UID) for e in existing.values())
