"""The check schedule over simulated minutes: the real Manager and Cluster actors on the
in-process API fake, with a stand-in for the spoke check (the probe's own tests are elsewhere).

300 Clusters, 60 of them silent (their checks run out the whole 10 s): 600 slot-seconds a minute
for the silent against the 420 that seven slots give, so the silent ones queue all the time.
The answering Clusters must still be checked about once a minute (never before the minute since
the last check began, at most 6 s after it), each moving to its own place in the minute, and the
silent ones in turn every few minutes; a silent Cluster that answers again is
back on the minute.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client.exposition import generate_latest

from kokumi.actors import kubeconfigs
from kokumi.actors.context import wall_shift
from kokumi.core import api
from kokumi.core.cluster import findings, schedule
from kokumi.core.kubeconfig import reader
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import NotFound
from kokumi.kube.resources import SECRETS
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support import strategies as s
from tests.support.fakeapi import Call, FakeApi
from tests.support.manager import ready_of, wait_for
from tests.support.standin import StandInSpokes, put_cluster, put_environment

NS = "fleet"
ANSWERING, SILENT = 240, 60
FLIPPER = "https://flipper.example:6443"


def server(index: int) -> str:
    return f"https://spoke-{index}.example:6443"


def _fleet() -> StandInSpokes:
    return StandInSpokes({server(i) for i in range(ANSWERING, ANSWERING + SILENT)} | {FLIPPER})


def _put_cluster(fake: FakeApi, name: str, url: str) -> None:
    put_cluster(fake, NS, name, url)


async def _run_for(seconds: float, client: Client, options: Options, fleet: StandInSpokes) -> None:
    """A manager that runs ``seconds`` and stops, as the first of a restart's two."""
    manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


def _uid(fake: FakeApi, name: str) -> str:
    found = fake.object(api.CLUSTERS, name, NS)
    assert found is not None, name
    return str(found["metadata"]["uid"])


PERIOD = schedule.period_of(schedule.CHECK_INTERVAL, schedule.CHECK_JITTER)
MINUTE = schedule.CHECK_INTERVAL - 1e-6  # the shortest gap, but for floating point


def _gaps(times: list[float], since: float) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times) if a >= since]


def _from_place(at: float, place: float) -> float:
    """How far ``at`` is from the nearest occurrence of ``place``, signed: within half a period."""
    return (at - place + PERIOD / 2) % PERIOD - PERIOD / 2


def _moves_to_its_place(times: list[float], place: float) -> list[tuple[float, float]]:
    """The steps of a Cluster's checks that neither land on its place (up to half the jitter
    after it, give or take a timer tick) nor come 1.5 s or more nearer to it than the check
    before: none, by the schedule's rule (kokumi.core.cluster.schedule.due_after)."""
    wrong = []
    for a, b in itertools.pairwise(times):
        before, after = _from_place(a, place), _from_place(b, place)
        on_place = -0.06 <= after <= schedule.CHECK_JITTER / 2 + 0.06
        if not on_place and abs(after) > abs(before) - 1.4:
            wrong.append((before, after))
    return wrong


async def test_silent_clusters_take_only_the_slots_the_answering_ones_leave(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=25)
    for index in range(ANSWERING + SILENT):
        _put_cluster(fake, f"c{index:03d}", server(index))
    _put_cluster(fake, "flipper", FLIPPER)
    fleet = _fleet()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(300.0)
            scraped = generate_latest(manager.metrics.registry).decode()
            fleet.hanging.discard(FLIPPER)  # the flipper answers again
            answered = trio.current_time()
            await trio.sleep(900.0)
            nursery.cancel_scope.cancel()

    # The silent queue is never empty, the answering one always is.
    assert 'kokumi_checks_waiting{class="answering"} 0.0' in scraped
    waiting = next(
        float(line.rsplit(" ", 1)[1])
        for line in scraped.splitlines()
        if line.startswith('kokumi_checks_waiting{class="silent"}')
    )
    # Seven slots give 42 checks a minute; 60 silent Clusters each ask a minute after their
    # last check ended, so a silent check waits about 16 s and about 11 wait at any moment.
    assert 5 <= waiting <= SILENT, scraped
    assert 'kokumi_checks_running{class="silent"} 7.0' in scraped

    # Every answering Cluster about once a minute from its first check on (the first tries of
    # all 300, new, share seven slots for the first minute and a half): never before the minute
    # after the last check began, and at most the 6 s of jitter after it, the first gap
    # included. While the first tries hold seven slots, answering checks due together share the
    # eighth, 5 ms each; after that, never a wait for a slot.
    for index in range(ANSWERING):
        times = fleet.asked[server(index)]
        assert times[0] <= 100.0, (index, times[:3])
        gaps = _gaps(times, 0.0)
        assert len(gaps) >= 16, (index, gaps)
        assert all(MINUTE <= gap <= 66.5 for gap in gaps), (index, gaps)
        assert all(MINUTE <= gap <= 66.1 for gap in _gaps(times, 240.0)), (index, gaps)

    # Every silent one in its turn: 600 slot-seconds a minute of demand on 420, so every one is
    # checked every minute and a half or so, and none waits much longer than the others.
    silent_gaps = [
        gap
        for index in range(ANSWERING, ANSWERING + SILENT)
        for gap in _gaps(fleet.asked[server(index)], 300.0)
    ]
    assert max(silent_gaps) <= 180.0, max(silent_gaps)
    counts = [
        sum(1 for t in fleet.asked[server(i)] if t >= 300.0)
        for i in range(ANSWERING, ANSWERING + SILENT)
    ]
    assert max(counts) - min(counts) <= 3, counts

    # The flipper: checked in the silent queue while it hung; its first check that answers
    # comes within a few minutes, and from then on it is on the minute.
    after = [t for t in fleet.asked[FLIPPER] if t >= answered]
    assert after[0] - answered <= 180.0, after
    assert all(MINUTE <= gap <= 66.1 for gap in _gaps(after, after[0])), after

    # Spread over the minute (no burst of the fleet created together): each Cluster aims at its
    # own place, a hash of its uid, and the 240 places hold about 24 in each tenth of the
    # minute. Which tenth a check falls in before the Cluster reaches its place moves with the
    # random lateness, so counting checks by tenth at a fixed minute was a probability (these
    # uids' places hold 18 in one tenth, whose checks in the fifth minute numbered 8-20 over
    # 120 seeded runs); where each check comes is not. Each check lands on the Cluster's place
    # plus its lateness (up to 3 s), or comes 1.5 s or more nearer to it than the last, give or
    # take the few milliseconds an answering check may wait for a slot; places recur every
    # minute and 3 s, counted from the Unix epoch.
    shift = wall_shift()
    places = {
        index: (schedule.offset_of(_uid(fake, f"c{index:03d}"), PERIOD) + shift) % PERIOD
        for index in range(ANSWERING)
    }
    tenths = [0] * 10
    for place in places.values():
        tenths[int(place // (PERIOD / 10))] += 1
    assert all(8 <= count <= 48 for count in tenths), tenths
    for index, place in places.items():
        times = [t for t in fleet.asked[server(index)] if t >= 240.0]
        assert len(times) >= 14, (index, times)
        assert _moves_to_its_place(times, place) == [], (index, place, times)


async def test_a_batch_of_new_clusters_that_do_not_answer_never_slows_the_live_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Silent onboarding: 40 live Clusters on their minute, then 100 new ones at once whose
    servers take the connection and never answer (Cluster API writes the kubeconfig before the
    API server is up). The batch's first tries hold seven slots for two and a half minutes, but
    every check of a live Cluster starts at its time: its gaps stay 60 to 66 s throughout."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=31)
    live = range(40)
    batch = range(ANSWERING, ANSWERING + 100)
    for index in live:
        _put_cluster(fake, f"c{index:03d}", server(index))
    fleet = _fleet()
    fleet.hanging = {server(i) for i in batch}
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(200.0)
            created = trio.current_time()
            for index in batch:
                _put_cluster(fake, f"c{index:03d}", server(index))
            await trio.sleep(150.0)
            scraped = generate_latest(manager.metrics.registry).decode()
            await trio.sleep(250.0)
            nursery.cancel_scope.cancel()

    for index in live:
        times = fleet.asked[server(index)]
        gaps = [b - a for a, b in itertools.pairwise(times) if b >= created]
        assert len(gaps) >= 6, (index, times)
        assert all(MINUTE <= gap <= 66.1 for gap in gaps), (index, gaps)
    # One try each in the new class, 100 x 10 s on seven slots: all within about 143 s...
    firsts = [fleet.asked[server(i)][0] - created for i in batch]
    assert max(firsts) <= 150.0, sorted(firsts)[-5:]
    # ... then silent: their next checks wait for what the live ones leave.
    assert 'kokumi_checks_waiting{class="answering"} 0.0' in scraped
    assert 'kokumi_checks_waiting{class="new"} 0.0' in scraped


CLUSTERS = 1000


async def test_metrics_show_where_the_next_checks_fall_in_the_minute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``kokumi_checks_due``: the Clusters by the tenth of the coming minute their next check
    falls in; flat, and none overdue, on a manager that keeps up.

    Each Cluster's next check is a minute to a minute and 6 s after its last began, at random
    (on its place, its place plus a lateness of up to 3 s): so a tenth's count is random too.
    With 200 Clusters (20 a tenth) a tenth held fewer than 8 in about one run in 40; with 1,000
    the same shares (4 % to 17.5 % of the fleet a tenth) are about six standard deviations from
    the mean."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=7)
    fleet = _fleet()
    fleet.hanging.clear()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            # Created over a minute, as an onboarding goes; each moves toward its place by 1.5
            # to 3 s a check. (Created in one instant, a fleet takes up to 22 checks to spread:
            # tests/core/cluster/test_schedule.py.)
            for index in range(CLUSTERS):
                _put_cluster(fake, f"c{index:03d}", server(index))
                await trio.sleep(60.0 / CLUSTERS)
            await trio.sleep(420.3)
            due = dict(manager.metrics.due_spread())
            scraped = generate_latest(manager.metrics.registry).decode()
            nursery.cancel_scope.cancel()
    assert due["overdue"] == 0
    # "later": checked in the last few seconds, so due a minute and up to 6 s on; 3 s of every
    # 63 on average, 48 of 1,000.
    assert due["later"] <= CLUSTERS * 8 // 100, due
    tenths = [count for within, count in due.items() if within.endswith("s")]
    assert len(tenths) == 10
    assert sum(tenths) >= CLUSTERS * 92 // 100
    assert all(CLUSTERS * 4 // 100 <= count <= CLUSTERS * 175 // 1000 for count in tenths), due
    assert 'kokumi_checks_due{within="0-6s"}' in scraped
    assert 'kokumi_checks_due{within="54-60s"}' in scraped


async def test_a_cluster_waiting_for_its_slot_is_deleted_without_waiting_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """60 silent Clusters queue for seven slots, each waiting a minute or more for its turn: a
    deletion (or any other message) takes the Cluster out of the queue at once, and its
    finalizer (it holds its Argo CD registration) goes without waiting for a check."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=26)
    for index in range(ANSWERING, ANSWERING + SILENT):
        _put_cluster(fake, f"c{index:03d}", server(index))
    put_environment(fake, NS)
    fleet = _fleet()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(200.0)
            # How many wait at a given moment moves with the spec's random lateness (18 at most
            # in one run's 120 s, since each check comes a minute to a minute and 6 s after the
            # last began): the deletion comes at the first moment 15 or more do.
            queued: list[Any] = []
            with trio.move_on_after(120.0):
                while len(queued) < 15:
                    await trio.sleep(0.5)
                    queued = [
                        actor
                        for actor in manager.dispatcher.actors
                        if actor.waiting_for_slot
                        and api.FINALIZER in actor.cluster.metadata.finalizers
                    ]
            assert len(queued) >= 15
            # The one whose turn is furthest away: checked last, so last in the silent queue.
            victim = max(queued, key=lambda actor: fleet.asked[_server_of(actor.ref.name)][-1])
            spoke = _server_of(victim.ref.name)
            before = len(fleet.asked[spoke])
            deleted = trio.current_time()
            await client.delete(api.CLUSTERS, victim.ref.name, namespace=NS)
            while True:
                try:
                    await client.get(api.CLUSTERS, victim.ref.name, namespace=NS)
                except NotFound:
                    break
                await trio.sleep(0.1)
            took = trio.current_time() - deleted
            nursery.cancel_scope.cancel()

    # Simulated seconds: its turn in the queue was 20 s or more away (15 queued, 7 slots of
    # 10 s).
    assert took < 2.0, f"the deletion waited {took:.1f} s for the check slot"
    assert len(fleet.asked[spoke]) == before  # and it was never checked again


def _server_of(name: str) -> str:
    return server(int(name[1:]))


async def test_a_restart_checks_each_cluster_about_a_minute_after_its_last_check(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """200 answering Clusters on their places (each moves to it by 1.5 s a check or more, so by
    its 23rd check), a manager stopped and another started 8 s later: every gap across the
    restart is about a minute. The status's finding is each Cluster's first check and its place
    in the minute stays; a Cluster whose place came while no manager ran is
    checked at once instead of at its next place (before: a gap of two minutes, for one
    Cluster in seven and a half here). Its Secret is read in one list with the others', not
    in 200 GETs."""
    count, down = 200, 8.0
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=31)
    for index in range(count):
        _put_cluster(fake, f"c{index:03d}", server(index))
    fleet = StandInSpokes()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    gets: list[str] = []

    def record(call: Call) -> bool:
        if call.name is not None:
            gets.append(call.name)
        return False

    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        await _run_for(1500.0, client, options, fleet)
        stopped = trio.current_time()
        await trio.sleep(down)
        fake.delay(0.0, verb="get", resource="secrets", when=record)
        # A hub busy with the restart: every read takes a while.
        fake.delay(0.05, verb="get", resource="secrets")
        fake.delay(0.5, verb="list", resource="secrets")
        second = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.run)
            await trio.sleep(180.0)
            lists = second.context.secret_reads.lists
            nursery.cancel_scope.cancel()

    across = []
    for index in range(count):
        times = fleet.asked[server(index)]
        before = [t for t in times if t < stopped]
        after = [t for t in times if t > stopped]
        assert len(after) >= 2, (index, times[-5:])
        across.append(after[0] - before[-1])
        # After the first check of the new manager, every gap about a minute again (one that
        # came early, at once for a place the last manager had just checked, moves back).
        assert all(MINUTE <= gap <= 66.1 for gap in _gaps(after, after[1])), (index, after)
    # At most a minute plus the lateness plus the time no manager ran (and its start).
    assert max(across) <= 60.0 + 6.0 + down + 1.0, sorted(across)[-5:]
    assert lists == 1
    # Those queued for a GET before the list began (at most 32), and those that came while it
    # ran, too few for a second list (under 32): a list's snapshot is older than they are.
    assert len(gets) < 2 * 32, len(gets)


@pytest.mark.parametrize("seed", [37, 38])
async def test_a_restart_checks_the_places_missed_in_the_order_they_came(
    autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    """600 Clusters whose spokes take 0.4 s each (eight slots: 20 checks a second, for the 10 a
    second the minute needs), on their places (by their 23rd check), a manager stopped and
    another started 8 s later: the Clusters
    whose place came while none ran (or in the seconds before, when the last one may have been
    stopping) are checked at once, in the order their places came, so the one missed longest
    ago waits for none missed later. Before, they asked in the order their kubeconfigs were
    read (their Secrets' names), and the first missed could wait for the whole lot: at 10,000
    Clusters a quarter of the fleet, and a p99 gap across the restart of 80-83 s."""
    count, down = 600, 8.0
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=seed)
    for index in range(count):
        _put_cluster(fake, f"c{index:03d}", server(index))
    fleet = StandInSpokes(latency=0.4)
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        await _run_for(1500.0, client, options, fleet)
        stopped = trio.current_time()
        await trio.sleep(down)
        began = trio.current_time()
        second = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.run)
            await trio.sleep(120.0)
            places = {a.ref.name: (a._offset, a._since) for a in second.dispatcher.actors}
            nursery.cancel_scope.cancel()

    at_once = []  # (first check after the restart, the place it missed)
    across = []
    for index in range(count):
        times = fleet.asked[server(index)]
        first = next(t for t in times if t > stopped)
        across.append(first - [t for t in times if t < stopped][-1])
        offset, since = places[f"c{index:03d}"]
        missed = schedule.first_place(first, offset, PERIOD) - PERIOD
        if since <= missed <= began:
            at_once.append((first, missed))
    assert len(at_once) >= 100, len(at_once)
    # In the order their places came: no place missed earlier is checked a slot's time or
    # more after one missed over a second later, but for the first eight, which found the
    # slots free as they asked.
    at_once = sorted(at_once)[options.max_concurrent_checks :]
    late = [(a, b) for a in at_once for b in at_once if a[1] + 1.0 < b[1] and a[0] > b[0] + 0.4]
    assert late == [], (len(late), len(at_once) ** 2 // 2, late[:3])
    # At most a minute plus the jitter plus the time no manager ran (and its start), for a
    # fleet on its places. (A Cluster still on its way to its place after a crash can wait up to
    # two periods less how far it was from it: what the stop record is for.)
    assert max(across) <= 60.0 + 6.0 + down + 2.0, sorted(across)[-5:]


def _ready_reason(fake: FakeApi, name: str) -> str | None:
    obj = fake.object(api.CLUSTERS, name, NS) or {}
    return ready_of(obj).get("reason")


async def _until_reason(fake: FakeApi, name: str, reason: str, within: float) -> None:
    async def read() -> str | None:
        return _ready_reason(fake, name)

    await wait_for(read, lambda found: found == reason, f"{name} reports {reason}", within)


async def test_a_secret_deleted_moments_after_a_read_is_reported_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A kubeconfig read of moments ago serves the next check only while the Secret watch has
    not listed yet; once the watch says the Secret is gone, that read is stale. Deleted 2 s
    after a restarted manager read it (the read that seeds its first check), and again 2 s
    after a steady check read it: SecretNotFound within seconds both times, not a minute later
    at the Cluster's next place."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=32)
    for name in ("restarted", "steady"):
        _put_cluster(fake, name, f"https://{name}.example:6443")
    fleet = StandInSpokes()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    reads: list[tuple[str, float]] = []
    steady_read = trio.Event()

    def record(call: Call) -> bool:
        if call.name is not None:
            reads.append((call.name, trio.current_time()))
            if call.name == "steady" and trio.current_time() > 120.0:
                steady_read.set()
        return False

    fake.delay(0.0, verb="get", resource="secrets", when=record)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        await _run_for(90.0, client, options, fleet)
        assert _ready_reason(fake, "restarted") == "Ready"
        second = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            nursery.start_soon(second.run)
            await trio.sleep(2.0)
            assert any(name == "restarted" and at >= started for name, at in reads), reads
            await client.delete(SECRETS, "restarted", namespace=NS)
            await _until_reason(fake, "restarted", "SecretNotFound", within=5.0)

            # The steady Cluster: wait for a check that reads its Secret again (every 10-20
            # minutes), then delete the Secret 2 s after that read.
            await steady_read.wait()
            await trio.sleep(2.0)
            await client.delete(SECRETS, "steady", namespace=NS)
            await _until_reason(fake, "steady", "SecretNotFound", within=5.0)
            nursery.cancel_scope.cancel()


async def test_a_secret_deleted_before_the_watch_lists_is_reported_when_it_lists(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A hub slow to list Secrets: the Cluster's first check read its Secret by GET, and the
    Secret is deleted before the watch's first list, which then never held it and sends no
    event. The list's silence is the word: SecretNotFound as soon as the watch lists, not at the
    next check a minute later."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=33)
    _put_cluster(fake, "early", "https://early.example:6443")
    fleet = StandInSpokes()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    # The watch's "may I list?" and its first list each take 5 s: 10 s before it lists.
    fake.delay(5.0, verb="list", resource="secrets", namespace=NS, times=2)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await _until_reason(fake, "early", "Ready", within=3.0)
            watches = manager.dispatcher.secret_watches
            assert watches.listable(NS) is None
            await client.delete(SECRETS, "early", namespace=NS)

            async def listable() -> bool | None:
                return watches.listable(NS)

            await wait_for(listable, lambda found: found is True, "the Secret watch lists", 15.0)
            await _until_reason(fake, "early", "SecretNotFound", within=1.0)
            nursery.cancel_scope.cancel()


async def test_a_secret_deleted_while_its_check_runs_is_reported_when_the_check_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Cluster whose server does not answer: its check runs its whole 10 s. The Secret is
    deleted 3 s into it, after the read: the word of it must outlive the check, and a check that
    finds the Secret gone follows at once (not a minute later, at the next place)."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=34)
    silent = "https://silent.example:6443"
    _put_cluster(fake, "silent", silent)
    fleet = StandInSpokes({silent})
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)

    async def probes() -> int:
        return len(fleet.asked[silent])

    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await wait_for(probes, lambda n: n >= 1, "its first check", 5.0)
            await trio.sleep(3.0)
            assert manager.dispatcher.secret_watches.listable(NS) is True
            await client.delete(SECRETS, "silent", namespace=NS)
            ends = fleet.asked[silent][-1] + options.probe_timeout
            # Found gone as the check ends (its Unreachable is never the last word).
            within = ends - trio.current_time() + 1.0
            await _until_reason(fake, "silent", "SecretNotFound", within=within)
            nursery.cancel_scope.cancel()


def _one_cluster_counting_parses(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[FakeApi, StandInSpokes, Options, list[str]]:
    """One selected Cluster ``c0`` on a healthy spoke, and the kubeconfigs the actors parse."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=seed)
    put_environment(fake, NS)
    _put_cluster(fake, "c0", server(0))
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    parsed: list[str] = []

    def counted_parse(text: str, **kwargs: Any) -> Any:
        parsed.append(text)
        return reader.parse(text, **kwargs)

    monkeypatch.setattr(kubeconfigs, "parse", counted_parse)
    return fake, StandInSpokes(), options, parsed


async def test_a_kubeconfig_read_again_at_the_same_version_is_not_parsed_or_claimed_again(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every 10-20 minutes a Cluster reads its Secret again, to learn whether the manager may
    still read it. The same version holds the same kubeconfig: it is not parsed again, and the
    registry is not asked again for the server it already gave. A new version is parsed, and
    claimed, at once."""
    fake, fleet, options, parsed = _one_cluster_counting_parses(36, monkeypatch)
    reads: list[str] = []
    claims: list[str] = []
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        get, want = manager.context.secret_reads.get, manager.context.registry.want

        async def counted_get(namespace: str, name: str) -> Any:
            reads.append(name)
            return await get(namespace, name)

        async def counted_want(cluster: Any, uid: str, connection: Any, *more: Any) -> None:
            claims.append(connection.server)
            await want(cluster, uid, connection, *more)

        monkeypatch.setattr(manager.context.secret_reads, "get", counted_get)
        monkeypatch.setattr(manager.context.registry, "want", counted_want)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await _until_reason(fake, "c0", "Ready", within=10.0)
            await trio.sleep(3 * 3600.0)
            assert len(reads) >= 1 + 3 * 3600 // (2 * findings.SECRET_REREAD), reads
            assert (len(parsed), claims) == (1, [server(0)])

            moved = server(1)
            text = s.dump(
                s.kubeconfig(
                    cluster={"server": moved, "certificate-authority-data": s.b64(s.ca_pem())},
                    user={"token": "token-c0"},
                )
            )
            secret = await client.get(SECRETS, "c0", namespace=NS)
            secret["data"] = {"value": s.b64(text.encode())}
            await client.replace(SECRETS, secret, namespace=NS)

            async def moved_checks() -> int:
                return len(fleet.asked[moved])

            await wait_for(moved_checks, bool, "a check of the new server", 5.0)
            await trio.sleep(1.0)
            assert (len(parsed), claims) == (2, [server(0), moved])
            nursery.cancel_scope.cancel()


async def test_a_refused_re_read_is_reported_and_the_next_read_parses_again(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-read the hub refuses (the manager's RoleBinding gone, say) reports
    SecretNotReadable and keeps nothing of the read before it: once the Secret is readable
    again the Cluster is Ready again, from a kubeconfig parsed anew."""
    fake, fleet, options, parsed = _one_cluster_counting_parses(37, monkeypatch)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await _until_reason(fake, "c0", "Ready", within=10.0)
            fake.fail(403, times=None, verb="get", resource="secrets", namespace=NS)
            # The next re-read comes within 10-20 minutes and a check after.
            within = 2 * findings.SECRET_REREAD + 2 * options.check_interval
            await _until_reason(fake, "c0", "SecretNotReadable", within=within)
            assert len(parsed) == 1
            fake.clear_faults()
            await _until_reason(fake, "c0", "Ready", within=within)
            assert len(parsed) == 2
            nursery.cancel_scope.cancel()
