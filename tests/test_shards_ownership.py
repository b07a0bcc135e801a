"""The first-come table across replicas: servers held elsewhere, adopted and disowned shards.

Examples first, then a random walk of two replicas, each with its own table, sharing one
stand-in API server whose create is atomic. Each replica performs its effects as the registry
does (it writes only for Clusters of the shards it serves) and hears of every Secret change,
perhaps late. Whenever all news has arrived: one Secret per held server, naming a Cluster that
wants it; no replica believes it holds what another's Cluster holds; and no Cluster waits for a
server nobody holds.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from kokumi.ownership import (
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


class Replicas(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tables = [Table(), Table()]
        self.serves: list[set[int]] = [{0}, {1}]
        self.secrets: dict[str, ClusterRef] = {}  # server -> holder: the API server
        self.news: list[set[str]] = [set(), set()]  # servers each replica has not heard of yet
        self.known: list[dict[str, ClusterRef | None]] = [{}, {}]  # holder each last saw
        # Clusters whose connection each replica has (they wanted since it serves them): only
        # for those may it write a Secret; an adopted holder has none until its actor wants.
        self.connections: list[set[ClusterRef]] = [set(), set()]
        self.intent: dict[ClusterRef, str | None] = {}  # what each Cluster's actor asks for

    # --- what the registry does ---

    def served_by(self, cluster: ClusterRef) -> int | None:
        for r, shards in enumerate(self.serves):
            if shard(cluster) in shards:
                return r
        return None

    def apply(self, r: int, event: Event) -> None:
        match event:
            case Want(cluster=cluster):
                self.connections[r].add(cluster)
            case Release(cluster=cluster) | Disown(cluster=cluster):
                self.connections[r].discard(cluster)
        self.tables[r], effects = step(self.tables[r], event)
        touched = {e.server for e in effects if hasattr(e, "server")}
        if hasattr(event, "server"):
            touched.add(event.server)
        for server in sorted(touched):
            self.sync(r, server)

    def changed(self, server: str) -> None:
        for heard in self.news:
            heard.add(server)

    def sync(self, r: int, server: str) -> None:
        table = self.tables[r]
        if table.remote(server) is not None:
            return
        holder, existing = table.holder(server), self.secrets.get(server)
        if existing is not None and self.served_by(existing) != r:
            if holder is not None:
                # The atomic create refused: the other replica's Cluster holds it.
                self.apply(r, Remote(server, existing))
            return
        if holder is None:
            if existing is not None:
                del self.secrets[server]
                self.changed(server)
            return
        if holder not in self.connections[r]:
            return  # adopted, or handed to a Cluster not heard from since: nothing to copy
        if existing != holder:
            self.secrets[server] = holder  # create, or hand over in place
            self.known[r][server] = holder
            self.changed(server)

    def hear(self, r: int, server: str, *, watched: bool = True) -> None:
        """The replica's Secret watch brings the server's Secret as it is now.

        ``watched=False``: the registry looks again at what it knows (a shard taken), as its
        ``_reshard`` does, without news from the watch.
        """
        table = self.tables[r]
        existing = self.secrets.get(server) if watched else self.known[r].get(server)
        remote = table.remote(server)
        fresh = watched and self.known[r].get(server) != existing
        self.known[r][server] = existing
        if existing is None:
            if remote is not None:
                self.apply(r, RemoteGone(server))
            return
        if self.served_by(existing) != r:
            if remote != existing:
                self.apply(r, Remote(server, existing))
        elif (remote is not None or fresh) and table.holder(server) != existing:
            self.apply(r, Adopt(server, existing))

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

    @rule(moved=st.sampled_from([0, 1]))
    def move_shard(self, moved: int) -> None:
        """The shard's Lease goes to the other replica: disowned there, adopted here."""
        old = next(r for r, shards in enumerate(self.serves) if moved in shards)
        new = 1 - old
        self.serves[old].discard(moved)
        for cluster in self.tables[old].wanting():
            if shard(cluster) == moved:
                self.apply(old, Disown(cluster))
        self.serves[new].add(moved)
        for server in SERVERS:
            self.hear(new, server, watched=False)
        # The shard's Cluster actors start there and say what they want, as at every check.
        for cluster in CLUSTERS:
            if shard(cluster) == moved:
                intent = self.intent.get(cluster)
                self.apply(new, Release(cluster) if intent is None else Want(cluster, intent))

    # --- what must hold ---

    def quiet(self) -> bool:
        return not any(self.news)

    @invariant()
    def one_replica_believes_it_holds_each_server(self) -> None:
        for server in SERVERS:
            believers = [r for r in (0, 1) if self.tables[r].holder(server) is not None]
            if self.quiet():
                assert len(believers) <= 1, (server, believers)

    @invariant()
    def once_all_news_is_in_the_secrets_and_tables_agree(self) -> None:
        if not self.quiet():
            return
        for server in SERVERS:
            holder = self.secrets.get(server)
            wanting = [
                c
                for r in (0, 1)
                for c in self.tables[r].wanting()
                if self.tables[r].wanted_by(c) == server
            ]
            if holder is None:
                assert not wanting, f"{wanting} wait for {server}, which nobody holds"
                continue
            r = self.served_by(holder)
            assert r is not None
            assert self.tables[r].holder(server) == holder
            assert self.tables[1 - r].remote(server) in (holder, None)
            for c in wanting:
                other = self.served_by(c)
                assert other is not None
                if other != r:
                    assert self.tables[other].remote(server) == holder


def test_two_replicas_against_one_api_server() -> None:
    run_state_machine_as_test(
        Replicas, settings=settings(max_examples=1000, stateful_step_count=60, deadline=None)
    )
