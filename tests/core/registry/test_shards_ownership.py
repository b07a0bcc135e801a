"""The first-come table across replicas: servers held elsewhere, adopted and disowned shards.

Examples first, then a random walk of two replicas, each with its own table, sharing one
stand-in API server whose create is atomic. Each replica performs its effects as the registry
does (it writes only for Clusters of the shards it serves) and hears of every Secret change,
perhaps late. Whenever all news has arrived: one Secret per held server, naming a Cluster that
wants it; no replica believes it holds what another's Cluster holds; and no Cluster waits for a
server nobody holds.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from kokumi.core.registry.handover import first_waiting, merged_line
from kokumi.core.registry.ownership import (
    Adopt,
    ClusterRef,
    DeleteSecret,
    Disown,
    Event,
    Holding,
    Release,
    Remote,
    RemoteGone,
    ServerTaken,
    Table,
    Want,
    WriteSecret,
    step,
)

A = ClusterRef("team-a", "spoke")
B = ClusterRef("team-b", "spoke")
C = ClusterRef("team-c", "spoke")
X = "https://spoke.example:6443"
Y = "https://edge.example:6443"


def run(table: Table, *events: Event) -> tuple[Table, tuple[object, ...]]:
    effects: tuple[object, ...] = ()
    for event in events:
        table, effects = step(table, event)
    return table, effects


def test_a_server_held_elsewhere_is_waited_for_and_named() -> None:
    table, effects = run(Table(), Remote(X, A), Want(B, X))
    assert table.holder(X) is None
    assert table.remote(X) == A
    assert table.waiting(X) == (B,)
    assert effects == (
        ServerTaken(
            B,
            X,
            f"server {X} is held by Cluster {A}; "
            "this Cluster takes it over once that Cluster lets go of it",
        ),
    )
    assert table.holders() == {}


def test_when_the_remote_holder_lets_go_the_first_here_creates_it() -> None:
    table, effects = run(Table(), Remote(X, A), Want(B, X), Want(C, X), RemoteGone(X))
    assert table.holder(X) == B
    assert table.waiting(X) == (C,)
    assert WriteSecret(X, B) in effects and Holding(B, X) in effects


def test_a_local_holder_that_lost_the_create_waits_first_and_writes_nothing() -> None:
    table, effects = run(Table(), Want(B, X), Want(C, X), Remote(X, A))
    assert table.holder(X) is None
    assert table.waiting(X) == (B, C)
    assert not [e for e in effects if isinstance(e, WriteSecret | DeleteSecret)]


def test_disowning_a_holder_keeps_its_server_held_without_a_write() -> None:
    table, effects = run(Table(), Want(A, X), Want(B, X), Disown(A))
    assert table.remote(X) == A
    assert table.waiting(X) == (B,)
    assert table.wanted_by(A) is None
    assert not [e for e in effects if isinstance(e, WriteSecret | DeleteSecret)]
    table, effects = run(table, Disown(B))
    assert table.waiting(X) == ()
    assert effects == ()


def test_adopting_a_secret_puts_its_holder_and_recorded_waiters_first() -> None:
    table, effects = run(Table(), Want(C, X), Remote(X, A), Adopt(X, A, (B,)))
    assert table.holder(X) == A
    assert table.waiting(X) == (B, C)
    assert table.remote(X) is None
    assert WriteSecret(X, A) in effects and Holding(A, X) in effects


def test_adopting_a_move_cut_short_keeps_where_the_cluster_went() -> None:
    table, effects = run(Table(), Remote(X, A), Want(A, Y), Adopt(X, A))
    assert table.wanted_by(A) == Y
    assert table.remote(X) is None
    assert effects == (DeleteSecret(X),)


# --- two replicas, one API server ---------------------------------------------------------------

CLUSTERS = [ClusterRef(f"team-{i}", "spoke") for i in range(5)]
SERVERS = [X, Y]


def shard(cluster: ClusterRef) -> int:
    return CLUSTERS.index(cluster) % 2


@attrs.frozen
class Secret:
    """A server's Secret as the stand-in API server keeps it."""

    holder: ClusterRef  # whom the labels name
    line: tuple[ClusterRef, ...] = ()  # the waiting annotation
    connection: ClusterRef | None = None  # whose kubeconfig the data holds
    version: int = attrs.field(default=0, eq=False)  # the resourceVersion


class Replicas(RuleBasedStateMachine):
    """Two registries, as ``kokumi.actors.registry`` acts with shards, on one API server.

    Each write is decided on the Secret as the API server has it now, which is what a write
    guarded by the resourceVersion read amounts to once its 409s are retried.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tables = [Table(), Table()]
        self.serves: list[set[int]] = [{0}, {1}]
        self.secrets: dict[str, Secret] = {}  # the API server
        self.news: list[set[str]] = [set(), set()]  # servers each replica has not heard of yet
        self.known: list[dict[str, Secret | None]] = [{}, {}]  # the Secret each last saw
        # Clusters whose connection each replica has (they wanted since it serves them): only
        # for those may it write a Secret's data; an adopted holder has none until it wants.
        self.connections: list[set[ClusterRef]] = [set(), set()]
        self.intent: dict[ClusterRef, str | None] = {}  # what each Cluster's actor asks for
        self.handovers = 0
        self.versions = 0
        # Clusters each replica serves that let go and have not wanted since.
        self.released: list[set[ClusterRef]] = [set(), set()]
        # Servers each replica leaves to another's first waiter, until that creates the Secret
        # or the grace runs out (the registry's ``_pending``).
        self.pending: list[set[str]] = [set(), set()]
        self.touched: list[set[str]] = [set(), set()]  # by a step settled with the next

    # --- what the registry does ---

    def served_by(self, cluster: ClusterRef) -> int | None:
        for r, shards in enumerate(self.serves):
            if shard(cluster) in shards:
                return r
        return None

    def served(self, r: int) -> Callable[[ClusterRef], bool]:
        return lambda cluster: self.served_by(cluster) == r

    def knows(self, r: int) -> Callable[[ClusterRef], bool]:
        """Served by ``r``, and its actor has said there what it wants (the registry's
        ``_knows``)."""
        return lambda c: (
            self.served_by(c) == r
            and (self.tables[r].wanted_by(c) is not None or c in self.released[r])
        )

    def apply(self, r: int, event: Event) -> None:
        match event:
            case Want(cluster=cluster):
                self.connections[r].add(cluster)
                self.released[r].discard(cluster)
            case Release(cluster=cluster):
                self.connections[r].discard(cluster)
                self.released[r].add(cluster)
            case Disown(cluster=cluster):
                self.connections[r].discard(cluster)
        self.settle(r, event)

    def settle(self, r: int, event: Event, *, first: bool = False) -> None:
        """One step of the table and the writes it calls for (the registry's ``_step``, then
        ``_settle``), with no word from a Cluster's actor behind it.

        ``first``: a step the registry takes just before another, settling both after the
        second; what it touched waits for that.
        """
        before = self.tables[r]
        self.tables[r], effects = step(before, event)
        touched = {e.server for e in effects if hasattr(e, "server")}
        if hasattr(event, "server"):
            touched.add(event.server)
        wanted = before.wanted_by(event.cluster) if hasattr(event, "cluster") else None
        if wanted is not None:
            touched.add(wanted)
        self.touched[r] |= {s for s in touched if s is not None}
        if first:
            return
        touched, self.touched[r] = self.touched[r], set()
        for server in sorted(touched):
            self.sync(r, server)

    def write(self, r: int, server: str, secret: Secret | None) -> None:
        old = self.secrets.get(server)
        if old is not None and secret is not None and old.holder != secret.holder:
            # A handover: only once the holder lets go, to the first recorded waiter that
            # still wants the server.
            self.handovers += 1
            assert self.intent.get(old.holder) != server, ("the holder still wants it", old, secret)
            expected = next(
                (c for c in old.line if c != old.holder and self.intent.get(c) == server), None
            )
            assert secret.holder == expected, (old, secret, self.intent)
        if secret is None:
            del self.secrets[server]
        else:
            self.versions += 1
            secret = attrs.evolve(secret, version=self.versions)
            self.secrets[server] = secret
        self.known[r][server] = secret
        for heard in self.news:
            heard.add(server)

    def sync(self, r: int, server: str) -> None:
        table, served = self.tables[r], self.served(r)
        existing = self.secrets.get(server)
        seen = self.known[r].get(server)
        if seen != existing:
            # The write would go at a version that is not the API server's: refused (409, or
            # AlreadyExists for a create), the registry reads the Secret, and decides again.
            self.hear(r, server)
            return
        if table.remote(server) is not None:
            if existing is None:
                return
            line = merged_line(existing.line, table.waiting(server), self.knows(r))
            line = tuple(c for c in line if c != existing.holder)
            if line != existing.line:
                self.write(r, server, attrs.evolve(existing, line=line))
            return
        if existing is not None and not served(existing.holder):
            if table.holder(server) is not None:
                # The atomic create refused: the other replica's Cluster holds it.
                self.known[r][server] = existing
                self.apply(r, Remote(server, existing.holder))
            return
        holder = table.holder(server)
        if holder is None:
            if existing is not None:
                first = self.first_elsewhere(r, server, existing, None)
                if first is not None:
                    self.give_up_for(r, server, existing, first)
                else:
                    self.write(r, server, None)
            return
        recorded = existing.line if existing is not None else ()
        line = tuple(
            c for c in merged_line(recorded, table.waiting(server), self.knows(r)) if c != holder
        )
        if holder not in self.connections[r]:
            if existing is not None and existing.holder == holder and existing.line != line:
                self.write(r, server, attrs.evolve(existing, line=line))
            return
        desired = Secret(holder, line, holder)
        if existing is None:
            self.write(r, server, desired)
            return
        if existing.holder != holder:
            first = self.first_elsewhere(r, server, existing, holder)
            if first is not None:
                self.give_up_for(r, server, existing, first)
                return
            local = (holder, *table.waiting(server))
            first = first_waiting(existing.line, existing.holder, local, served)
            if first is not None and first != holder and first in local:
                recorded = tuple(c for c in existing.line if served(c))
                self.apply(r, Adopt(server, first, (), recorded))
                return
        if existing != desired:
            self.write(r, server, desired)

    def first_elsewhere(
        self, r: int, server: str, existing: Secret, holder: ClusterRef | None
    ) -> ClusterRef | None:
        local = (*([holder] if holder else []), *self.tables[r].waiting(server))
        first = first_waiting(existing.line, existing.holder, local, self.served(r))
        return first if first is not None and not self.served(r)(first) else None

    def give_up_for(self, r: int, server: str, existing: Secret, first: ClusterRef) -> None:
        line = tuple(c for c in existing.line if c not in (existing.holder, first))
        self.write(r, server, attrs.evolve(existing, holder=first, line=line))
        self.apply(r, Remote(server, first))

    def adopt(self, r: int, server: str, existing: Secret) -> None:
        served = self.served(r)
        elsewhere = self.tables[r].wanted_by(existing.holder)
        if elsewhere not in (None, server) and existing.holder not in self.connections[r]:
            # Placed there by a Secret as last seen, not by its actor: it stays there only if
            # that Secret names it holder and was written after this one (the registry's
            # ``_adopt``).
            assert elsewhere is not None
            seen = self.known[r].get(elsewhere)
            if seen is None or seen.holder != existing.holder or seen.version < existing.version:
                self.settle(r, Release(existing.holder), first=True)
        table = self.tables[r]
        waiting = tuple(
            c
            for c in existing.line
            if served(c) and c not in self.connections[r] and c not in self.released[r]
        )
        recorded = tuple(c for c in existing.line if served(c))
        self.apply(r, Adopt(server, existing.holder, waiting, recorded))
        if existing.holder in self.released[r] and table is not None:
            self.apply(r, Release(existing.holder))

    def hear(self, r: int, server: str, *, watched: bool = True) -> None:
        """The replica's Secret watch brings the server's Secret as it is now.

        ``watched=False``: the registry looks again at what it knows (a shard taken), as its
        ``_reshard`` does, without news from the watch.
        """
        table, served = self.tables[r], self.served(r)
        seen = self.known[r].get(server)
        existing = self.secrets.get(server) if watched else seen
        remote = table.remote(server)
        fresh = (watched and (seen is None) != (existing is None)) or (
            watched and seen is not None and existing is not None and seen.holder != existing.holder
        )
        self.known[r][server] = existing
        if existing is not None:
            self.pending[r].discard(server)
        if existing is None:
            if remote is not None and seen is not None:
                first = first_waiting(seen.line, seen.holder, table.waiting(server), served)
                if first is not None and not served(first):
                    self.pending[r].add(server)
                    self.apply(r, Remote(server, first))  # it creates it; ours wait (grace)
                else:
                    self.apply(r, RemoteGone(server))
            elif remote is not None and watched:
                self.apply(r, RemoteGone(server))  # held by a Secret never seen here: gone
        elif not served(existing.holder):
            if remote != existing.holder:
                self.apply(r, Remote(server, existing.holder))
        elif (remote is not None or fresh) and table.holder(server) != existing.holder:
            self.adopt(r, server, existing)
        # The registry settles every server its news touched.
        self.sync(r, server)

    # --- what happens ---

    @rule(cluster=st.sampled_from(CLUSTERS), server=st.sampled_from(SERVERS))
    def want(self, cluster: ClusterRef, server: str) -> None:
        self.intent[cluster] = server
        r = self.served_by(cluster)
        if r is not None:
            self.apply(r, Want(cluster, server))

    @rule(cluster=st.sampled_from(CLUSTERS))
    def release(self, cluster: ClusterRef) -> None:
        self.intent[cluster] = None
        r = self.served_by(cluster)
        if r is not None:
            self.apply(r, Release(cluster))

    @rule(r=st.sampled_from([0, 1]), data=st.data())
    def deliver(self, r: int, data: st.DataObject) -> None:
        if self.news[r]:
            server = data.draw(st.sampled_from(sorted(self.news[r])))
            self.news[r].discard(server)
            self.hear(r, server)

    @rule(r=st.sampled_from([0, 1]), server=st.sampled_from(SERVERS))
    def grace_runs_out(self, r: int, server: str) -> None:
        """Nobody created the Secret left to another replica's waiter: the next may."""
        if server in self.pending[r]:
            self.pending[r].discard(server)
            if self.tables[r].remote(server) is not None and self.known[r].get(server) is None:
                self.apply(r, RemoteGone(server))

    @rule(moved=st.sampled_from([0, 1]))
    def move_shard(self, moved: int) -> None:
        """The shard's Lease goes to the other replica: disowned there, adopted here."""
        old = next(r for r, shards in enumerate(self.serves) if moved in shards)
        new = 1 - old
        self.serves[old].discard(moved)
        self.released[new] = {c for c in self.released[new] if shard(c) != moved}
        for cluster in self.tables[old].wanting():
            if shard(cluster) == moved:
                self.apply(old, Disown(cluster))
        self.serves[new].add(moved)
        known = {s: k for s, k in self.known[new].items() if k is not None}
        for server in SERVERS:
            secret = known.get(server)
            if secret is not None and any(
                k.holder == secret.holder and k.version > secret.version for k in known.values()
            ):
                continue  # named again by a newer Secret: adopted there, as the registry does
            self.hear(new, server, watched=False)
        # The shard's Cluster actors start there and say what they want, as at every check.
        for cluster in CLUSTERS:
            if shard(cluster) == moved:
                intent = self.intent.get(cluster)
                self.apply(new, Release(cluster) if intent is None else Want(cluster, intent))

    # --- what must hold ---

    def quiet(self) -> bool:
        """All news is in, and no replica waits out a grace."""
        return not any(self.news) and not any(self.pending)

    @invariant()
    def one_replica_believes_it_holds_each_server(self) -> None:
        if not self.quiet():
            return
        for server in SERVERS:
            believers = [r for r in (0, 1) if self.tables[r].holder(server) is not None]
            assert len(believers) <= 1, (server, believers)

    @invariant()
    def once_all_news_is_in_the_secrets_and_tables_agree(self) -> None:
        if not self.quiet():
            return
        for server in SERVERS:
            secret = self.secrets.get(server)
            wanting = [c for c, s in self.intent.items() if s == server]
            if secret is None:
                assert not wanting, f"{wanting} wait for {server}, which nobody holds"
                continue
            assert self.intent.get(secret.holder) == server, (server, secret)
            assert secret.connection == secret.holder, "the holder's own connection"
            r = self.served_by(secret.holder)
            assert r is not None
            assert self.tables[r].holder(server) == secret.holder
            assert self.tables[1 - r].remote(server) in (secret.holder, None)
            waiting = [c for c in wanting if c != secret.holder]
            assert list(secret.line) == waiting or set(secret.line) == set(waiting), (
                secret,
                waiting,
            )


def _replay(*events: tuple[object, ...]) -> Replicas:
    """The walk's rules in a fixed order, no news delivered but what the registry reads, with
    the invariants checked after each, as Hypothesis runs them."""
    machine = Replicas()
    for name, *args in events:
        getattr(machine, str(name))(*args)
        machine.one_replica_believes_it_holds_each_server()
        machine.once_all_news_is_in_the_secrets_and_tables_agree()
    return machine


def _all_news_in(machine: Replicas) -> None:
    while any(machine.news):
        r = 0 if machine.news[0] else 1
        machine.hear(r, machine.news[r].pop())
    machine.one_replica_believes_it_holds_each_server()
    machine.once_all_news_is_in_the_secrets_and_tables_agree()


def test_a_holder_adopted_back_from_a_stale_secret_keeps_the_server_it_moved_to() -> None:
    """A shard taken back before the watch brought the news of its Cluster's move.

    Replica 0 registers ``a`` at X; the shard moves to replica 1, where ``a`` moves to Y and
    ``b`` waits behind it. When the shard comes back, replica 0 adopts ``a`` from its own,
    stale, copy of X's Secret, then hears of Y's. Y's Secret is the later: ``a`` holds Y, as
    it never let go of it. Taking it for a move cut short had handed Y to ``b``.
    """
    a, b = CLUSTERS[2], CLUSTERS[3]  # shards 0 and 1
    machine = _replay(
        ("want", a, X),
        ("move_shard", 0),
        ("want", a, Y),
        ("want", b, Y),
        ("move_shard", 0),
    )
    _all_news_in(machine)
    assert machine.secrets[Y].holder == a
    assert machine.secrets[Y].line == (b,)
    assert X not in machine.secrets
    assert machine.handovers == 0


def test_after_a_stale_adoption_no_recorded_waiter_is_passed_over() -> None:
    """As above, with two waiters recorded behind ``a`` at Y, the first of them served where
    ``a`` is adopted back: Y stays ``a``'s, with its line as recorded. Taking Y for a move cut
    short had dropped the first waiter and handed Y to the second, another replica's."""
    a, first, second = CLUSTERS[1], CLUSTERS[3], CLUSTERS[2]  # shards 1, 1 and 0
    machine = _replay(
        ("move_shard", 0),
        ("want", a, X),
        ("move_shard", 0),
        ("want", a, Y),
        ("move_shard", 0),
        ("want", first, Y),
        ("want", second, Y),
        ("move_shard", 1),
    )
    _all_news_in(machine)
    assert machine.secrets[Y].holder == a
    assert machine.secrets[Y].line == (first, second)
    assert machine.handovers == 0


def test_two_replicas_against_one_api_server() -> None:
    run_state_machine_as_test(
        Replicas, settings=settings(max_examples=1000, stateful_step_count=60, deadline=None)
    )
