"""The first-come table of servers: examples from the spec, then a long random walk against a model.

The model says the same thing in another way: a Cluster that wants a server gets a timestamp when it
starts wanting it, and the holder is the earliest of those, unless a foreign Secret blocks the
server. The effects are replayed on a dictionary standing in for the API server, which must end up
with exactly one Secret per held server after every step.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kokumi.core.registry.ownership import (
    IN_CLUSTER_SERVER,
    ClusterRef,
    DeleteSecret,
    Effect,
    Event,
    Foreign,
    ForeignGone,
    Holding,
    Release,
    ServerTaken,
    Table,
    Want,
    WriteSecret,
    _Layers,
    normalise_server,
    seed,
    step,
)
from tests.support.strategies import examples

SPOKE = ClusterRef("platform", "spoke")
TEAM = ClusterRef("team-a", "spoke")
OTHER = ClusterRef("team-b", "edge")
X = "https://spoke.example:6443"
Y = "https://edge.example:6443"


def run(table: Table, *events: Event) -> tuple[Table, tuple[Effect, ...]]:
    """Apply events in order; return the last table and the last step's effects."""
    effects: tuple[Effect, ...] = ()
    for event in events:
        table, effects = step(table, event)
    return table, effects


# Examples.


def test_the_first_cluster_holds_the_server() -> None:
    table, effects = step(Table(), Want(SPOKE, X))
    assert effects == (WriteSecret(X, SPOKE), Holding(SPOKE, X))
    assert table.holder(X) == SPOKE
    assert table.held_by(SPOKE) == X
    assert table.wanted_by(SPOKE) == X
    assert table.holders() == {X: SPOKE}


def test_the_second_waits_and_is_told_who_holds_it() -> None:
    table, effects = run(Table(), Want(SPOKE, X), Want(TEAM, X + "/"))
    assert effects == (
        ServerTaken(
            TEAM,
            X,
            f"server {X} is held by Cluster platform/spoke; "
            "this Cluster takes it over once that Cluster lets go of it",
        ),
    )
    assert table.holder(X) == SPOKE
    assert table.waiting(X) == (TEAM,)
    assert table.held_by(TEAM) is None


def test_release_hands_over_in_the_same_step_without_a_delete() -> None:
    table, effects = run(Table(), Want(SPOKE, X), Want(TEAM, X), Release(SPOKE))
    assert effects == (WriteSecret(X, TEAM), Holding(TEAM, X))
    assert table.holder(X) == TEAM
    assert table.waiting(X) == ()
    assert table.wanted_by(SPOKE) is None


def test_waiters_take_over_in_the_order_they_came() -> None:
    table, _ = run(Table(), Want(SPOKE, X), Want(OTHER, X), Want(TEAM, X))
    assert table.waiting(X) == (OTHER, TEAM)
    table, effects = step(table, Release(SPOKE))
    assert effects == (
        WriteSecret(X, OTHER),
        Holding(OTHER, X),
        ServerTaken(TEAM, X, table.message(X)),
    )
    assert "team-b/edge" in table.message(X)
    table, effects = step(table, Release(OTHER))
    assert effects == (WriteSecret(X, TEAM), Holding(TEAM, X))


def test_release_without_a_waiter_deletes_the_secret() -> None:
    table, effects = run(Table(), Want(SPOKE, X), Release(SPOKE))
    assert effects == (DeleteSecret(X),)
    assert table.holder(X) is None
    assert table.holders() == {}


def test_a_waiter_that_leaves_changes_nothing_in_argo_cd() -> None:
    table, effects = run(Table(), Want(SPOKE, X), Want(TEAM, X), Release(TEAM))
    assert effects == ()
    assert table.waiting(X) == ()
    assert step(table, Release(TEAM)) == (table, ())


def test_moving_to_another_server_lets_go_of_the_old_one_first() -> None:
    table, effects = run(Table(), Want(SPOKE, X), Want(TEAM, X), Want(SPOKE, Y))
    assert effects == (
        WriteSecret(X, TEAM),
        Holding(TEAM, X),
        WriteSecret(Y, SPOKE),
        Holding(SPOKE, Y),
    )
    assert table.holders() == {Y: SPOKE, X: TEAM}
    table, effects = step(table, Want(SPOKE, X))
    assert effects == (DeleteSecret(Y), ServerTaken(SPOKE, X, table.message(X)))
    assert table.waiting(X) == (SPOKE,)


def test_the_holder_wanting_again_copies_the_connection_again() -> None:
    table, _ = step(Table(), Want(SPOKE, X))
    assert step(table, Want(SPOKE, X + "/")) == (table, (WriteSecret(X, SPOKE), Holding(SPOKE, X)))


@pytest.mark.parametrize("server", [IN_CLUSTER_SERVER, IN_CLUSTER_SERVER + "/"])
def test_the_in_cluster_server_is_never_registered(server: str) -> None:
    table, effects = run(Table(), Want(SPOKE, X), Want(SPOKE, server))
    assert effects[0] == DeleteSecret(X)
    (conflict,) = effects[1:]
    assert isinstance(conflict, ServerTaken)
    assert conflict.server == IN_CLUSTER_SERVER
    assert conflict.message.endswith("use connection: InCluster")
    assert table.holder(server) is None
    assert table.waiting(server) == ()
    assert table.wanted_by(SPOKE) == IN_CLUSTER_SERVER
    table, effects = step(table, Want(TEAM, server))
    assert [type(effect) for effect in effects] == [ServerTaken]


def test_a_foreign_secret_is_left_alone_and_named() -> None:
    table, effects = run(Table(), Foreign(X, "cluster-spoke"), Want(SPOKE, X))
    assert effects == (ServerTaken(SPOKE, X, table.message(X)),)
    assert "Secret cluster-spoke" in table.message(X)
    assert "Kokumi did not write" in table.message(X)
    assert table.holder(X) is None
    assert table.waiting(X) == (SPOKE,)


def test_when_the_foreign_secret_goes_the_earliest_waiter_takes_the_server() -> None:
    table, _ = run(Table(), Foreign(X, "hand"), Want(TEAM, X), Want(SPOKE, X))
    table, effects = step(table, ForeignGone(X, "hand"))
    assert effects == (
        WriteSecret(X, TEAM),
        Holding(TEAM, X),
        ServerTaken(SPOKE, X, table.message(X)),
    )
    assert "team-a/spoke" in table.message(X)


def test_the_last_of_several_foreign_secrets_frees_the_server() -> None:
    table, _ = run(Table(), Foreign(X, "one"), Foreign(X, "two"), Want(SPOKE, X))
    table, effects = step(table, ForeignGone(X, "one"))
    assert effects == (ServerTaken(SPOKE, X, table.message(X)),)
    assert "Secret two" in table.message(X)
    table, effects = step(table, ForeignGone(X, "two"))
    assert effects == (WriteSecret(X, SPOKE), Holding(SPOKE, X))


def test_a_foreign_secret_for_a_held_server_steps_the_holder_back() -> None:
    table, _ = run(Table(), Want(SPOKE, X), Want(TEAM, X))
    table, effects = step(table, Foreign(X, "hand"))
    message = table.message(X)
    assert effects == (
        DeleteSecret(X),
        ServerTaken(SPOKE, X, message),
        ServerTaken(TEAM, X, message),
    )
    assert table.waiting(X) == (SPOKE, TEAM)
    assert step(table, Foreign(X, "hand")) == (table, ())
    table, effects = step(table, ForeignGone(X))
    assert effects[:2] == (WriteSecret(X, SPOKE), Holding(SPOKE, X))


def test_seed_rebuilds_the_table_from_the_secrets() -> None:
    table, effects = seed({X + "/": SPOKE, Y: TEAM})
    assert effects == ()
    assert table.holders() == {X: SPOKE, Y: TEAM}
    assert seed({X: SPOKE})[0].holders() == {X: SPOKE}
    table, effects = step(table, Want(OTHER, Y))
    assert table.waiting(Y) == (OTHER,)


def test_seed_deletes_what_kokumi_cannot_keep() -> None:
    table, effects = seed({Y: SPOKE, X: SPOKE, IN_CLUSTER_SERVER: TEAM})
    # The first server in sorted order stays: edge.example before spoke.example.
    assert sorted(effects, key=repr) == [DeleteSecret(IN_CLUSTER_SERVER), DeleteSecret(X)]
    assert table.holders() == {Y: SPOKE}
    assert table.wanted_by(TEAM) is None


def test_seed_keeps_the_server_a_cluster_was_moving_to() -> None:
    """A move interrupted half way: the new server's Secret was written last, and stays."""
    table, effects = seed({Y: SPOKE, X: SPOKE}, written={X: 7, Y: 3})
    assert effects == (DeleteSecret(Y),)
    assert table.holders() == {X: SPOKE}
    table, effects = seed({Y: SPOKE, X: SPOKE}, written={X: 3, Y: 7})
    assert effects == (DeleteSecret(X),)
    assert table.holders() == {Y: SPOKE}


def test_messages_show_no_credentials_and_stay_on_one_line() -> None:
    server = "https://kokumi:hunter2@spoke.example:6443"
    table, _ = run(Table(), Want(SPOKE, server), Want(TEAM, server))
    assert "hunter2" not in table.message(server)
    assert "https://spoke.example:6443" in table.message(server)
    table, _ = step(table, Foreign("https://odd\nserver", "line\nbreak"))
    assert "\n" not in table.message("https://odd\nserver")


def test_equal_steps_give_equal_results() -> None:
    table, _ = run(Table(), Want(SPOKE, X), Want(TEAM, X), Foreign(Y, "hand"))
    assert step(table, Release(SPOKE)) == step(table, Release(SPOKE))
    assert table == run(Table(), Want(SPOKE, X), Want(TEAM, X), Foreign(Y, "hand"))[0]


# The random walk.

CLUSTERS = [
    ClusterRef(namespace, name)
    for namespace in ("platform", "team-a")
    for name in ("spoke", "edge", "hub")
]
SERVERS = [
    "https://a.example:6443",
    "https://b.example:6443",
    "https://kokumi:hunter2@c.example",
    IN_CLUSTER_SERVER,
]
FOREIGN_NAMES = ["cluster-a", "hand-made", "kokumi-0123456789abcdef"]

clusters = st.sampled_from(CLUSTERS)
spellings = st.sampled_from(SERVERS).flatmap(lambda s: st.sampled_from([s, s + "/", s + "//"]))
foreign_names = st.sampled_from(FOREIGN_NAMES)


class Steps:
    """How many steps the state machine really ran, so that its budget is a measured number."""

    count = 0


class TableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = Table()
        self.api: dict[str, ClusterRef] = {}  # Kokumi's Secrets in argocd, by server
        self.wanted: dict[ClusterRef, str] = {}
        self.since: dict[ClusterRef, int] = {}
        self.foreign: dict[str, list[str]] = {}
        self.told: dict[ClusterRef, Holding | ServerTaken] = {}
        self.clock = 0

    # Model.

    def line(self, server: str) -> list[ClusterRef]:
        if server == IN_CLUSTER_SERVER:
            return []
        wanting = [cluster for cluster, wanted in self.wanted.items() if wanted == server]
        return sorted(wanting, key=lambda cluster: self.since[cluster])

    def expected_holder(self, server: str) -> ClusterRef | None:
        line = self.line(server)
        return line[0] if line and not self.foreign.get(server) else None

    def expected_waiting(self, server: str) -> tuple[ClusterRef, ...]:
        line = self.line(server)
        return tuple(line if self.foreign.get(server) else line[1:])

    def servers(self) -> list[str]:
        return sorted({normalise_server(server) for server in SERVERS})

    # Rules.

    @initialize(found=st.dictionaries(spellings, clusters, max_size=4))
    def restart(self, found: dict[str, ClusterRef]) -> None:
        Steps.count += 1
        table, effects = seed(found)
        for server, cluster in sorted((normalise_server(s), c) for s, c in found.items()):
            self.api.setdefault(server, cluster)
        for index, (server, cluster) in enumerate(sorted(self.api.items())):
            if server != IN_CLUSTER_SERVER and cluster not in self.wanted:
                self.wanted[cluster] = server
                self.since[cluster] = index - len(self.api)
                self.told[cluster] = Holding(cluster, server)
        self.check_step(Table(), table, effects, event=None)

    @rule(cluster=clusters, server=spellings)
    def want(self, cluster: ClusterRef, server: str) -> None:
        self.clock += 1
        server = normalise_server(server)
        if self.wanted.get(cluster) != server:
            self.wanted[cluster] = server
            self.since[cluster] = self.clock
        self.apply(Want(cluster, server))

    # Wanting is the common case, so it gets two rules of the seven.
    @rule(cluster=clusters, server=spellings)
    def want_again(self, cluster: ClusterRef, server: str) -> None:
        self.want(cluster, server)

    @rule(cluster=clusters)
    def release(self, cluster: ClusterRef) -> None:
        self.wanted.pop(cluster, None)
        self.since.pop(cluster, None)
        self.told.pop(cluster, None)
        self.apply(Release(cluster))

    @precondition(lambda self: bool(self.wanted))
    @rule(data=st.data())
    def release_one_that_wants(self, data: st.DataObject) -> None:
        self.release(data.draw(st.sampled_from(sorted(self.wanted))))

    @rule(server=spellings, name=foreign_names)
    def foreign_appears(self, server: str, name: str) -> None:
        names = self.foreign.setdefault(normalise_server(server), [])
        if name not in names:
            names.append(name)
        self.apply(Foreign(server, name))

    @rule(server=spellings, name=st.none() | foreign_names)
    def foreign_goes(self, server: str, name: str | None) -> None:
        server = normalise_server(server)
        names = self.foreign.get(server, [])
        self.foreign[server] = [] if name is None else [n for n in names if n != name]
        self.apply(ForeignGone(server, name))

    @precondition(lambda self: any(self.foreign.values()))
    @rule(data=st.data())
    def foreign_one_goes(self, data: st.DataObject) -> None:
        pairs = sorted((s, n) for s, names in self.foreign.items() for n in names)
        server, name = data.draw(st.sampled_from(pairs))
        self.foreign_goes(server, name)

    # Checks of one step.

    def apply(self, event: Event) -> None:
        Steps.count += 1
        before = self.table
        after, effects = step(before, event)
        self.check_step(before, after, effects, event)

    def check_step(
        self, before: Table, after: Table, effects: Sequence[Effect], event: Event | None
    ) -> None:
        for effect in effects:
            match effect:
                case WriteSecret(server=server, holder=holder):
                    assert server != IN_CLUSTER_SERVER, "the in-cluster server was written"
                    assert not after.foreign(server), "a foreign server was written"
                    self.api[server] = holder
                case DeleteSecret(server=server):
                    assert server in self.api, "deleted a Secret that Kokumi does not have"
                    del self.api[server]
                case Holding(cluster=cluster) | ServerTaken(cluster=cluster):
                    self.told[cluster] = effect
        assert self.api == after.holders(), "Argo CD's Secrets differ from the table"

        deleted = {effect.server for effect in effects if isinstance(effect, DeleteSecret)}
        for server in self.servers():
            if before.holder(server) is not None and after.holder(server) is not None:
                assert server not in deleted, "a handover deleted the Secret"

        match event:
            case Release(cluster=cluster) | Want(cluster=cluster):
                old = before.held_by(cluster)
                if old is not None and old != after.wanted_by(cluster) and before.waiting(old):
                    heir = before.waiting(old)[0]
                    assert after.holder(old) == heir, "the earliest waiter did not take over"
                    assert WriteSecret(old, heir) in effects
                    assert Holding(heir, old) in effects
            case ForeignGone(server=server):
                if before.foreign(server) and not after.foreign(server) and before.waiting(server):
                    heir = before.waiting(server)[0]
                    assert after.holder(server) == heir
                    assert WriteSecret(server, heir) in effects
            case _:
                pass

        self.table = after
        for server in self.servers():
            assert after.holder(server) == self.expected_holder(server)
            assert after.waiting(server) == self.expected_waiting(server)
            assert after.foreign(server) == tuple(self.foreign.get(server, []))
        for cluster in CLUSTERS:
            assert after.wanted_by(cluster) == self.wanted.get(cluster)

    # Invariants of every table.

    @invariant()
    def at_most_one_holder_per_server_and_one_server_per_cluster(self) -> None:
        held = self.table.holders()
        assert len(held) == len({normalise_server(server) for server in held})
        assert all(count == 1 for count in Counter(held.values()).values())

    @invariant()
    def a_holder_wants_its_server(self) -> None:
        for server, holder in self.table.holders().items():
            assert self.table.wanted_by(holder) == server
            assert self.table.held_by(holder) == server

    @invariant()
    def nobody_waits_for_a_free_server(self) -> None:
        for server in self.servers():
            if self.table.waiting(server):
                assert self.table.holder(server) is not None or self.table.foreign(server)

    @invariant()
    def a_cluster_holds_or_waits_for_at_most_one_server(self) -> None:
        places: Counter[ClusterRef] = Counter()
        for server in self.servers():
            holder = self.table.holder(server)
            if holder is not None:
                places[holder] += 1
            for waiter in self.table.waiting(server):
                places[waiter] += 1
                assert self.table.wanted_by(waiter) == server
        assert all(count == 1 for count in places.values())

    @invariant()
    def forbidden_and_foreign_servers_have_no_holder(self) -> None:
        assert self.table.holder(IN_CLUSTER_SERVER) is None
        assert self.table.waiting(IN_CLUSTER_SERVER) == ()
        for server in self.servers():
            if self.table.foreign(server):
                assert self.table.holder(server) is None

    @invariant()
    def every_cluster_was_told_where_it_stands(self) -> None:
        for cluster, server in self.wanted.items():
            told = self.told.get(cluster)
            if self.table.holder(server) == cluster:
                assert told == Holding(cluster, server)
            else:
                message = self.table.message(server)
                assert told == ServerTaken(cluster, server, message)
                assert "\n" not in message
                assert "hunter2" not in message
                holder = self.table.holder(server)
                foreign = self.table.foreign(server)
                if server == IN_CLUSTER_SERVER:
                    assert "use connection: InCluster" in message
                elif foreign:
                    assert f"Secret {foreign[0]}" in message
                else:
                    assert f"held by Cluster {holder}" in message


# 10,000 in the full loop; the fast loop's fewer examples are held to the same steps per example.
MIN_STEPS = 25 * examples(400)


def test_the_table_against_its_model() -> None:
    started, before = time.monotonic(), Steps.count
    run_state_machine_as_test(
        TableMachine,
        settings=settings(max_examples=examples(400), stateful_step_count=75, deadline=None),
    )
    ran = Steps.count - before
    print(f"ownership state machine: {ran} steps in {time.monotonic() - started:.1f} s")
    assert ran >= MIN_STEPS


# --- the table's mappings: a step copies only its changes ----------------------------------------

_keys = st.integers(0, 300)


@settings(max_examples=examples(300))
@given(
    start=st.dictionaries(_keys, st.integers(), max_size=300),
    steps=st.lists(
        st.lists(st.tuples(st.booleans(), _keys, st.integers()), max_size=6), max_size=150
    ),
)
def test_layered_mappings_behave_as_dicts_and_never_change_once_made(
    start: dict[int, int], steps: list[list[tuple[bool, int, int]]]
) -> None:
    """Each step copies the last version and sets or deletes a few keys, as a step of the table
    does: every version reads, iterates (in a dict's order) and counts as the dict it stands for,
    and no later step changes an earlier version."""
    versions: list[tuple[Mapping[int, int], dict[int, int]]] = [(start, dict(start))]
    for changes in steps:
        layered = _Layers.of(versions[-1][0])
        model = dict(versions[-1][1])
        for delete, key, value in changes:
            if delete:
                assert (key in layered) == (key in model)
                if key in model:
                    assert layered.pop(key) == model.pop(key)
            else:
                layered[key] = value
                model[key] = value
        versions.append((layered, model))
    for version, model in versions:
        assert list(version) == list(model)
        assert len(version) == len(model)
        assert dict(version.items()) == model
        for key in range(0, 301, 7):
            assert version.get(key) == model.get(key)


def test_a_new_want_copies_only_the_changes_not_the_fleet() -> None:
    """Onboarding 10,000 Clusters was quadratic: every new want copied the whole table."""
    table = Table()
    for index in range(2_000):
        table, _ = step(table, Want(ClusterRef("fleet", f"c{index:05d}"), f"https://s{index}:6443"))
    before = table
    table, _ = step(table, Want(ClusterRef("fleet", "new"), "https://new:6443"))
    wants, lines = table._wants, table._lines
    assert isinstance(wants, _Layers) and isinstance(before._wants, _Layers)
    assert wants._base is before._wants._base
    assert isinstance(lines, _Layers) and isinstance(before._lines, _Layers)
    assert lines._base is before._lines._base
    assert len(wants._changes) <= max(64, math.isqrt(2_000)) + 1
    assert before.wanted_by(ClusterRef("fleet", "new")) is None
    assert table.holder("https://new:6443") == ClusterRef("fleet", "new")
