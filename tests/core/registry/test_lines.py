"""Who holds and who waits across replicas, read from the Secrets, without a registry running.

The registry actor's own cases (tests/actors/registry/test_lines.py) run these functions through
its inbox on the API fake; here each is held to one example on a record of its own, so that a
change of a rule fails next to the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover, lines, ownership
from kokumi.core.registry.carry import Extras
from kokumi.core.registry.ownership import ClusterRef

SERVER = "https://s1.example:6443"
HOLDER = ClusterRef("ws1", "a")
WAITER = ClusterRef("ws2", "b")
ELSEWHERE = ClusterRef("ws2", "c")


@attrs.define(eq=False)
class Record:
    """The registry's memory, as much of it as the line reads: the table steps as it does."""

    table: ownership.Table = attrs.Factory(ownership.Table)
    secrets: dict[str, dict[str, Any]] = attrs.Factory(dict)
    connections: dict[ClusterRef, Connection] = attrs.Factory(dict)
    extras: dict[ClusterRef, Extras] = attrs.Factory(dict)
    claims: dict[ClusterRef, str] = attrs.Factory(dict)
    recorded: dict[ClusterRef, set[str]] = attrs.Factory(dict)
    let_go: set[ClusterRef] = attrs.Factory(set)
    pending: dict[str, float] = attrs.Factory(dict)
    last_line: dict[str, tuple[ClusterRef, ...]] = attrs.Factory(dict)
    sharded: bool = True
    serves: Callable[[ClusterRef], float | None] = lambda c: None if c == ELSEWHERE else math.inf
    exists: Callable[[ClusterRef], bool] = lambda _c: True
    is_current: Callable[[ClusterRef, str], bool] = lambda _c, _uid: True

    def is_served(self, cluster: ClusterRef) -> bool:
        return self.serves(cluster) is not None

    def served(self, clusters: Iterable[ClusterRef]) -> tuple[ClusterRef, ...]:
        return tuple(c for c in clusters if self.is_served(c))

    def lines_recording(self, cluster: ClusterRef) -> set[str | None]:
        return {argocd.server_of(self.secrets[n]) for n in self.recorded.get(cluster, ())}

    def step(self, event: ownership.Event) -> set[str | None]:
        self.table, effects = ownership.step(self.table, event)
        return {effect.server for effect in effects}


def _secret(
    holder: ClusterRef, waiting: tuple[ClusterRef, ...] = (), version: str = "7"
) -> dict[str, Any]:
    secret = argocd.cluster_secret(Connection(SERVER, token="t"), holder, "argocd")
    secret["metadata"]["resourceVersion"] = version
    return handover.with_waiting(secret, waiting)


def _seen(m: Record, secret: dict[str, Any]) -> str:
    name: str = secret["metadata"]["name"]
    m.secrets[name] = secret
    for waiter in handover.waiting_of(secret):
        m.recorded.setdefault(waiter, set()).add(name)
    return name


def test_a_secret_naming_a_cluster_served_elsewhere_puts_the_server_there() -> None:
    m = Record()
    lines.classify(m, _seen(m, _secret(ELSEWHERE)))
    assert m.table.remote(argocd.server_of(_secret(ELSEWHERE)) or "") == ELSEWHERE


def test_a_secret_of_a_shard_just_taken_is_adopted_with_the_waiters_it_records() -> None:
    m = Record()
    server = argocd.server_of(_secret(HOLDER)) or ""
    lines.classify(m, _seen(m, _secret(HOLDER, (WAITER,))), fresh=True)
    assert m.table.holder(server) == HOLDER
    assert m.table.waiting(server) == (WAITER,)


def test_a_secret_adopted_for_a_holder_that_let_go_is_passed_on() -> None:
    m = Record(let_go={HOLDER})
    server = argocd.server_of(_secret(HOLDER)) or ""
    lines.classify(m, _seen(m, _secret(HOLDER, (WAITER,))), fresh=True)
    assert m.table.holder(server) == WAITER


def test_a_line_recording_a_cluster_served_here_and_gone_is_written_at_once() -> None:
    m = Record(exists=lambda c: c != WAITER)
    _seen(m, _secret(ELSEWHERE, (WAITER,)))
    assert lines.stale_lines(m) == {argocd.server_of(_secret(ELSEWHERE))}
    assert lines.stale_lines(Record()) == set()


def test_a_place_is_spoken_for_once_its_actor_has_spoken_or_its_cluster_is_gone() -> None:
    m = Record()
    assert not lines.knows(m, WAITER)
    assert not lines.knows(m, ELSEWHERE)
    assert lines.knows(Record(exists=lambda _c: False), WAITER)
    assert lines.knows(Record(let_go={WAITER}), WAITER)


def test_a_watch_event_older_than_what_was_written_is_not_news() -> None:
    m = Record()
    _seen(m, _secret(HOLDER, version="7"))
    assert not lines.newer(m, _secret(HOLDER, version="6"))
    assert lines.newer(m, _secret(HOLDER, version="8"))
    assert lines.version_of({"metadata": {"resourceVersion": "x"}}) == -1
    assert lines.version_of({}) == -1


def test_the_plan_sees_the_secret_and_the_holders_place() -> None:
    m = Record()
    name = _seen(m, _secret(HOLDER))
    lines.classify(m, name, fresh=True)
    view = lines.view(m, "argocd", argocd.server_of(m.secrets[name]) or "")
    assert view.holder == HOLDER and view.secret == m.secrets[name] and view.sharded
