"""The registry's plan for one server's Secret, on its own: no actor, no server, no clock.

Tables are built by stepping random claims, releases, foreign Secrets and Clusters of other
replicas through the first-come table; the Secret as last observed is any Secret of Kokumi's
under the server's name, naming any holder and any line; this replica serves any subset of the
Clusters and knows where any subset of those stands. The rules held:

- a write registers the table's holder with its current connection, or hands the Secret to the
  first waiter served elsewhere that exists; a Secret is deleted only when nobody here holds
  the server and nobody elsewhere comes first;
- the line a write records never names its holder, nor a Cluster served here that is known not
  to want the server (it may name the others: their own replicas speak for them);
- a plan carried out and planned again from what it wrote says the same write never again: a
  plan applied twice changes nothing;
- without shards no write ever hands the Secret to another replica, and the line is the
  table's.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover, ownership, registrar
from kokumi.core.registry.carry import NO_EXTRAS, Extras
from kokumi.core.registry.ownership import ClusterRef

SERVER = "https://s0.example:6443"
CLUSTERS = tuple(ClusterRef(ns, name) for ns in ("ws1", "ws2") for name in "abc")


def _connection(token: str) -> Connection:
    return Connection(SERVER, token=token)


# What a holder carries beside its connection: a label, an Environment, a scope, or nothing.
_extras = st.sampled_from(
    [
        NO_EXTRAS,
        Extras(labels=(("fleet", "edge"),)),
        Extras(labels=(("fleet", "core"),), environments=("prod",)),
        Extras(annotations=(("example.com/owner", "a"),), namespaces=("apps",)),
    ]
)


@st.composite
def _tables(draw: st.DrawFn, sharded: bool) -> ownership.Table:
    table = ownership.Table()
    events = st.one_of(
        st.builds(ownership.Want, st.sampled_from(CLUSTERS), st.just(SERVER)),
        st.builds(ownership.Want, st.sampled_from(CLUSTERS), st.just("https://s1.example:6443")),
        st.builds(ownership.Release, st.sampled_from(CLUSTERS)),
        st.builds(ownership.Foreign, st.just(SERVER), st.just("theirs")),
        st.builds(ownership.ForeignGone, st.just(SERVER)),
        *(
            [
                st.builds(ownership.Remote, st.just(SERVER), st.sampled_from(CLUSTERS)),
                st.builds(ownership.RemoteGone, st.just(SERVER)),
                st.builds(ownership.Disown, st.sampled_from(CLUSTERS)),
            ]
            if sharded
            else []
        ),
    )
    for event in draw(st.lists(events, max_size=12)):
        table, _ = ownership.step(table, event)
    return table


@st.composite
def _views(draw: st.DrawFn) -> registrar.View:
    sharded = draw(st.booleans())
    table = draw(_tables(sharded))
    secret: dict[str, Any] | None = None
    if draw(st.booleans()):
        holder = draw(st.sampled_from(CLUSTERS))
        line = draw(st.lists(st.sampled_from(CLUSTERS), unique=True, max_size=4))
        token = draw(st.sampled_from(("t1", "t2")))
        built = argocd.cluster_secret(_connection(token), holder, "argocd", draw(_extras))
        secret = handover.with_waiting(built, [c for c in line if c != holder])
        secret["metadata"]["resourceVersion"] = "7"
    served = frozenset(draw(st.sets(st.sampled_from(CLUSTERS)))) if sharded else None
    known = frozenset(draw(st.sets(st.sampled_from(CLUSTERS))))
    gone = frozenset(draw(st.sets(st.sampled_from(CLUSTERS), max_size=2)))
    holder_here = table.holder(SERVER)
    connection = (
        _connection(draw(st.sampled_from(("t1", "t2"))))
        if holder_here is not None and draw(st.booleans())
        else None
    )
    if sharded:
        assert served is not None
        # A replica serves the Clusters its table has, and knows where those stand.
        served |= set(table.wanting())

        def is_served(c: ClusterRef) -> bool:
            return c in served

        def knows(c: ClusterRef) -> bool:
            return c in served and (c in known or table.wanted_by(c) is not None)
    else:

        def is_served(c: ClusterRef) -> bool:
            return True

        def knows(c: ClusterRef) -> bool:
            return True

    return registrar.View(
        server=SERVER,
        table=table,
        secret=secret,
        connection=connection,
        claim_current=draw(st.booleans()) or holder_here is None,
        sharded=sharded,
        served=is_served,
        knows=knows,
        exists=lambda c: c not in gone,
        last_line=tuple(draw(st.lists(st.sampled_from(CLUSTERS), unique=True, max_size=3))),
        extras=draw(_extras),
    )


def _applied(view: registrar.View, plan: registrar.Plan) -> registrar.View:
    """The view after the API server took the plan's write, and the table its step."""
    match plan:
        case registrar.Create(body=body):
            return _with_secret(view, body)
        case registrar.Replace(existing=existing, body=body):
            return _with_secret(view, argocd.updated(existing, body))
        case registrar.HandOver(existing=existing, body=body, to=to):
            table, _ = ownership.step(view.table, ownership.Remote(SERVER, to))
            return _with_secret(_with_table(view, table), argocd.updated(existing, body))
        case registrar.Delete():
            return _with_secret(view, None)
        case registrar.Step(event=event):
            table, _ = ownership.step(view.table, event)
            return _with_table(view, table, claim_current=True)
    return view


def _with_secret(view: registrar.View, body: dict[str, Any] | None) -> registrar.View:
    return attrs.evolve(view, secret=body)


def _with_table(view: registrar.View, table: ownership.Table, **more: Any) -> registrar.View:
    holder = table.holder(SERVER)
    connection = view.connection if holder == view.holder else None
    return attrs.evolve(view, table=table, connection=connection, **more)


def _body(plan: registrar.Plan) -> dict[str, Any] | None:
    match plan:
        case registrar.Create(body=body) | registrar.Replace(body=body):
            return body
        case registrar.HandOver(body=body):
            return body
    return None


@given(_views())
def test_a_write_registers_the_holder_or_hands_over_to_the_first_elsewhere(
    view: registrar.View,
) -> None:
    plan = registrar.plan(view)
    holder = view.holder
    match plan:
        case registrar.Create(body=body):
            assert view.secret is None and holder is not None and view.connection is not None
            assert argocd.holder_of(body) == holder
            assert registrar.same_data(body, view.connection, holder, view.extras)
        case registrar.Replace(body=body, holder=named) if named is not None:
            assert named == holder and view.connection is not None
            assert argocd.holder_of(body) == holder
            assert registrar.same_data(body, view.connection, holder, view.extras)
        case registrar.Replace(body=body):
            # A line kept: the holder and the connection stay as they are.
            assert view.secret is not None
            assert argocd.holder_of(body) == argocd.holder_of(view.secret)
            assert body.get("data") == view.secret.get("data")
        case registrar.HandOver(body=body, to=to):
            assert view.sharded and not view.served(to) and view.exists(to)
            assert argocd.holder_of(body) == to
            assert view.secret is not None and to in handover.waiting_of(view.secret)
        case registrar.Delete():
            assert holder is None and view.table.remote(SERVER) is None
        case registrar.Step(event=ownership.Release(cluster=cluster)):
            assert cluster == holder and not view.claim_current
    written = _body(plan)
    if written is not None:
        assert written["metadata"]["name"] == argocd.secret_name(SERVER)
        assert argocd.server_of(written) == SERVER


@given(_views())
def test_a_line_never_names_its_holder_nor_a_cluster_known_not_to_want_the_server(
    view: registrar.View,
) -> None:
    body = _body(registrar.plan(view))
    if body is None:
        return
    line = handover.waiting_of(body)
    holder = argocd.holder_of(body)
    assert holder not in line
    assert len(set(line)) == len(line)
    local = set(view.table.waiting(SERVER)) | {view.holder} - {None}
    for cluster in line:
        assert not view.knows(cluster) or cluster in local, (cluster, line, view.table)


@given(_views())
def test_a_plan_applied_twice_changes_nothing(view: registrar.View) -> None:
    """Carried out, then planned again from what it wrote: never the same write again, and
    in step within a few plans (a step of the table, then its write)."""
    seen: list[registrar.Plan] = []
    for _ in range(6):
        plan = registrar.plan(view)
        if isinstance(plan, registrar.Keep):
            return
        assert plan not in seen, (plan, seen)
        seen.append(plan)
        view = _applied(view, plan)
    raise AssertionError(f"no Keep after {seen}")


@given(_views())
def test_without_shards_the_line_is_the_tables_and_nothing_goes_elsewhere(
    view: registrar.View,
) -> None:
    if view.sharded:
        return
    plan = registrar.plan(view)
    assert not isinstance(plan, registrar.HandOver)
    body = _body(plan)
    registers_holder = body is not None and argocd.holder_of(body) == view.holder
    if isinstance(plan, registrar.Create | registrar.Replace) and registers_holder:
        assert body is not None
        assert handover.waiting_of(body) == view.table.waiting(SERVER)


def test_a_holder_that_let_go_hands_over_to_the_first_waiter_of_another_replica() -> None:
    """The one handover that crosses replicas, spelled out."""
    a, b, c = CLUSTERS[:3]
    secret = handover.with_waiting(argocd.cluster_secret(_connection("t1"), a, "argocd"), [b, c])
    table, _ = ownership.step(ownership.Table(), ownership.Want(c, SERVER))
    view = registrar.View(
        server=SERVER,
        table=table,
        secret=secret,
        connection=_connection("t2"),
        sharded=True,
        served=lambda x: x in (a, c),
        knows=lambda x: x in (a, c),
    )
    # c holds in this table (a let go); b, served elsewhere, came first: the Secret goes to b.
    plan = registrar.plan(view)
    assert isinstance(plan, registrar.HandOver) and plan.to == b
    assert handover.waiting_of(plan.body) == (c,)
