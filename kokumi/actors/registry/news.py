"""What the API server says: the registry's memory rebuilt from Argo CD's Secrets, the Secret
watch's news taken in, and a change of shards.

Functions of the registry's :class:`~kokumi.actors.registry.state.Memory`; each returns the
servers whose Secret or line the news may change, for :meth:`Facts.settle
<kokumi.actors.registry.facts.Facts.settle>` to bring in step. The only I/O is a read of a
foreign Secret the watch cannot see, and the deletion of a stray at a start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi.actors.pace import Pace
from kokumi.actors.registry.facts import Facts
from kokumi.actors.registry.state import Memory, log
from kokumi.core.registry import argocd, handover, lines, ownership, registrar
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.resources import SECRETS
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.objects import name_of


async def rebuild(m: Memory, facts: Facts, secrets: Iterable[Mapping[str, Any]]) -> set[str | None]:
    holders: dict[str, ClusterRef] = {}
    waiting: dict[str, tuple[ClusterRef, ...]] = {}
    written: dict[str, int] = {}
    foreign: list[tuple[str, str]] = []
    remote: list[tuple[str, ClusterRef]] = []
    strays: list[str] = []
    pace = Pace()  # nothing else reads the Secrets or the table before the first list is in
    for secret in secrets:
        await pace.tick()
        name = name_of(secret)
        server = argocd.server_of(secret)
        holder = argocd.holder_of(secret)
        if holder is not None and server is not None and argocd.secret_name(server) == name:
            m.remember(name, secret)
            if m.serves(holder) is None:
                remote.append((server, holder))
                continue
            holders[server] = holder
            waiting[server] = m.served(handover.waiting_of(secret))
            written[server] = lines.version_of(secret)
        elif argocd.is_ours(secret):
            # Ours, but naming no holder or not named after its server: nothing can hold it,
            # so it would block its server for ever. It goes (retried like any write).
            m.remember(name, secret)
            strays.append(name)
        elif server is not None:
            foreign.append((server, name))
    m.table, effects = ownership.seed(holders, waiting, written)
    touched: set[str | None] = {e.server for e in effects}
    for server, holder in remote:
        await pace.tick()
        touched |= m.step(ownership.Remote(server, holder))
    for server, name in foreign:
        await pace.tick()
        m.foreign_names[name] = server
        touched |= m.step(ownership.Foreign(server, name))
    for name in strays:
        with contextlib.suppress(errors.KubeError):
            # A failure is found again at the next restart; it blocks nothing meanwhile,
            # since no server is named after it.
            await facts.delete(name, m.secrets[name])
    return touched


async def note(
    m: Memory, client: Client, namespace: str, event: WatchEvent | Resync
) -> set[str | None]:
    known = m.foreign_names
    touched: set[str | None] = set()
    if isinstance(event, Resync):
        objects = event.objects
        present = {name_of(o) for o in objects}
        gone = set(known) - present
        for name in set(m.blocking_names) - present:
            # A Secret without the cluster label is invisible to this watch: only a read
            # says whether it is gone.
            try:
                found = await client.get(SECRETS, name, namespace=namespace)
            except errors.NotFound:
                gone.add(name)
                continue
            except errors.KubeError as exc:
                log.info("registry: cannot check Secret %s: %s", name, exc)
                continue
            if argocd.is_ours(found):
                gone.add(name)
        for name in set(m.secrets) - present:
            touched |= forget(m, namespace, name)
        for held in m.table.remotes():
            name = argocd.secret_name(held)
            if name not in present and name not in m.secrets and held not in m.pending:
                gone.add(name)
    elif event.type == "DELETED":
        objects, gone = (), {name_of(event.object)}
    else:
        objects, gone = (event.object,), set()
    for name in gone:
        if name in m.secrets:
            touched |= forget(m, namespace, name)
        else:
            # Held elsewhere, by a Secret this registry never saw itself (a shard it gave
            # up): gone now, the server is free here too.
            for held in m.table.remotes():
                if argocd.secret_name(held) == name:
                    touched |= m.step(ownership.RemoteGone(held))
        for server in (known.pop(name, None), m.blocking_names.pop(name, None)):
            if server is not None:
                touched |= m.step(ownership.ForeignGone(server, name))
    pace = Pace()  # between two ticks other tasks run, but only this one reads the table
    for secret in objects:
        await pace.tick()
        name = name_of(secret)
        server = argocd.server_of(secret)
        if argocd.is_ours(secret):
            if lines.newer(m, secret):
                before = m.secrets.get(name)
                touched.add(m.server_named(name))
                m.remember(name, secret)
                touched.add(m.server_named(name))
                fresh = before is None or argocd.holder_of(before) != argocd.holder_of(secret)
                touched |= lines.classify(m, name, fresh=fresh)
            continue
        # Relabelled away from us, or never ours: not ours to delete either.
        if name in m.secrets:
            touched |= forget(m, namespace, name)
        previous = known.get(name)
        if previous is not None and previous != server:
            known.pop(name)
            touched |= m.step(ownership.ForeignGone(previous, name))
        if server is not None:
            known[name] = server
            touched |= m.step(ownership.Foreign(server, name))
    return touched


def forget(m: Memory, namespace: str, name: str) -> set[str | None]:
    """The Secret ``name`` is gone (or no longer ours); a server held elsewhere is free."""
    server = m.server_named(name)
    secret = m.secrets.get(name)
    m.remember(name, None)
    touched: set[str | None] = {server}
    if (
        server is not None
        and secret is not None
        and argocd.secret_name(server) == name  # a stray that declares it says nothing
        and m.table.remote(server) is not None
    ):
        previous = argocd.holder_of(secret)
        m.last_line[server] = tuple(c for c in handover.waiting_of(secret) if c != previous)
        gone = attrs.evolve(lines.view(m, namespace, server), secret=secret)
        first = registrar.first_elsewhere(gone, None)
        if first is not None and argocd.is_ours(secret):
            # Another replica's Cluster came first: it creates the Secret; ours wait.
            m.pending[server] = trio.current_time() + m.grace
            touched |= m.step(ownership.Remote(server, first))
        else:
            touched |= m.step(ownership.RemoteGone(server))
    return touched


async def reshard(m: Memory) -> set[str | None]:
    """Disown the claims of Clusters served elsewhere now, classify every Secret again, in
    slices (at 10,000 Secrets one step here took 3.3 s); only this task reads the table and
    the Secrets, and a change of shards meanwhile asks for another reshard after this one."""
    touched: set[str | None] = set()
    pace = Pace()
    # The actors of a shard taken say afresh what they want; those of a shard lost, nothing.
    m.let_go = {c for c in m.let_go if m.is_served(c)}
    for cluster in m.table.wanting():
        await pace.tick()
        if m.serves(cluster) is None:
            touched |= m.disown(cluster)
    # A Cluster named by several Secrets as last seen (a move this registry has not seen
    # finish) is adopted where it was written last, as after a restart.
    newest: dict[ClusterRef, str] = {}
    for name, secret in list(m.secrets.items()):
        await pace.tick()
        holder = argocd.holder_of(secret)
        if holder is None:
            continue
        kept = newest.get(holder)
        if kept is None or lines.version_of(secret) > lines.version_of(m.secrets[kept]):
            newest[holder] = name
    # The others after it: each is then a move cut short (its holder wants the newest's server
    # here), deleted or passed to its line, as at a restart. Left as they were, they stayed
    # held elsewhere in the table by a Cluster served here, so that nothing wrote them again.
    older = []
    for name in list(m.secrets):
        await pace.tick()
        if name not in m.secrets:
            continue
        holder = argocd.holder_of(m.secrets[name])
        if holder is not None and newest.get(holder) != name and m.is_served(holder):
            older.append(name)
            continue
        touched |= lines.classify(m, name)
    for name in older:
        await pace.tick()
        if name in m.secrets:
            touched |= lines.classify(m, name)
    return touched | lines.stale_lines(m)
