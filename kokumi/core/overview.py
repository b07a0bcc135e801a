"""The fleet at a glance, as ``kokumi ui``'s overview shows it: counts, each a link to the Clusters
it counts.

The counts are made from the list's rows (:class:`~kokumi.core.clusterview.Row`) and each one's
filter is a list address (:class:`~kokumi.core.clusterview.Query`), so following a count lists
exactly the Clusters it counted. Apart from :mod:`kokumi.core.clusterview`, which it reads,
because it answers another question: how the fleet is doing as a whole, not what one Cluster or
one page of the list shows. Pure: the caller lists the Clusters and the ClusterSources, this
counts them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kokumi.core.clusterview import CHECKING, READIES, Query, Row, ready_condition
from kokumi.core.environments import selectors
from kokumi.core.text import one_line
from kokumi.objects import metadata_of

__all__ = [
    "MAX_LABEL_KEYS",
    "MAX_LABEL_VALUES",
    "MAX_VALUES_SHOWN",
    "Count",
    "Filter",
    "LabelCounts",
    "Overview",
    "SourceView",
    "overview",
    "source_view",
]

MAX_LABEL_VALUES: Final = 12
"""A label key is counted on its own, unasked, when its Clusters have at most this many values
(region, tier, fleet): a key with a value per Cluster (a name, an id) counts nothing."""

MAX_LABEL_KEYS: Final = 6
"""Label keys counted unasked, the most used first: an overview is read at a glance."""

MAX_VALUES_SHOWN: Final = 50
"""Values of one asked-for key shown on their own; the rest are counted together."""


@attrs.frozen
class Filter:
    """What a count's link filters the list by, on top of the overview's own scope.

    ``selector`` is evaluated by the API server when the link is followed (in the form
    ``str(selector)`` writes, kubectl's); :meth:`matches` is the same rule on a row, by
    :mod:`kokumi.core.environments.selectors`, which has the API server's semantics.
    """

    namespace: str = ""
    selector: selectors.Selector = selectors.EVERYTHING
    reason: str = ""
    ready: str = ""

    def matches(self, row: Row) -> bool:
        return (
            (not self.namespace or row.namespace == self.namespace)
            and self.selector.matches(dict(row.labels))
            and (not self.reason or row.reason == self.reason)
            and (not self.ready or row.ready == self.ready)
        )

    def query(self, scope: Query) -> Query:
        """The list's Query for this count: the overview's scope and this filter, both."""
        both = ",".join(part for part in (scope.selector, str(self.selector)) if part)
        return Query(
            namespace=self.namespace or scope.namespace, selector=both,
            reason=self.reason, ready=self.ready,
        )  # fmt: skip


@attrs.frozen
class Count:
    """How many Clusters one value has (``title``, as the page shows it), and the filter that
    lists exactly them."""

    title: str
    count: int
    filter: Filter


@attrs.frozen
class LabelCounts:
    """The Clusters of each value of one label key; ``None``'s Count: those without the key."""

    key: str
    counts: tuple[Count, ...]


@attrs.frozen
class SourceView:
    """A ClusterSource as the overview shows it: its counts, its Ready, what it did not import."""

    namespace: str
    name: str
    origin: str
    ready: str
    reason: str
    message: str
    matched: int
    made: int
    not_usable: int
    conflicts: int
    not_imported: tuple[tuple[str, str, str, str], ...]  # (Secret, Cluster, reason, message)
    more: int
    made_filter: Filter


@attrs.frozen
class Overview:
    """The fleet at a glance: every count sums to ``total`` within its group."""

    total: int
    ready: tuple[Count, ...]
    reasons: tuple[Count, ...]
    namespaces: tuple[Count, ...]
    labels: tuple[LabelCounts, ...]
    sources: tuple[SourceView, ...]

    @property
    def ready_count(self) -> int:
        return sum(c.count for c in self.ready if c.filter.ready == "True")


def _counted(values: Sequence[str]) -> list[tuple[str, int]]:
    tally: dict[str, int] = {}
    for value in values:
        tally[value] = tally.get(value, 0) + 1
    return sorted(tally.items(), key=lambda item: (-item[1], item[0]))


def _label_keys(rows: Sequence[Row], asked: Sequence[str]) -> list[str]:
    """The keys asked for, in their order; else the most used keys with few values."""
    if asked:
        return list(dict.fromkeys(asked))
    values: dict[str, set[str]] = {}
    used: dict[str, int] = {}
    for r in rows:
        for key, value in r.labels:
            values.setdefault(key, set()).add(value)
            used[key] = used.get(key, 0) + 1
    few = [k for k in values if len(values[k]) <= MAX_LABEL_VALUES]
    return sorted(few, key=lambda k: (-used[k], k))[:MAX_LABEL_KEYS]


def _label_counts(rows: Sequence[Row], key: str) -> LabelCounts:
    Req, Op = selectors.Requirement, selectors.Operator
    tally = _counted([value for r in rows for k, value in r.labels if k == key])
    shown, rest = tally[:MAX_VALUES_SHOWN], tally[MAX_VALUES_SHOWN:]
    counts = [
        Count(value or '""', n, Filter(selector=selectors.Selector(match_labels=((key, value),))))
        for value, n in shown
    ]
    if rest:
        others = Filter(selector=selectors.Selector(match_expressions=(
            Req(key, Op.EXISTS), Req(key, Op.NOT_IN, tuple(v for v, _ in shown)),
        )))  # fmt: skip
        counts.append(Count(f"{len(rest)} other values", sum(n for _, n in rest), others))
    without = sum(1 for r in rows if key not in dict(r.labels))
    if without:
        absent = Filter(
            selector=selectors.Selector(match_expressions=(Req(key, Op.DOES_NOT_EXIST),))
        )
        counts.append(Count(f"without {key}", without, absent))
    return LabelCounts(key, tuple(counts))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def source_view(source: Mapping[str, Any], source_label: str) -> SourceView:
    """One ClusterSource from its status as the manager writes it; reading never raises."""
    meta = metadata_of(source)
    spec = source.get("spec") if isinstance(source.get("spec"), Mapping) else {}
    status = source.get("status") if isinstance(source.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping) and isinstance(status, Mapping)
    ready = ready_condition(source)
    checked = bool(ready.get("reason"))
    listed = []
    for entry in status.get("notImported") or ():
        if isinstance(entry, Mapping):
            listed.append(tuple(one_line(str(entry.get(k) or "")) for k in
                                ("secret", "cluster", "reason", "message")))  # fmt: skip
    name = str(meta.get("name", ""))
    namespace = str(meta.get("namespace", ""))
    made = selectors.Selector(match_labels=((source_label, name),))
    return SourceView(
        namespace=namespace, name=name, origin=str(spec.get("from") or "ClusterAPI"),
        ready=str(ready.get("status") or "Unknown"),
        reason=str(ready.get("reason")) if checked else CHECKING,
        message=one_line(str(ready.get("message") or "")) if checked
        else "Kokumi has not read this source yet (within a minute while the manager runs)",
        matched=_int(status.get("matched")), made=_int(status.get("made")),
        not_usable=_int(status.get("notUsable")), conflicts=_int(status.get("conflicts")),
        not_imported=tuple(listed),  # type: ignore[arg-type]
        more=_int(status.get("more")),
        made_filter=Filter(namespace=namespace, selector=made),
    )  # fmt: skip


def overview(
    rows: Sequence[Row],
    sources: Sequence[Mapping[str, Any]] = (),
    *,
    label_keys: Sequence[str] = (),
    source_label: str = "delivery.kokumi.dev/cluster-source",
) -> Overview:
    """Counts of ``rows`` (the Clusters in the overview's scope) by Ready, by reason, by
    namespace and by the values of ``label_keys`` (else of the few-valued keys most used), each
    with the filter that lists exactly the Clusters it counts; and the ClusterSources."""
    ready = [
        Count(value, n, Filter(ready=value))
        for value, n in sorted(_counted([r.ready for r in rows]), key=lambda i: READIES.index(i[0])
                               if i[0] in READIES else len(READIES))
    ]  # fmt: skip
    reasons = [Count(v, n, Filter(reason=v)) for v, n in _counted([r.reason for r in rows])]
    namespaces = [
        Count(v, n, Filter(namespace=v)) for v, n in sorted(_counted([r.namespace for r in rows]))
    ]
    labels = [_label_counts(rows, key) for key in _label_keys(rows, label_keys)]
    views = sorted(
        (source_view(s, source_label) for s in sources), key=lambda v: (v.namespace, v.name)
    )
    return Overview(len(rows), tuple(ready), tuple(reasons), tuple(namespaces), tuple(labels),
                    tuple(views))  # fmt: skip
