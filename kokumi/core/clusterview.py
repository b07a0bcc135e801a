"""What a person sees of a Cluster, as ``kokumi cluster describe`` and ``kokumi ui`` show it.

Both front ends read the same objects (Clusters, Environments, Argo CD's cluster Secrets) and must
say the same thing about them: the registration line, the target in each Environment, the list's
columns and the "Checking…" of a Cluster not checked yet are computed here, once, from the
objects as the API server returns them. Pure: the caller reads, this decides what it means. The
fleet's overview counts these rows: :mod:`kokumi.core.overview`.
"""

from __future__ import annotations

import datetime
import math
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from kokumi.core import api
from kokumi.core.environments import selectors, targets
from kokumi.core.reasons import Reason
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef, normalise_server
from kokumi.core.text import one_line
from kokumi.objects import metadata_of

__all__ = [
    "CHECKING",
    "DEFAULT_SORT",
    "NOWHERE",
    "PAGE_SIZE",
    "READIES",
    "READY_REASONS",
    "SORTS",
    "EnvironmentView",
    "Query",
    "Row",
    "Window",
    "age",
    "environment_targets",
    "environment_view",
    "forbidden",
    "label_text",
    "narrowed",
    "ordered",
    "pages_of",
    "parse_query",
    "ready_condition",
    "registration",
    "row",
    "scope",
    "select",
    "window",
]

CHECKING: Final = "Checking…"
"""The reason shown before the manager's first check: not Unknown, which says nothing."""


def ready_condition(cluster: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in (cluster.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition
    return {}


def label_text(labels: Mapping[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def age(timestamp: str | None, now: datetime.datetime) -> str:
    """How old, as kubectl's AGE column says it: 42s, 5m, 3h, 12d."""
    if not timestamp:
        return "-"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@attrs.frozen
class Row:
    """One Cluster as the list shows it; never a credential (a Cluster holds none)."""

    name: str
    namespace: str
    connection: str
    server: str
    version: str
    ready: str  # True, False, or Unknown before the first check
    reason: str  # the Ready condition's reason, or CHECKING
    message: str
    labels: tuple[tuple[str, str], ...]
    age: str
    description: str
    created: str = ""  # creationTimestamp as the API wrote it, which sorts as time does


def row(cluster: Mapping[str, Any], now: datetime.datetime) -> Row:
    meta = metadata_of(cluster)
    spec = cluster.get("spec") or {}
    status = cluster.get("status") or {}
    ready = ready_condition(cluster)
    checked = bool(ready.get("reason"))
    return Row(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        connection=str(spec.get("connection", "")),
        server=str(status.get("server") or "-"),
        version=str(status.get("kubernetesVersion") or "-"),
        ready=str(ready.get("status") or "Unknown"),
        reason=str(ready.get("reason")) if checked else CHECKING,
        message=one_line(str(ready.get("message") or ""))
        if checked
        else "Kokumi has not checked it yet (within a minute while the manager runs)",
        labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())),
        age=age(meta.get("creationTimestamp"), now),
        description=str(spec.get("description") or ""),
        created=str(meta.get("creationTimestamp") or ""),
    )


# --- the list: which Clusters, in which order, which of them on this page ----------------------

PAGE_SIZE: Final = 50
"""Rows on a page of the list: a screen or two, a few dozen kB of HTML at any fleet's size."""

SORTS: Final = ("name", "namespace", "ready", "reason", "version", "age")
"""The columns the list sorts by, as ``?sort=`` names them."""

DEFAULT_SORT: Final = "namespace"
"""Namespace, then name: the order the API server lists in, so a first page is one request."""

READIES: Final = ("True", "False", "Unknown")
"""The Ready column's values, as ``?ready=`` names them."""

READY_REASONS: Final = (
    Reason.READY, Reason.UNREACHABLE, Reason.TLS_ERROR, Reason.UNAUTHORIZED, Reason.FORBIDDEN,
    Reason.SERVER_ERROR, Reason.EGRESS_DENIED, Reason.NAMESPACES_REQUIRED,
    Reason.INVALID_KUBECONFIG, Reason.SECRET_NOT_FOUND, Reason.SECRET_KEY_NOT_FOUND,
    Reason.SECRET_NOT_READABLE, Reason.CLUSTER_CONFLICT, Reason.REGISTRATION_FAILED,
    Reason.REGISTRATION_PENDING, Reason.INVALID_SPEC, Reason.OBJECT_TOO_LARGE,
)  # fmt: skip
"""Every reason a Cluster's Ready condition can have: the filter offers them all, whichever the
Clusters of one page happen to have."""

_MAX_FILTER: Final = 1024
"""The longest filter value read from an address: a selector of many labels is a few hundred."""


@attrs.frozen
class Query:
    """What the list is asked for: filters, order and page, as its address carries them.

    ``namespace`` and ``selector`` are handed to the API server (``selector`` in kubectl's
    syntax); ``reason`` and ``ready`` are read from each Cluster's status, which no API filter
    reaches. Every link of the page is made from a Query, so that a sort or a page keeps the
    filters and a filter keeps the sort.
    """

    namespace: str = ""
    selector: str = ""
    reason: str = ""
    ready: str = ""
    sort: str = DEFAULT_SORT
    descending: bool = False
    page: int = 1

    @property
    def in_api_order(self) -> bool:
        """Whether the API server's own order and filters give this list: no status filter, the
        default order."""
        return (
            self.sort == DEFAULT_SORT and not self.descending and not self.reason and not self.ready
        )

    @property
    def filtered(self) -> bool:
        return bool(self.namespace or self.selector or self.reason or self.ready)

    def link(self, **changes: Any) -> str:
        """The address's query (``?...``, or ``""``) of this Query with ``changes``; a change of
        a filter or of the order goes back to the first page."""
        if changes.keys() - {"page"}:
            changes.setdefault("page", 1)
        query = attrs.evolve(self, **changes)
        params = [
            ("namespace", query.namespace),
            ("selector", query.selector),
            ("reason", query.reason),
            ("ready", query.ready),
            ("sort", "" if query.sort == DEFAULT_SORT else query.sort),
            ("order", "desc" if query.descending else ""),
            ("page", "" if query.page == 1 else str(query.page)),
        ]
        text = urllib.parse.urlencode([(k, v) for k, v in params if v])
        return f"?{text}" if text else ""

    def sorted_by(self, column: str) -> str:
        """The link of a column's heading: sorted by it, or the other way when it is already."""
        if column == self.sort:
            return self.link(sort=column, descending=not self.descending)
        return self.link(sort=column, descending=False)


def parse_query(params: Mapping[str, str]) -> Query | str:
    """The Query of an address's parameters, or one line on what is wrong with them and the fix.

    Parameters this page does not know are ignored, as a browser's form may add some.
    """
    values = {k: str(params.get(k, "")).strip() for k in
              ("namespace", "selector", "reason", "ready", "sort", "order", "page")}  # fmt: skip
    for key in ("namespace", "selector", "reason"):
        if len(values[key]) > _MAX_FILTER:
            return f"{key} is longer than {_MAX_FILTER} characters: shorten the filter"
    sort = values["sort"] or DEFAULT_SORT
    if sort not in SORTS:
        return f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}"
    if values["order"] not in ("", "asc", "desc"):
        return f"order must be asc or desc, not {values['order'][:40]!r}"
    if values["ready"] not in ("", *READIES):
        return f"ready must be one of {', '.join(READIES)}, not {values['ready'][:40]!r}"
    page = values["page"] or "1"
    if not page.isdigit() or not 1 <= int(page) <= 10**6:
        return f"page must be a whole number from 1, not {page[:40]!r}"
    return Query(
        namespace=values["namespace"], selector=values["selector"], reason=values["reason"],
        ready=values["ready"], sort=sort, descending=values["order"] == "desc", page=int(page),
    )  # fmt: skip


def select(rows: Sequence[Row], query: Query) -> list[Row]:
    """The rows the status filters keep (reason, ready); namespace and selector are the API
    server's, which listed ``rows`` with them already."""
    return [
        r
        for r in rows
        if (not query.reason or r.reason == query.reason)
        and (not query.ready or r.ready == query.ready)
    ]


_DIGITS: Final = re.compile(r"(\d+)")


def _version_key(version: str) -> tuple[tuple[int, str], ...]:
    """v1.9.0 before v1.10.0: numbers compare as numbers; an unknown version ("-") last."""
    if version in ("", "-"):
        return ((1 << 30, ""),)
    return tuple(
        (int(part), "") if part.isdigit() else (-1, part) for part in _DIGITS.split(version) if part
    )


_ORDERS: Final[dict[str, Callable[[Row], Any]]] = {
    "name": lambda r: (r.name, r.namespace),
    "namespace": lambda r: (r.namespace, r.name),
    "ready": lambda r: (r.ready, r.namespace, r.name),
    "reason": lambda r: (r.reason, r.namespace, r.name),
    "version": lambda r: (_version_key(r.version), r.namespace, r.name),
    # Age: the youngest first, as "ascending age" reads; the timestamp sorts the other way.
    "age": lambda r: (r.created, r.namespace, r.name),
}


def ordered(rows: Sequence[Row], sort: str, descending: bool) -> list[Row]:
    """``rows`` in the list's order for ``sort``; ties broken by namespace and name."""
    return sorted(rows, key=_ORDERS[sort], reverse=descending != (sort == "age"))


@attrs.frozen
class Window:
    """One page of the list: its rows, how many there are in all, and where the page is."""

    rows: tuple[Row, ...]
    total: int
    page: int
    pages: int
    size: int = PAGE_SIZE

    @property
    def first(self) -> int:
        """The number of the page's first row, counted from 1; 0 when there is none."""
        return (self.page - 1) * self.size + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


def pages_of(total: int, size: int = PAGE_SIZE) -> int:
    return max(1, math.ceil(total / size))


def window(rows: Sequence[Row], page: int, size: int = PAGE_SIZE) -> Window:
    """Page ``page`` of ``rows`` (in their order); a page past the last shows the last."""
    pages = pages_of(len(rows), size)
    page = min(max(1, page), pages)
    start = (page - 1) * size
    return Window(tuple(rows[start : start + size]), len(rows), page, pages, size)


NOWHERE: Final = "no namespace you may list"
"""The scope of a list with nowhere to look: the user may list neither every namespace nor the
Namespaces, and no namespace of theirs is known yet."""


def scope(seen: Sequence[str], looked: Sequence[str]) -> str:
    """Where a list of a user who may not list every namespace came from, as the page's count
    line ends (``1-3 of 3 in namespace a``): the namespaces it was listed in, one said as one."""
    if len(seen) == 1:
        return f"namespace {seen[0]}"
    if seen:
        return "namespaces " + ", ".join(seen)
    if looked:
        return "the namespace looked in" if len(looked) == 1 else f"the {len(looked)} looked in"
    return NOWHERE


def narrowed(total: int, where: str, selector: str, status_filtered: bool = False) -> str:
    """The count a list or overview says it shows: ``3 Clusters matching env=prod in all
    namespaces``, never a narrowed count said as if it were every Cluster there."""
    noun = "Cluster" if total == 1 else "Clusters"
    matching = f" matching {selector}" if selector else ""
    if status_filtered and not selector:
        matching = " matching the filter"
    elif status_filtered:
        matching += " and the filter"
    return f"{total:,} {noun}{matching} in {where}"


def forbidden(verb: str, kind: str, namespace: str, user: str = "") -> str:
    """A refusal by the user's RBAC (``list``, ``Clusters``), said plainly: which namespace,
    what grant is missing and how to get it, instead of the API server's Forbidden text."""
    resource = f"{kind.lower()}.{api.GROUP}"
    role = f"--clusterrole=kokumi-delivery-view --user={user or 'NAME'}"
    if namespace:
        bind = f"kubectl -n {namespace} create rolebinding kokumi-view {role}"
        where = f"namespace {namespace}"
    else:
        bind = f"kubectl create clusterrolebinding kokumi-view {role}"
        where = "every namespace"
    return (
        f"You may not {verb} {kind} in {where}: your RBAC grants no {verb} on {resource} "
        f"there. An admin can grant it with the ClusterRole kokumi-delivery-view (or view): "
        f"{bind}. Or choose a namespace you may read."
    )


def registration(
    cluster: Mapping[str, Any],
    argocd_secrets: Sequence[Mapping[str, Any]] | None,
    argocd_namespace: str,
) -> str:
    """One line on the Cluster's Argo CD registration: held here, by whom, or why there is none.

    ``argocd_secrets`` are the cluster Secrets of Argo CD's namespace, None when the user may not
    list them. Names come from :mod:`kokumi.core.registry.argocd`, the module the registry writes
    them with.
    """
    meta = metadata_of(cluster)
    spec = cluster.get("spec") or {}
    if spec.get("connection") == "InCluster":
        return "none needed: Argo CD knows the cluster it runs in (InCluster)"
    server = (cluster.get("status") or {}).get("server")
    if not server:
        return "none: the Cluster reports no server yet, so it cannot be registered"
    server = normalise_server(server)
    name = argocd.secret_name(server)
    if argocd_secrets is None:
        return _registration_by_status(cluster, server, f"{argocd_namespace}/{name}")
    me = ClusterRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
    by_name = {s["metadata"]["name"]: s for s in argocd_secrets}
    ours = by_name.get(name)
    if ours is not None and argocd.is_ours(ours):
        holder = argocd.holder_of(ours)
        if holder == me:
            shown = argocd.cluster_name(me, server)
            return (
                f"Secret {argocd_namespace}/{name} registers this Cluster with Argo CD as {shown}"
            )
        if holder is not None:
            return (
                f"Cluster {holder.namespace}/{holder.name} holds server {server} (Secret "
                f"{argocd_namespace}/{name}); this Cluster waits and takes over once it lets go"
            )
    foreign = sorted(
        s["metadata"]["name"]
        for s in argocd_secrets
        if not argocd.is_ours(s)
        and (s["metadata"]["name"] == name or argocd.server_of(s) == server)
    )
    if foreign:
        return (
            f"Argo CD's Secret {argocd_namespace}/{foreign[0]}, which Kokumi did not write, holds "
            f"server {server}: delete it so Kokumi can take the server over"
        )
    return "none: Kokumi registers the Cluster while an Environment selects it and it is Ready"


def _registration_by_status(cluster: Mapping[str, Any], server: str, secret: str) -> str:
    """The registration as the Cluster's own status tells it, for a user who may not read Argo
    CD's namespace: the manager writes a conflict, a hand-over or a failed write into Ready's
    reason, and a registration held carries the finalizer :data:`kokumi.core.api.FINALIZER`.
    Said as what is known, not as a refusal: reading Argo CD's Secrets is rarely a tenant's."""
    ready = ready_condition(cluster)
    reason = str(ready.get("reason") or "")
    message = one_line(str(ready.get("message") or ""))
    holding = api.FINALIZER in (metadata_of(cluster).get("finalizers") or ())
    if reason == Reason.CLUSTER_CONFLICT:
        return f"waiting: {message}" if message else f"waiting: another holds server {server}"
    if reason == Reason.REGISTRATION_PENDING:
        return f"waiting: {server} is handed to this Cluster; registered at its next check"
    if reason == Reason.REGISTRATION_FAILED:
        return f"not registered yet: {message}" if message else "not registered yet; Kokumi retries"
    if holding:
        meta = metadata_of(cluster)
        me = ClusterRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
        shown = argocd.cluster_name(me, server)
        return f"registered: Secret {secret} registers this Cluster with Argo CD as {shown}"
    if reason == Reason.READY:
        return (
            "not registered: Kokumi registers the Cluster with Argo CD once an Environment "
            "selects it"
        )
    if not reason:
        return "not registered yet: Kokumi has not checked the Cluster yet"
    return f"not registered: Kokumi registers the Cluster once it is Ready ({reason} now)"


def environment_targets(
    cluster: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, str]]:
    """(Environment, target, message) for each Environment of the namespace that selects it.

    Computed with :mod:`kokumi.core.environments.selectors` and
    :mod:`kokumi.core.environments.targets`, as the manager computes it, from the Clusters' reported
    status.
    """
    name = cluster["metadata"]["name"]
    parsed = [c for c in map(api.parse_cluster, clusters) if isinstance(c, api.Cluster)]
    parsed.sort(key=lambda c: c.metadata.name)
    rows: list[tuple[str, str, str]] = []
    for obj in sorted(environments, key=lambda e: e["metadata"]["name"]):
        environment = api.parse_environment(obj)
        if isinstance(environment, api.Invalid):
            continue
        selector = selectors.parse(environment.spec.cluster_selector)
        if isinstance(selector, selectors.SelectorError):
            continue
        selected = [c for c in parsed if selector.matches(c.metadata.labels)]
        for target in targets.targets([targets.selected_cluster(c) for c in selected]):
            if target.cluster == name:
                rows.append((environment.metadata.name, target.reason, target.message))
    return rows


@attrs.frozen
class EnvironmentView:
    """An Environment, its selector as kubectl writes one, and the target of each Cluster."""

    name: str
    namespace: str
    selector: str
    description: str
    selected: int
    deploying: int
    targets: tuple[tuple[str, str, str], ...]  # (Cluster, target reason, message)
    problem: str  # why the Environment selects nothing, if it is invalid


def environment_view(
    environment: Mapping[str, Any], clusters: Sequence[Mapping[str, Any]]
) -> EnvironmentView:
    """Computed as the manager computes it, from the Clusters of the namespace as reported."""
    meta = metadata_of(environment)
    name = str(meta.get("name", ""))
    namespace = str(meta.get("namespace", ""))
    spec = environment.get("spec") or {}
    description = str(spec.get("description") or "")
    parsed_env = api.parse_environment(environment)
    if isinstance(parsed_env, api.Invalid):
        return EnvironmentView(name, namespace, "-", description, 0, 0, (), parsed_env.message)
    selector = selectors.parse(parsed_env.spec.cluster_selector)
    if isinstance(selector, selectors.SelectorError):
        return EnvironmentView(name, namespace, "-", description, 0, 0, (), str(selector))
    parsed = [c for c in map(api.parse_cluster, clusters) if isinstance(c, api.Cluster)]
    parsed.sort(key=lambda c: c.metadata.name)
    selected = [c for c in parsed if selector.matches(c.metadata.labels)]
    found = targets.targets([targets.selected_cluster(c) for c in selected])
    rows = tuple((t.cluster, str(t.reason), one_line(t.message)) for t in found)
    deploying = sum(1 for t in found if isinstance(t, targets.Deploy))
    return EnvironmentView(
        name, namespace, str(selector) or "(every Cluster)", description, len(rows), deploying,
        rows, "",
    )  # fmt: skip
