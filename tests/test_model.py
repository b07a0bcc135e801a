"""A model test of the actor layer: the real Manager against an API server that fails on command.

Hypothesis drives a state machine whose rules change Clusters, Secrets and Environments, plant
foreign Argo CD Secrets, break the hub in every way ``tests.support.fakeapi.FakeApi`` knows
(refused and failed writes, lost replies, dropped, stalled and expired watches, the hub down)
and kill the manager at any step, its memory gone. The manager is the real one — dispatcher,
Cluster actors, registry, Environments, in-cluster keeper — on the real ``kokumi.kube`` client,
with two stand-ins: the fake hub (trusted because ``tests/support/test_contract.py`` runs the
same assertions against it and the real hub) and a stand-in for the spoke check, whose answer a
rule sets.

Trio runs in a thread of its own under ``MockClock`` (no autojump): between two rules nothing
moves, and a rule that lets time pass jumps the clock from deadline to deadline. Nothing in it
depends on the wall clock or on memory addresses, so one example (or one ``seed_scheduler``
seed of a replay) takes one path every run: each call into the thread returns once the tasks
it woke have run, a worker thread's work runs in its task, long passes checkpoint by the seeded
``random``, the scheduler is seeded from it, deadlines of one moment expire in the order they
were set, and collections wait for the example's end. After every rule
the invariants below must hold; at the end of every example, once faults stop and the clock runs,
everything must converge to what the spec predicts from the objects alone.

Invariants after every step:

- at most one Secret of Kokumi's per server, named after it, never for the in-cluster server;
- no Cluster actor believes it holds a server whose Secret names someone else (unless the
  registry knows that server is out of step and is retrying it);
- a Secret is deleted or handed over from a holder only if that holder stopped wanting the server
  (it was deleted, unselected, re-pointed or broken, or a foreign Secret blocked the server)
  since the Secret last named it: a holder that never stopped is never let go;
- a Secret registers only a Cluster object that an Environment selected at some moment, or that
  the writer's own watches show selected (each watch lags the hub on its own);
- the manager creates, re-specifies or deletes a Cluster only for a ClusterSource: it creates
  only Clusters a source controls, and changes or deletes only Clusters a source controls.

ClusterSources (one per workspace at most, no selector) make Clusters from Cluster API-shaped
Secrets (``<name>-kubeconfig``, labelled, controlled by their Cluster API cluster, which the fake
serves) that rules create, break, strip of their owner and delete; the rule that deletes a source
deletes its Clusters as the garbage collector would (the fake has none). A second kind of source,
``from: Secrets`` (``team``, over Secrets ``<name>-team`` labelled ``kokumi.dev/kubeconfig``, key
``kubeconfig``), follows Secrets that rules write, rotate, break, unlabel and delete, beside the
Cluster API one and in conflict with it over the same names.

At convergence: exactly the servers wanted and not blocked have a Secret, held by one of their
wanters with its current connection; every other wanter reports ClusterConflict; holders carry the
finalizer and Clusters that want no server do not (a waiter keeps one it had); no Cluster is
stuck terminating; each Cluster's Ready reason is the one its objects and its spoke call for; in
each workspace with a source, every Cluster API Secret its cluster controls has the source's
Cluster unless another Cluster of its name is in the way, the source has no Cluster without such
a Secret, and its status counts say so; the same for each team source and its labelled Secrets.

``MODEL_EXAMPLES`` sets the number of examples and ``MODEL_MIN_STEPS`` the steps a run must
count (the soak session runs 2,200 examples and asserts 50,000 steps); the runner, its settings
and its counters are ``tests.support.model``'s, shared with the two-replica model.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import gc
import heapq
import itertools
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from trio._core import _run as trio_run

from kokumi.actors import pace
from kokumi.core import api, limits
from kokumi.core.cluster.status import Outcome
from kokumi.core.environments import selectors
from kokumi.core.fleet import stoprecord
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry import argocd
from kokumi.core.registry.carry import Carry, Carrying
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER, ClusterRef, normalise_server
from kokumi.core.sources import clusterapi
from kokumi.core.sources.plan import kubeconfig_problem
from kokumi.core.sources.spec import (
    CLUSTER_SOURCES,
    SOURCE_LABEL,
    ClusterSource,
    parse_source,
    source_of,
)
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support import model, prediction
from tests.support import strategies as s
from tests.support.fakeapi import CAPI_CLUSTERS, DEFAULT_KINDS, EPOCH, FakeApi
from tests.support.model import SEEN, seed_scheduler

T = TypeVar("T")


OWN = "kokumi"
ARGOCD = "argocd"
WORKSPACES = ("ws1", "ws2")
NAMES = ("a", "b", "c")
SERVERS = ("https://s0.example:6443", "https://s1.example:6443", "https://s2.example:6443/")
TIERS = ("gold", "iron")
TEAM_MARK = {"kokumi.dev/kubeconfig": "true"}
# What the holders' Argo CD Secrets carry: a label and an annotation a user edits on a Cluster
# (``label_cluster``), besides the Environments that select it.
CARRY = Carrying(Carry.parse(["fleet"]), Carry.parse(["example.com/*"]))
FLEETS = (None, "edge", "core")


def cs_parse(obj: dict[str, Any]) -> Any:
    """The team source's shape, as the manager reads it."""
    parsed = parse_source(obj)
    assert isinstance(parsed, ClusterSource), parsed
    return parsed.shape


HUB = "https://hub.example:6443"

EXAMPLES = model.examples(90)


def kubeconfig_text(server: str, token: str) -> str:
    return s.dump(
        s.kubeconfig(
            cluster={"server": server, "certificate-authority-data": s.b64(s.ca_pem())},
            user={"token": token},
        )
    )


_DEADLINES_SET = itertools.count()


def _ordered_deadline_add(self: Any, deadline: float, cancel_scope: Any) -> None:
    """``trio``'s ``Deadlines.add`` with the order a deadline was set as its tie-breaker."""
    heapq.heappush(self._heap, (deadline, next(_DEADLINES_SET), cancel_scope))
    self._active += 1


async def _seeded_tick(self: pace.Pace) -> None:
    """``Pace.tick`` for the model: a checkpoint at one tick in eight, chosen by ``random``."""
    if random.random() < 0.125:
        await trio.lowlevel.checkpoint()


class _BusyLoop(trio.abc.Instrument):
    """Stops the manager when one settle takes millions of task steps: a loop that never blocks
    would otherwise hang the test for ever instead of failing it with the task's name."""

    LIMIT = 300_000

    def __init__(self, world: World) -> None:
        self.world = world
        self.steps: dict[str, int] = {}
        self.total = 0
        self.tripped: str | None = None

    def reset(self) -> None:
        self.steps.clear()
        self.total = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.total += 1
        self.steps[task.name] = self.steps.get(task.name, 0) + 1
        if self.total > self.LIMIT and self.tripped is None:
            top = sorted(self.steps.items(), key=lambda kv: -kv[1])[:3]
            self.tripped = f"a busy loop: {top}"
            if self.world._scope is not None:
                self.world._scope.cancel()


class World:
    """The fake hub, the manager, and a Trio run in a thread that only moves when told."""

    def __init__(self) -> None:
        self.fake = FakeApi(
            kinds=(*DEFAULT_KINDS, CAPI_CLUSTERS),
            namespaces=("default", "kube-system", OWN, ARGOCD, *WORKSPACES),
        )
        self.spokes: dict[str, str] = {normalise_server(server): "ok" for server in SERVERS}
        self.clock = trio.testing.MockClock()
        self.manager: Manager | None = None
        self.crash: BaseException | None = None
        self.observer: Callable[[httpx.Request], None] = lambda request: None
        self.in_flight: dict[str, int] = {}  # Argo CD Secret name -> writes awaiting a reply
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self.busy = _BusyLoop(self)
        # Work handed to worker threads (a kubeconfig parsed off the event loop) would finish in
        # real time, not in Trio's, and the order in which two parses finish would decide a
        # first-come race differently from one replay of a seed to the next (a failure that
        # then does not replay). Here it runs in the task itself, between two checkpoints: to
        # the other tasks it is the same step, taken in the order the seeded scheduler picks.
        self.threads = 0
        self._to_thread = trio.to_thread.run_sync
        trio.to_thread.run_sync = self._inline_thread  # type: ignore[assignment]
        # Long passes checkpoint after 10 ms of real time: a slow moment (a collection, a cold
        # cache) would put other tasks between two of their steps in one run and not the next.
        # Here a pass checkpoints at a tick by the seeded ``random``: the same ticks each replay,
        # and still somewhere in the middle of a pass, as on a loaded manager.
        self._tick = pace.Pace.tick
        pace.Pace.tick = _seeded_tick  # type: ignore[method-assign]
        # The scheduler's order from the seeded ``random`` too (Hypothesis seeds it for every
        # example): an example replays the same, and shrinks instead of turning out flaky.
        trio_run._r.seed(random.getrandbits(64))
        # Deadlines that fall at the same moment (the mock clock makes that common) expire in
        # the order of their scopes' ids, that is of memory addresses, which differ with what
        # ran before in the process: here in the order they were set.
        self._deadline_add = trio_run.Deadlines.add
        trio_run.Deadlines.add = _ordered_deadline_add  # type: ignore[method-assign]
        # A collection, due whenever allocations since the last one add up to a threshold
        # (so at another moment after other work), finalizes httpx's async generators, and
        # Trio closes them in tasks of its own: tasks that come at other moments each run.
        # Off while the world runs; what reference counting does not free goes at its close.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        self._ready.wait()

    # --- the thread ---------------------------------------------------------------------------

    def _main(self) -> None:
        trio.run(self._amain, clock=self.clock, instruments=[self.busy])

    def stamp(self) -> str:
        """Condition and Event times from the mock clock, not the wall: a replay of an example
        then writes the same statuses, so a failure shrinks instead of turning out flaky."""
        moment = EPOCH + datetime.timedelta(seconds=self.clock.current_time())
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    async def _amain(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        self._done = done
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await done.wait()
            nursery.cancel_scope.cancel()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a synchronous function in the Trio thread (the fake is not thread-safe), and
        return once every task it woke has run as far as it can.

        Returning at once would let this thread's next call land while the Trio thread runs
        those tasks, at a moment set by the wall clock: a task it starts changes the batch the
        scheduler shuffles, and a replay of the same seed takes another path. Nothing runs
        between ``fn`` and its return but the tasks it woke (the model notes what ``fn``
        changed inside ``fn``, before any of them).
        """
        if threading.current_thread() is self._thread:
            return fn(*args)

        async def then_settle() -> Any:
            result = fn(*args)
            await self.settle()
            return result

        return trio.from_thread.run(then_settle, trio_token=self._token)

    def arun(self, afn: Callable[..., Any], *args: Any) -> Any:
        """As :meth:`run`, for an async function."""

        async def then_settle() -> Any:
            result = await afn(*args)
            await self.settle()
            return result

        return trio.from_thread.run(then_settle, trio_token=self._token)

    def close(self) -> None:
        if self.manager is not None:
            SEEN["secret_lists"] += self.manager.context.secret_reads.lists
        trio.to_thread.run_sync = self._to_thread
        pace.Pace.tick = self._tick  # type: ignore[method-assign]
        trio_run.Deadlines.add = self._deadline_add  # type: ignore[method-assign]
        if self._thread.is_alive():
            trio.from_thread.run_sync(self._done.set, trio_token=self._token)
            self._thread.join(30)
        if self._gc_was_enabled:
            gc.enable()

    async def _inline_thread(self, fn: Callable[..., T], *args: Any, **_kwargs: Any) -> T:
        """As ``trio.to_thread.run_sync`` without ``abandon_on_cancel``: a cancellation while
        the work runs is not seen until after it, and the result is never lost."""
        await trio.lowlevel.checkpoint()
        self.threads += 1
        try:
            return fn(*args)
        finally:
            self.threads -= 1
            await trio.lowlevel.cancel_shielded_checkpoint()

    # --- the manager --------------------------------------------------------------------------

    async def start_manager(self) -> None:
        assert self._nursery is not None
        transport = _Observed(self.fake, self)
        client = Client(Config(server=HUB), transport=transport, max_retries=0)
        # Two reads of a namespace waiting together make a list of its Secrets (32 in
        # production): the model's few Clusters a namespace take the list path under its faults.
        options = Options(namespace=OWN, argocd_namespace=ARGOCD, secret_list_at=2, carry=CARRY)
        manager = Manager(client, options, check=self._check, check_own=self._check_own)
        scope = trio.CancelScope()
        stopped = trio.Event()
        self.manager, self._scope, self._stopped = manager, scope, stopped

        async def run() -> None:
            try:
                with scope:
                    await manager.run()
            except BaseException as exc:  # reported by the next step
                self.crash = exc
            finally:
                stopped.set()

        self._nursery.start_soon(run)
        await self.settle()

    async def record_stop(self, manager: Manager | None = None) -> None:
        """A stop as on SIGTERM: the manager's stop record (its early checks and its record of next
        checks), while time passes, before :meth:`stop_manager`. It ends within its budget and
        its write's timeout, whatever the hub does. ``manager``: another than this world's own
        (a replica of the two-replica model)."""
        manager = manager or self.manager
        assert manager is not None and self._nursery is not None
        done = trio.Event()

        async def record_stop() -> None:
            try:
                await manager.record_stop()
            finally:
                done.set()

        self._nursery.start_soon(record_stop)
        limit = stoprecord.BUDGET + manager.options.probe_timeout + 1.0
        began = trio.current_time()
        while not done.is_set():
            assert trio.current_time() - began <= limit, "the stop record was not written in time"
            await self.advance(0.5)

    def refuse_record(self, how: int | None) -> None:
        """The next stop record's write cut (0), refused with status ``how``, or left (None)."""
        if how == 0:
            self.run(lambda: self.fake.reset(resource="configmaps", times=1))
        elif how is not None:
            self.run(lambda: self.fake.fail(how, resource="configmaps", times=1))

    async def stop_manager(self) -> None:
        """A crash: the manager's tasks are cancelled wherever they are, and its memory is gone."""
        assert self._scope is not None and self._stopped is not None
        self._scope.cancel()
        await self._stopped.wait()
        if self.manager is not None:
            SEEN["secret_lists"] += self.manager.context.secret_reads.lists
        self.manager = None

    async def _check(
        self,
        connection: Connection,
        *,
        timeout: float,
        egress: object = None,
        cluster_wide: bool = True,
    ) -> Outcome:
        server = normalise_server(connection.server)
        state = self.spokes.get(server, "down")
        if state == "hang":
            await trio.sleep(timeout)
            return Outcome(False, Reason.UNREACHABLE, f"timed out after {timeout:g} s", server)
        if state == "down":
            return Outcome(False, Reason.UNREACHABLE, "connection refused", server)
        return Outcome(True, Reason.READY, "reachable", server, "v1.36.3")

    async def _check_own(self, client: Client, *, timeout: float) -> Outcome:
        return Outcome(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")

    # --- time ---------------------------------------------------------------------------------

    async def settle(self) -> None:
        self.busy.reset()
        await trio.testing.wait_all_tasks_blocked()
        while self.threads:
            time.sleep(0.0002)  # noqa: ASYNC251 - blocks Trio on purpose: the thread runs meanwhile
            await trio.testing.wait_all_tasks_blocked()
        if self.busy.tripped is not None:
            raise AssertionError(self.busy.tripped)

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass, stopping at every deadline on the way so that each one fires."""
        target = trio.current_time() + seconds
        for _ in range(100_000):
            await self.settle()
            now = trio.current_time()
            if now >= target:
                return
            ahead = trio.lowlevel.current_statistics().seconds_to_next_deadline
            self.clock.jump(min(max(ahead, 0.0), target - now) or min(0.001, target - now))
        raise AssertionError("time did not advance: something never blocks")


def _refused_as_stale(request: httpx.Request, current: dict[str, Any]) -> bool:
    """Whether a PUT or DELETE names a resourceVersion the object no longer has: the API server
    (and the fake) refuses it with 409, so it changes nothing, whatever it would have written.

    A replica writes on what it saw last; when another replica wrote meanwhile, its write is
    refused, it reads again and plans anew. Seed 1007 of the two-replica test: a refused PUT
    that would have handed a server back was taken for a handover.
    """
    body = json.loads(request.content) if request.content else {}
    meta = current["metadata"]
    if request.method == "PUT":
        sent = (body.get("metadata") or {}).get("resourceVersion")
        return bool(sent) and sent != meta.get("resourceVersion")
    preconditions = body.get("preconditions") or {}
    return any(
        preconditions.get(field) and preconditions[field] != meta.get(field)
        for field in ("uid", "resourceVersion")
    )


class _Observed(httpx.AsyncBaseTransport):
    """The fake hub, with the model's eye on every request before the fake sees it."""

    def __init__(self, fake: FakeApi, world: World) -> None:
        self._fake = fake
        self._world = world

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._world.observer(request)
        name = _argocd_secret_written(request)
        if name is None:
            return await self._fake.handle_async_request(request)
        # A write to Argo CD's Secrets whose reply has not come back (a slow hub): the fake may
        # have done it already while the registry cannot know yet.
        in_flight = self._world.in_flight
        in_flight[name] = in_flight.get(name, 0) + 1
        try:
            return await self._fake.handle_async_request(request)
        finally:
            in_flight[name] -= 1
            if not in_flight[name]:
                del in_flight[name]


def _argocd_secret_written(request: httpx.Request) -> str | None:
    path = request.url.path
    if request.method not in ("POST", "PUT", "PATCH", "DELETE"):
        return None
    if path.endswith(f"/namespaces/{ARGOCD}/secrets") and request.method == "POST":
        name: str = json.loads(request.content)["metadata"]["name"]
        return name
    if f"/namespaces/{ARGOCD}/secrets/" in path:
        return path.rsplit("/", 1)[1]
    return None


def _selected_in_view(manager: Manager, uid: str) -> bool:
    """Whether the manager's own watches show the Cluster object ``uid`` selected.

    Each watch lags the hub on its own: after a stall, the Clusters watch may bring a Cluster
    made a moment ago while the Environments watch still shows an Environment as it was before
    it changed. An Environment then selects, in the manager's view, a Cluster it never selected
    on the hub; acting on the view is what a controller does, and the next event of the late
    watch puts it right (the model's convergence checks that). Holding the manager to the hub's
    moments alone would fail it for that; holding it to its own view still fails a Cluster that
    inherits its predecessor's selection, which is what this check is for.
    """
    found = [
        obj for obj in manager.dispatcher.clusters.values() if obj["metadata"].get("uid") == uid
    ]
    if not found:
        return False
    meta = found[0]["metadata"]
    labels = meta.get("labels") or {}
    for env in manager.dispatcher.environments.in_namespace(meta["namespace"]):
        parsed = api.parse_environment(env)
        if isinstance(parsed, api.Environment):
            selector = selectors.parse(parsed.spec.cluster_selector)
            if isinstance(selector, selectors.Selector) and selector.matches(labels):
                return True
    return False


class ManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self._wall_clock = api.now_rfc3339
        api.now_rfc3339 = self.world.stamp
        self.world.observer = self._observe
        # (holder, server) pairs whose Secret may be let go: the holder stopped wanting it since
        # the Secret last named it.
        self.may_let_go: set[tuple[ClusterRef, str]] = set()
        self.violations: list[str] = []
        # uids of Cluster objects that some Environment selected at some moment of their life:
        # nothing may ever register a Cluster object outside this set.
        self.ever_selected: set[str] = set()
        self.history: list[str] = []  # the rules run so far, for a failure that will not replay
        self.tokens = 0

    def teardown(self) -> None:
        try:
            if self.world.manager is not None and self.world.crash is None:
                self.converge()
        finally:
            self.close()

    def close(self) -> None:
        """End the Trio thread and give the API its wall clock back (an example test's end)."""
        self.world.close()
        api.now_rfc3339 = self._wall_clock

    def converges_cleanly(self) -> None:
        """No violation so far, then convergence, and none on the way there either."""
        assert self.violations == [], self.violations
        self.converge()
        assert self.violations == [], self.violations

    # --- objects, as the test writes them ------------------------------------------------------

    def _put(self, obj: dict[str, Any]) -> None:
        """Write as a user would; the model notes at once, before any manager task runs, which
        holders this change makes stop wanting their server (the Trio thread runs whatever is
        runnable as soon as a call into it returns)."""

        def put() -> None:
            # Before too: a Cluster the manager made (a ClusterSource's) is seen selected here
            # if this write is what ends its selection.
            self._note_selected()
            self.world.fake.put(obj)
            self._mark_stopped_wanting()
            self._note_selected()

        self.world.run(put)

    def _delete(self, resource: Any, name: str, namespace: str) -> None:
        """Delete as a user would: finalizers hold the object as usual."""

        def remove() -> None:
            self._note_selected()
            self.world.fake.remove(resource, name, namespace)
            self._mark_stopped_wanting()
            self._note_selected()

        self.world.run(remove)

    def _object(self, resource: Any, name: str, namespace: str | None) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.world.run(
            self.world.fake.object, resource, name, namespace
        )
        return found

    def _objects(self, resource: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.world.run(self.world.fake.objects, resource, namespace)
        return found

    def _step(self) -> None:
        caller = sys._getframe(1)
        args = {k: v for k, v in caller.f_locals.items() if k != "self" and not k.startswith("_")}
        self.history.append(f"{caller.f_code.co_name}({args})")
        SEEN["steps"] += 1
        if self.world.crash is not None:
            raise AssertionError("the manager crashed") from self.world.crash
        self._collect_garbage()
        self.world.arun(self.world.settle)
        if self.world.crash is not None:
            raise AssertionError("the manager crashed") from self.world.crash

    # --- rules --------------------------------------------------------------------------------

    @initialize(
        layout=st.lists(
            st.tuples(
                st.sampled_from(WORKSPACES), st.sampled_from(NAMES), st.sampled_from(SERVERS)
            ),
            min_size=2,
            max_size=5,
        ),
        before=st.booleans(),
        sourced=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(SERVERS)), max_size=3),
        team=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(SERVERS)), max_size=3),
    )
    def start(
        self,
        layout: list[tuple[str, str, str]],
        before: bool,
        sourced: list[tuple[str, str]] = [],  # noqa: B006 (never mutated)
        team: list[tuple[str, str]] = [],  # noqa: B006 (never mutated)
    ) -> None:
        """Environments that select every Cluster and a few Clusters sharing servers, so that
        each example starts with holders and waiters; created before or after the manager."""
        if not before:
            self.world.arun(self.world.start_manager)
        for ns in WORKSPACES:
            self._put(
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "Environment",
                    "metadata": {"name": "env", "namespace": ns},
                    "spec": {"clusterSelector": {}},
                }
            )
        for ns, name, server in layout:
            self._put_kubeconfig(ns, name, server, None)
            self._put_cluster(ns, name, TIERS[0], in_cluster=False)
            if not before:
                self.world.arun(self.world.settle)
        if sourced:
            # A ClusterSource in ws2 and Cluster API Secrets for it: some names are taken by
            # the layout's hand-made Clusters there.
            self._put(
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "ClusterSource",
                    "metadata": {"name": "capi", "namespace": "ws2"},
                    "spec": {"from": "ClusterAPI", "labels": {"tier": TIERS[0]}},
                }
            )
            for name, server in sourced:
                self._put_capi_secret("ws2", name, server, None)
        if team:
            # A team's source of labelled Secrets in ws1, beside its hand-made Clusters.
            self.put_team_source("ws1", TIERS[0])
            for name, server in team:
                self.put_team_secret("ws1", name, server, True, None)
        if before:
            self.world.arun(self.world.start_manager)
        self._step()

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        tier=st.sampled_from(TIERS),
        in_cluster=st.booleans(),
    )
    def put_cluster(self, ns: str, name: str, tier: str, in_cluster: bool) -> None:
        self._put_cluster(ns, name, tier, in_cluster)
        self._step()

    def _put_cluster(self, ns: str, name: str, tier: str, in_cluster: bool) -> None:
        existing = self._object(api.CLUSTERS, name, ns)
        spec: dict[str, Any] = (
            {"connection": "InCluster"}
            if in_cluster
            else {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": f"{name}-kc"}}}
        )
        body = existing or {
            "apiVersion": api.API_VERSION,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns},
        }
        body["metadata"]["labels"] = {"tier": tier}
        body["spec"] = spec
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            return  # terminating: an update could not change that
        self._put(body)

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        fleet=st.sampled_from(FLEETS),
        owner=st.sampled_from(FLEETS),
    )
    def label_cluster(self, ns: str, name: str, fleet: str | None, owner: str | None) -> None:
        """A user edits only a Cluster's metadata: a carried label and a carried annotation,
        which its Argo CD Secret follows in place while it holds (a write refused meanwhile
        converges to what the holder carries then)."""
        existing = self._object(api.CLUSTERS, name, ns)
        if existing is not None and not existing["metadata"].get("deletionTimestamp"):
            meta = existing["metadata"]
            labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != "fleet"}
            meta["labels"] = labels if fleet is None else {**labels, "fleet": fleet}
            found = meta.get("annotations") or {}
            annotations = {k: v for k, v in found.items() if k != "example.com/owner"}
            if owner is not None:
                annotations["example.com/owner"] = owner
            meta["annotations"] = annotations
            self._put(existing)
        self._step()

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        how=st.sampled_from(("spec", "labels")),
    )
    def invalidate_cluster(self, ns: str, name: str, how: str = "spec") -> None:
        """A spec the schema would refuse (written before a schema change), or labels over the
        bounds of tenant metadata (written while the admission policy was off): an Invalid
        Cluster (InvalidSpec, ObjectTooLarge), perhaps one that holds a server and carries the
        finalizer. ``put_cluster`` brings it back."""
        existing = self._object(api.CLUSTERS, name, ns)
        if existing is not None and not existing["metadata"].get("deletionTimestamp"):
            if how == "spec":
                existing["spec"] = {"connection": "Kubeconfig"}
            else:
                labels = existing["metadata"].get("labels") or {}
                filler = {f"x{i}": "y" for i in range(limits.LABELS_MAX + 1 - len(labels))}
                existing["metadata"]["labels"] = {**labels, **filler}
            self._put(existing)
        self._step()

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        refused=st.sampled_from((None, None, None, 403, 500, 0)),
    )
    def delete_cluster(self, ns: str, name: str, refused: int | None = None) -> None:
        """Deleted as a user would; perhaps with the next deletes in Argo CD's namespace (the
        release of its Secret) refused or cut, which must keep it Terminating until done."""
        fake = self.world.fake
        if refused == 0:
            self.world.run(lambda: fake.reset(verb="delete", namespace=ARGOCD, times=2))
        elif refused is not None:
            self.world.run(lambda: fake.fail(refused, verb="delete", namespace=ARGOCD, times=2))
        self._delete(api.CLUSTERS, name, ns)
        self._step()

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        server=st.sampled_from(SERVERS),
        broken=st.sampled_from([None, None, None, "not: [yaml", "exec"]),
    )
    def put_kubeconfig(self, ns: str, name: str, server: str, broken: str | None) -> None:
        self._put_kubeconfig(ns, name, server, broken)
        self._step()

    def _put_kubeconfig(self, ns: str, name: str, server: str, broken: str | None) -> None:
        self.tokens += 1
        text = kubeconfig_text(server, f"token-{self.tokens}")
        if broken == "exec":
            document = s.kubeconfig(cluster={"server": server})
            document["users"][0]["user"] = {"exec": {"command": "aws", "apiVersion": "x"}}
            text = s.dump(document)
        elif broken is not None:
            text = broken
        self._put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{name}-kc", "namespace": ns},
                "data": {"value": base64.b64encode(text.encode()).decode()},
            }
        )

    @rule(ns=st.sampled_from(WORKSPACES), name=st.sampled_from(NAMES))
    def delete_kubeconfig(self, ns: str, name: str) -> None:
        self._delete(SECRETS, f"{name}-kc", ns)
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES), tier=st.sampled_from(TIERS))
    def put_source(self, ns: str, tier: str) -> None:
        """A ClusterSource that labels its Clusters with a tier, so Environments select them."""
        existing = self._object(CLUSTER_SOURCES, "capi", ns)
        body = existing or {
            "apiVersion": api.API_VERSION,
            "kind": "ClusterSource",
            "metadata": {"name": "capi", "namespace": ns},
        }
        body["spec"] = {"from": "ClusterAPI", "labels": {"tier": tier}}
        self._put(body)
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES))
    def delete_source(self, ns: str) -> None:
        """The source goes, and the garbage collector deletes the Clusters it controls."""
        if self._object(CLUSTER_SOURCES, "capi", ns) is not None:
            self._delete(CLUSTER_SOURCES, "capi", ns)
        self._step()

    def _collect_garbage(self) -> None:
        """As the garbage collector does, whenever it runs: a Cluster whose controlling
        ClusterSource no longer exists is deleted (a create in flight when the source went
        lands after the source's deletion, and is collected then, too)."""
        live = {
            (obj["metadata"]["namespace"], obj["metadata"]["uid"])
            for obj in self._objects(CLUSTER_SOURCES)
        }
        for obj in self._objects(api.CLUSTERS):
            meta = obj["metadata"]
            owner = source_of(obj)
            gone = owner is not None and (meta["namespace"], owner[1]) not in live
            if gone and not meta.get("deletionTimestamp"):
                self._delete(api.CLUSTERS, meta["name"], meta["namespace"])

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        server=st.sampled_from(SERVERS),
        broken=st.sampled_from([None, None, "exec", "no value", "unowned"]),
    )
    def put_capi_secret(self, ns: str, name: str, server: str, broken: str | None) -> None:
        """Cluster API writes (or rotates) a cluster's kubeconfig Secret; or, ``unowned``,
        somebody who may write Secrets writes one by its name and label, without its owner."""
        self._put_capi_secret(ns, name, server, broken)
        self._step()

    def _put_capi_secret(self, ns: str, name: str, server: str, broken: str | None) -> None:
        """The Secret as Cluster API writes it: its cluster exists and controls it (unless
        ``unowned``)."""
        capi = self._object(clusterapi.CAPI_CLUSTERS, name, ns)
        if capi is None:
            self._put(
                {
                    "apiVersion": clusterapi.CAPI_CLUSTERS.api_version,
                    "kind": "Cluster",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {},
                }
            )
            capi = self._object(clusterapi.CAPI_CLUSTERS, name, ns)
            assert capi is not None
        owner = {
            "apiVersion": clusterapi.CAPI_CLUSTERS.api_version,
            "kind": "Cluster",
            "name": name,
            "uid": capi["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        self.tokens += 1
        text = kubeconfig_text(server, f"token-{self.tokens}")
        if broken == "exec":
            document = s.kubeconfig(cluster={"server": server})
            document["users"][0]["user"] = {"exec": {"command": "aws", "apiVersion": "x"}}
            text = s.dump(document)
        data = {} if broken == "no value" else {"value": base64.b64encode(text.encode()).decode()}
        self._put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"{name}-kubeconfig",
                    "namespace": ns,
                    "labels": {clusterapi.CAPI_CLUSTER_NAME: name},
                    "ownerReferences": [] if broken == "unowned" else [owner],
                },
                "data": data,
            }
        )

    @rule(ns=st.sampled_from(WORKSPACES), name=st.sampled_from(NAMES))
    def delete_capi_secret(self, ns: str, name: str) -> None:
        self._delete(SECRETS, f"{name}-kubeconfig", ns)
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES), tier=st.sampled_from(TIERS))
    def put_team_source(self, ns: str, tier: str) -> None:
        """A from: Secrets source of a team's labelled Secrets <name>-team, key kubeconfig."""
        existing = self._object(CLUSTER_SOURCES, "team", ns)
        body = existing or {
            "apiVersion": api.API_VERSION,
            "kind": "ClusterSource",
            "metadata": {"name": "team", "namespace": ns},
        }
        body["spec"] = {
            "from": "Secrets",
            "secretSelector": {"matchLabels": TEAM_MARK},
            "key": "kubeconfig",
            "naming": {"trimSuffix": "-team"},
            "labels": {"tier": tier},
        }
        self._put(body)
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES))
    def delete_team_source(self, ns: str) -> None:
        if self._object(CLUSTER_SOURCES, "team", ns) is not None:
            self._delete(CLUSTER_SOURCES, "team", ns)
        self._step()

    @rule(
        ns=st.sampled_from(WORKSPACES),
        name=st.sampled_from(NAMES),
        server=st.sampled_from(SERVERS),
        labelled=st.sampled_from([True, True, False]),
        broken=st.sampled_from([None, None, "exec"]),
    )
    def put_team_secret(
        self, ns: str, name: str, server: str, labelled: bool, broken: str | None
    ) -> None:
        """A team writes, rotates or unlabels its kubeconfig Secret <name>-team."""
        self.tokens += 1
        text = kubeconfig_text(server, f"token-{self.tokens}")
        if broken == "exec":
            document = s.kubeconfig(cluster={"server": server})
            document["users"][0]["user"] = {"exec": {"command": "aws", "apiVersion": "x"}}
            text = s.dump(document)
        self._put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"{name}-team",
                    "namespace": ns,
                    "labels": dict(TEAM_MARK) if labelled else {},
                },
                "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
            }
        )
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES), name=st.sampled_from(NAMES))
    def delete_team_secret(self, ns: str, name: str) -> None:
        self._delete(SECRETS, f"{name}-team", ns)
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES), tier=st.sampled_from((None, *TIERS)))
    def put_environment(self, ns: str, tier: str | None) -> None:
        selector = {} if tier is None else {"matchLabels": {"tier": tier}}
        existing = self._object(api.ENVIRONMENTS, "env", ns)
        body = existing or {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": "env", "namespace": ns},
        }
        body["spec"] = {"clusterSelector": selector}
        self._put(body)
        self._step()

    @rule(ns=st.sampled_from(WORKSPACES))
    def delete_environment(self, ns: str) -> None:
        self._delete(api.ENVIRONMENTS, "env", ns)
        self._step()

    @rule(server=st.sampled_from(SERVERS), by_name=st.booleans())
    def plant_foreign(self, server: str, by_name: bool) -> None:
        """A cluster Secret Kokumi did not write, by the name Kokumi would use or by its server."""
        normal = normalise_server(server)
        name = argocd.secret_name(normal) if by_name else f"foreign-{argocd.server_hash(normal)}"
        if by_name and self._object(SECRETS, name, ARGOCD) is not None:
            self._step()
            return  # ours stands there: Argo CD users cannot plant over it either
        self._put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": ARGOCD,
                    "labels": {argocd.LABEL_SECRET_TYPE: "cluster"},
                },
                "data": {"server": base64.b64encode(normal.encode()).decode()},
            }
        )
        if any(wanted == normal for wanted, _ in self.wants().values()):
            SEEN["blocked"] += 1  # a server somebody wants is blocked now, whatever comes next
        self._step()

    @rule(server=st.sampled_from(SERVERS))
    def plant_stray(self, server: str) -> None:
        """A Secret labelled as Kokumi's but named after no server (a move cut short by hand):
        the registry deletes it at its next start, and a refused delete must not stop it."""
        normal = normalise_server(server)
        self._put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"kokumi-stray-{argocd.server_hash(normal)[:6]}",
                    "namespace": ARGOCD,
                    "labels": {
                        argocd.LABEL_SECRET_TYPE: "cluster",
                        argocd.LABEL_MANAGED_BY: argocd.MANAGED_BY,
                    },
                },
                "data": {"server": base64.b64encode(normal.encode()).decode()},
            }
        )
        self._step()

    @rule(server=st.sampled_from(SERVERS))
    def remove_foreign(self, server: str) -> None:
        normal = normalise_server(server)
        for name in (argocd.secret_name(normal), f"foreign-{argocd.server_hash(normal)}"):
            found = self._object(SECRETS, name, ARGOCD)
            if found is not None and not argocd.is_ours(found):
                self._delete(SECRETS, name, ARGOCD)
        self._step()

    @rule(server=st.sampled_from(SERVERS), state=st.sampled_from(("ok", "down", "hang")))
    def spoke(self, server: str, state: str) -> None:
        self.world.spokes[normalise_server(server)] = state
        self._step()

    @rule(
        verb=st.sampled_from(("create", "update", "patch", "delete", "get", "list")),
        resource=st.sampled_from(("secrets", "clusters", "environments", "events")),
        status=st.sampled_from((403, 409, 429, 500, 503, 0, -1)),
        times=st.integers(1, 4),
    )
    def fault(self, verb: str, resource: str, status: int, times: int) -> None:
        """The next requests of a kind fail: refused, conflicting, or the connection cut."""
        SEEN["faults"] += 1
        fake = self.world.fake
        if status == 0:
            self.world.run(lambda: fake.reset(verb=verb, resource=resource, times=times))
        elif status == -1:
            self.world.run(
                lambda: fake.reset(after=True, verb=verb, resource=resource, times=times)
            )
        else:
            self.world.run(lambda: fake.fail(status, verb=verb, resource=resource, times=times))
        self._step()

    @rule(seconds=st.sampled_from((0.5, 3.0, 11.0)))
    def slow_hub(self, seconds: float) -> None:
        self.world.run(lambda: self.world.fake.delay(seconds, times=3))
        self._step()

    @rule(how=st.sampled_from(("drop", "stall", "expire", "compact")))
    def watch_fault(self, how: str) -> None:
        fake = self.world.fake
        if how == "drop":
            self.world.run(fake.drop_watches)
        elif how == "stall":
            self.world.run(fake.stall_watches)
        elif how == "expire":
            self.world.run(lambda: fake.expire_next_watches(2))
            self.world.run(fake.drop_watches)
        else:
            self.world.run(fake.compact)
            self.world.run(fake.drop_watches)
        self._step()

    @rule(down=st.booleans())
    def hub(self, down: bool) -> None:
        if down:
            self.world.run(lambda: setattr(self.world.fake, "down", True))
        else:
            self.world.run(self.world.fake.restart)
        self._step()

    @rule(refused=st.sampled_from((None, None, 403, 500, 0)), graceful=st.booleans())
    def restart_manager(self, refused: int | None, graceful: bool) -> None:
        """A crash and a new start, its memory gone; perhaps with the start-up's clean-up of
        Argo CD's Secrets refused or cut (it must be retried, never end the manager). Or a stop
        as on SIGTERM: the stop record first, its write refused or cut as well."""
        SEEN["restarts"] += 1
        fake = self.world.fake
        if graceful:
            SEEN["stop_records"] += 1
            self.world.refuse_record(refused)
            self.world.arun(self.world.record_stop)
        self.world.arun(self.world.stop_manager)
        if refused == 0:
            self.world.run(lambda: fake.reset(verb="delete", namespace=ARGOCD, times=2))
        elif refused is not None:
            self.world.run(lambda: fake.fail(refused, verb="delete", namespace=ARGOCD, times=2))
        self.world.arun(self.world.start_manager)
        self._step()

    @rule(seconds=st.sampled_from((1.0, 5.0, 31.0, 75.0)))
    def time_passes(self, seconds: float) -> None:
        self.world.arun(self.world.advance, seconds)
        self._step()

    # --- what the objects call for ------------------------------------------------------------

    def objects(self) -> prediction.Objects:
        """The objects the outcome depends on, for the shared predictor."""
        secrets = {
            (obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
            for ns in WORKSPACES
            for obj in self._objects(SECRETS, ns)
        }
        return prediction.Objects(
            clusters=self._objects(api.CLUSTERS),
            environments=self._objects(api.ENVIRONMENTS),
            secrets=secrets,
            argocd_secrets=self._objects(SECRETS, ARGOCD),
            argocd_namespace=ARGOCD,
        )

    def wants(self) -> dict[ClusterRef, tuple[str, Connection]]:
        """Each Cluster that should hold or wait for a server now, per the objects alone."""
        return prediction.wants(self.objects())

    def blocked(self) -> set[str]:
        """Servers a Secret that Kokumi did not write registers, or whose name it takes."""
        return prediction.blocked(self.objects(), SERVERS)

    def _note_selected(self) -> None:
        """Record the Cluster objects an Environment selects now, whatever their kubeconfig: on
        the hub, and in the view of the manager whose request is being observed.

        A CI run (seed 330208056840248148701741859927561286003): a restarted manager, its
        watches not yet caught up after the hub restarted, still saw both Environments when
        they were already deleted; the ClusterSource made ws2/a then, and ws2/a joined s0's
        line, a claim made while its manager's view selected it. The view caught up, the holder
        let go first and the registry handed s0 to ws2/a, whose own release was still on its
        way: selected on the hub at no moment, but in the view at the moment it claimed, which
        is what a controller acts on (the Secret went at once). A Cluster that inherits its
        predecessor's selection is selected in no view, and is still caught."""
        manager = self.world.manager
        if manager is not None:
            for obj in manager.dispatcher.clusters.values():
                uid = obj["metadata"].get("uid")
                fresh = uid is not None and uid not in self.ever_selected
                if fresh and _selected_in_view(manager, uid):
                    self.ever_selected.add(uid)
        environments: dict[str, list[selectors.Selector]] = {}
        for env in self.world.fake.objects(api.ENVIRONMENTS):
            parsed = api.parse_environment(env)
            if isinstance(parsed, api.Environment):
                selector = selectors.parse(parsed.spec.cluster_selector)
                if isinstance(selector, selectors.Selector):
                    environments.setdefault(parsed.metadata.namespace, []).append(selector)
        for obj in self.world.fake.objects(api.CLUSTERS):
            meta = obj["metadata"]
            labels = meta.get("labels") or {}
            if any(sel.matches(labels) for sel in environments.get(meta["namespace"], ())):
                self.ever_selected.add(meta["uid"])

    def _check_acts_for(self, holder: ClusterRef, verb: str, name: str) -> None:
        """A write that names ``holder`` acts for a Cluster object an Environment selected, and
        for the object the manager knows to be the live one of that name (items: a Cluster
        created again must not inherit its predecessor's selection or claim)."""
        manager = self.world.manager
        # A ClusterSource's Clusters are made by the manager, not by a rule: note what selects
        # them now too.
        self._note_selected()
        obj = self.world.fake.object(api.CLUSTERS, holder.name, holder.namespace)
        if manager is None or obj is None:
            return  # deleted meanwhile: the manager acts on a view a moment old
        uid = obj["metadata"]["uid"]
        claim = manager.registry._memory.claims.get(holder)
        if claim == uid and uid not in self.ever_selected and not _selected_in_view(manager, uid):
            self.violations.append(
                f"{verb} of Secret {name} registers {holder} (uid {uid}), which no Environment "
                "ever selected"
            )
        if claim is not None and claim != uid and manager.dispatcher.is_current(holder, uid):
            self.violations.append(
                f"{verb} of Secret {name} registers {holder} for its old object {claim}, though "
                f"the manager already knows the live one, {uid}"
            )

    def _check_finalizer_write(self, request: httpx.Request) -> None:
        """Our finalizer leaves a Cluster only once no Secret of Kokumi's names it."""
        parts = request.url.path.rstrip("/").split("/")
        if request.method not in ("PATCH", "PUT") or "clusters" not in parts[-2:-1]:
            return
        namespace, name = parts[-3], parts[-1]
        current = self.world.fake.object(api.CLUSTERS, name, namespace)
        if current is None or api.FINALIZER not in (current["metadata"].get("finalizers") or []):
            return
        finalizers = _finalizers_set(json.loads(request.content), current)
        if finalizers is None or api.FINALIZER in finalizers:
            return
        ref = ClusterRef(namespace, name)
        for secret_name, secret in self.ours().items():
            if argocd.holder_of(secret) == ref:
                self.violations.append(
                    f"{ref}'s finalizer was removed while Secret {secret_name} still names it"
                )

    def _check_source_write(self, request: httpx.Request) -> None:
        """The manager creates, re-specifies or deletes only Clusters a ClusterSource controls;
        what such a write does to what the Cluster wants is the source's doing, so any release
        of that Cluster's server is allowed from then on."""
        parts = request.url.path.rstrip("/").split("/")
        if "clusters" not in parts or parts[1] != "apis" or parts[2] != api.GROUP:
            return
        at = parts.index("clusters")
        if len(parts) > at + 2:
            return  # a subresource: the status
        namespace = parts[at - 1]
        if namespace not in WORKSPACES:
            return  # the in-cluster keeper's own Cluster
        body = json.loads(request.content) if request.content else {}
        if request.method == "POST":
            if source_of(body) is None:
                self.violations.append(f"created Cluster {namespace}/? without a source: {body}")
            return
        if len(parts) != at + 2:
            return
        name = parts[at + 1]
        if request.method not in ("PATCH", "DELETE") or (
            request.method == "PATCH" and not model.sets_spec(body)
        ):
            return  # a read, or the finalizer
        current = self.world.fake.object(api.CLUSTERS, name, namespace)
        if current is not None and source_of(current) is None:
            self.violations.append(
                f"{request.method} of Cluster {namespace}/{name}, which no ClusterSource controls"
            )
        for server in SERVERS:
            self.may_let_go.add((ClusterRef(namespace, name), normalise_server(server)))

    def ours(self) -> dict[str, dict[str, Any]]:
        return prediction.ours(self.objects())

    def _mark_stopped_wanting(self) -> None:
        """Note which (Cluster, server) pairs may now be let go: the Cluster does not want the
        server at this moment. Every pair is noted, not only those a Secret names now: a write
        in flight (a slow hub) may name a Cluster only once it has already stopped wanting."""
        wants = self.wants()
        blocked = self.blocked()
        for ns in WORKSPACES:
            for name in NAMES:
                ref = ClusterRef(ns, name)
                for server in SERVERS:
                    normal = normalise_server(server)
                    if wants.get(ref, ("", None))[0] != normal or normal in blocked:
                        self.may_let_go.add((ref, normal))

    def _deselected_in_view(self, holder: ClusterRef) -> bool:
        """Whether the writing manager's own watches show ``holder`` selected by nothing now.

        Seed 528 of a flake run: an Environment was deleted and made again while the hub was
        slow. The Environments watch brought the deletion, the Secret watch the Cluster's new
        server; the Cluster's actor, not yet told of the deletion, claimed the new server (a
        Secret for a holder its manager's view selects with nothing), then heard of it (true on
        the hub between the two) and let go, and claimed again once the new Environment came.
        A controller acts on its view, news by news; the Secret is made again at once, and the
        convergence checks the end. Without a manager (between two), nothing is excused."""
        manager = self.world.manager
        if manager is None:
            return False
        obj = manager.dispatcher.clusters.get(holder.namespace, holder.name)
        return obj is not None and not _selected_in_view(manager, obj["metadata"]["uid"])

    def _release_on_its_way(self, holder: ClusterRef) -> bool:
        """Whether the writing manager's own actor of ``holder`` has heard that nothing selects
        it (its release is then on its way to the registry, behind what the registry is doing).

        A soak run: an Environment deleted and made again at once. The holder's release reached
        the registry first, which handed the server to the next in its line, whose own release,
        for the same deletion, was still in the inbox; the registry then let go of it too, and
        both claimed again once they heard of the new Environment. On the hub the waiter had
        wanted the server again before the handover named it, but the manager acted on news in
        the order it came; the Secret is made again at once, and the convergence checks the end.
        """
        manager = self.world.manager
        if manager is None:
            return False
        return any(
            actor.ref == holder and actor.state.selected is False
            for actor in manager.dispatcher.actors
        )

    def _observe(self, request: httpx.Request) -> None:
        """Before the fake handles a write to an Argo CD Secret: may its holder be let go?"""
        # What the last request changed (a Cluster a ClusterSource made, selected from the
        # start) is noted before anything can end its selection.
        self._note_selected()
        path = request.url.path
        self._check_finalizer_write(request)
        self._check_source_write(request)
        if f"/namespaces/{ARGOCD}/secrets/" not in path or request.method not in ("PUT", "DELETE"):
            if f"/namespaces/{ARGOCD}/secrets" in path and request.method == "POST":
                body = json.loads(request.content)
                holder = argocd.holder_of(body)
                server = argocd.server_of(body)
                if holder is not None:
                    self._check_acts_for(holder, "POST", body["metadata"]["name"])
                if holder is not None and server is not None:
                    # A Secret for a holder that already stopped wanting (the manager acting
                    # on a view a moment old) may go again; else it now names a real holder.
                    # So may one for a holder the writer's own view selects with nothing: the
                    # news of a deselection is on its way to the holder's actor.
                    if not self._deselected_in_view(holder) and not self._release_on_its_way(
                        holder
                    ):
                        self.may_let_go.discard((holder, normalise_server(server)))
                    self._mark_stopped_wanting()
            return
        name = path.rsplit("/", 1)[1]
        current = self.world.fake.object(SECRETS, name, ARGOCD)
        if current is None or not argocd.is_ours(current):
            return
        holder = argocd.holder_of(current)
        server = argocd.server_of(current)
        if holder is None or server is None:
            return
        if _refused_as_stale(request, current):
            return  # the fake answers 409 and changes nothing: nobody is let go
        server = normalise_server(server)
        new_holder = None
        if request.method == "PUT":
            new_holder = argocd.holder_of(json.loads(request.content))
        if new_holder == holder:
            return  # the same holder: a copied kubeconfig or a new waiting order
        if new_holder is not None:
            self._check_acts_for(new_holder, "PUT", name)
        if (holder, server) not in self.may_let_go:
            self.violations.append(
                f"{request.method} of Secret {name} let go of {holder}, which never stopped "
                f"wanting {server}"
            )
        if new_holder is not None:
            # Handed to a Cluster that may itself have stopped wanting meanwhile (both let go
            # in one change; the registry hears of them one after the other).
            if not self._release_on_its_way(new_holder):
                self.may_let_go.discard((new_holder, server))
            self._mark_stopped_wanting()

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def nothing_let_go_early(self) -> None:
        assert self.violations == [], "\n".join([*self.violations, "after:", *self.history])

    @invariant()
    def one_secret_per_server_named_after_it(self) -> None:
        seen: set[str] = set()
        for name, secret in self.ours().items():
            server = argocd.server_of(secret)
            if server is None or argocd.holder_of(secret) is None:
                continue  # a stray, which the registry deletes at its next start
            normal = normalise_server(server)
            assert name == argocd.secret_name(normal), f"{name} is not named after {server}"
            assert normal != IN_CLUSTER_SERVER
            assert normal not in seen
            seen.add(normal)

    @invariant()
    def no_false_holder(self) -> None:
        manager = self.world.manager
        if manager is None:
            return
        out_of_step = manager.registry.out_of_step()
        ours = self.ours()
        for actor in manager.dispatcher.actors:
            registration = actor.state.registration
            if not registration.holding or registration.server is None:
                continue
            if registration.conflict is not None:
                # Waiting for (or refused) the server it wants, while a Secret of an earlier
                # server still names it (a release not done yet): that Secret is what it holds.
                named = [s for s in ours.values() if argocd.holder_of(s) == actor.ref]
                unsure = out_of_step or self.world.in_flight
                assert named or unsure, f"{actor.ref} believes a Secret names it; none does"
                continue
            if registration.server in out_of_step:
                continue
            if argocd.secret_name(registration.server) in self.world.in_flight:
                continue  # the registry has not heard back yet: it tells the Cluster then
            secret = ours.get(argocd.secret_name(registration.server))
            holder = argocd.holder_of(secret) if secret is not None else None
            assert holder == actor.ref, (
                f"{actor.ref} believes it holds {registration.server}, whose Secret names {holder}"
            )

    # --- convergence --------------------------------------------------------------------------

    def converge(self) -> None:
        """Faults stop and the clock runs: first with the watches merely resumed, so that only
        the manager's own retries can bring it in step (a relist would paper over anything it
        forgot); then after a hub restart, whose relists must change nothing that matters."""
        world = self.world
        world.run(world.fake.clear_faults)
        world.run(lambda: setattr(world.fake, "down", False))
        world.run(world.fake.drop_watches)  # stalled ones too: each resumes where it was
        strays = any(argocd.holder_of(secret) is None for secret in self.ours().values())
        if not strays:  # strays go only at the registry's start: the running manager keeps them
            world.arun(world.advance, 400.0)
            self._collect_garbage()
            world.arun(world.advance, 60.0)
            assert world.crash is None, world.crash
            self.check_converged()
        world.run(world.fake.restart)
        if strays:
            world.arun(world.advance, 5.0)
            world.arun(world.stop_manager)
            world.arun(world.start_manager)
        world.arun(world.advance, 400.0)
        self._collect_garbage()
        world.arun(world.advance, 60.0)
        assert world.crash is None, world.crash
        self.check_converged()

    def check_sources_converged(self) -> None:
        for ns in WORKSPACES:
            source = self._object(CLUSTER_SOURCES, "capi", ns)
            clusters = {c["metadata"]["name"]: c for c in self._objects(api.CLUSTERS, ns)}
            mine = {
                n
                for n, c in clusters.items()
                if source is not None and (source_of(c) or ("", ""))[1] == source["metadata"]["uid"]
            }
            capi = {}
            owned = set()  # the Secrets their Cluster API cluster controls, uid and all
            uids = {
                c["metadata"]["name"]: c["metadata"]["uid"]
                for c in self._objects(clusterapi.CAPI_CLUSTERS, ns)
            }
            for secret in self._objects(SECRETS, ns):
                meta = secret["metadata"]
                name = clusterapi.capi_cluster_of(meta["name"], meta.get("labels") or {})
                if name is not None:
                    capi[name] = kubeconfig_problem(secret)
                    controllers = [
                        (r.get("kind"), r.get("name"), r.get("uid"))
                        for r in meta.get("ownerReferences") or ()
                        if r.get("controller") is True
                    ]
                    if name in uids and controllers == [("Cluster", name, uids[name])]:
                        owned.add(name)
            orphans = (
                [n for n, c in clusters.items() if (source_of(c) or ("",))[0] == "capi"]
                if source is None
                else sorted(mine - owned)
            )
            assert not orphans, (
                f"{ns}: source Clusters without their source, or a Secret their Cluster API "
                f"cluster controls: {orphans}"
            )
            if source is None:
                continue
            conflicts = {n for n in owned if n in clusters and n not in mine}
            for name, problem in capi.items():
                if name in conflicts:
                    continue
                if problem is None and name in owned:
                    assert name in mine, f"{ns}/{name}: a usable Cluster API Secret, no Cluster"
                if name in mine:
                    cluster = clusters[name]
                    ref = cluster["spec"]["kubeconfig"]["secretRef"]
                    assert ref == {"name": f"{name}-kubeconfig", "key": "value"}, ref
                    labels = cluster["metadata"].get("labels") or {}
                    assert labels == {
                        **source["spec"]["labels"],
                        SOURCE_LABEL: "capi",
                    }, labels
            status = source.get("status") or {}
            not_usable = sum(
                1
                for n, p in capi.items()
                if (p is not None or n not in owned) and n not in conflicts
            )
            assert (status.get("matched"), status.get("made")) == (len(capi), len(mine)), status
            assert (status.get("conflicts"), status.get("notUsable")) == (
                len(conflicts),
                not_usable,
            ), status
            ready = (status.get("conditions") or [{}])[0]
            assert ready.get("status") == ("True" if not conflicts and not not_usable else "False")
            SEEN["sourced"] += len(mine)
            SEEN["source_conflicts"] += len(conflicts)
            # Counted, not required: a Secret stripped of its owner is mostly written again
            # (owned) before the example's end, so some runs of 90 examples converge on none.
            SEEN["source_unowned"] += len(set(capi) - owned)

    def check_team_sources_converged(self) -> None:
        """Each labelled usable <name>-team Secret has the team source's Cluster <name> unless
        another Cluster of that name is in the way; the source has no Cluster without one."""
        for ns in WORKSPACES:
            source = self._object(CLUSTER_SOURCES, "team", ns)
            clusters = {c["metadata"]["name"]: c for c in self._objects(api.CLUSTERS, ns)}
            owners = {n: source_of(c) for n, c in clusters.items()}
            if source is None:
                left = [n for n, o in owners.items() if o is not None and o[0] == "team"]
                assert not left, f"{ns}: Clusters of a deleted team source: {left}"
                continue
            uid = source["metadata"]["uid"]
            mine = {n for n, o in owners.items() if o is not None and o[1] == uid}
            shape = cs_parse(source)
            matched = {}
            for secret in self._objects(SECRETS, ns):
                meta = secret["metadata"]
                if meta["name"].endswith("-team") and meta.get("labels") == TEAM_MARK:
                    matched[meta["name"][: -len("-team")]] = kubeconfig_problem(secret, shape)
            assert mine <= set(matched), f"{ns}: team Clusters without their Secret: {mine}"
            for name, problem in matched.items():
                if name in clusters and name not in mine:
                    continue  # in the way: a conflict
                if problem is None:
                    assert name in mine, f"{ns}/{name}: a usable team Secret, no Cluster"
                if name in mine:
                    ref = clusters[name]["spec"]["kubeconfig"]["secretRef"]
                    assert ref == {"name": f"{name}-team", "key": "kubeconfig"}, ref
            status = source.get("status") or {}
            assert (status.get("matched"), status.get("made")) == (len(matched), len(mine)), status
            SEEN["team_sourced"] += len(mine)

    def check_converged(self) -> None:
        self.check_sources_converged()
        self.check_team_sources_converged()
        counts = prediction.check_converged(self.objects(), SERVERS, self.probe, CARRY)
        SEEN["holders"] += counts.holders
        SEEN["waiters"] += counts.waiters
        SEEN["blocked"] += counts.blocked

    def probe(self, connection: Connection) -> str:
        """What the stand-in spoke check finds for a connection, as its rule last set it."""
        state = self.world.spokes[normalise_server(connection.server)]
        return "Ready" if state == "ok" else "Unreachable"


class OneReplicaMachine(ManagerMachine):
    """The one-replica test's machine: at the start of about half its examples, a foreign
    Secret on one of the servers.

    Hypothesis turns a random set of rules off in each example (swarm testing), and
    ``plant_foreign`` is one rule among thirty: 1 run in 30 (seed 1030) went through its 90
    examples without ever converging on a blocked server, and failed the count below. An
    initial rule is never turned off. The two-replica machine derives from
    :class:`ManagerMachine` and is not changed by this.
    """

    @initialize(server=st.none() | st.sampled_from(SERVERS))
    def foreign_from_the_start(self, server: str | None) -> None:
        if server is not None:
            self.plant_foreign(server, by_name=False)


def test_the_manager_survives_faults_and_converges() -> None:
    """At least 2,000 steps per run, counted: a run that did fewer proves less than it claims."""
    model.reset(SEEN)
    elapsed = model.run(OneReplicaMachine, EXAMPLES)
    print(f"model test: {SEEN['steps']} steps in {elapsed:.0f} s; counted {SEEN}")
    assert model.enough_steps(EXAMPLES) <= SEEN["steps"], f"only {SEEN['steps']} steps ran"
    # A run that never converged on a holder, a waiter or a foreign block proved nothing of them.
    if EXAMPLES >= 50:
        assert all(
            SEEN[k] > 0
            for k in (
                "holders",
                "waiters",
                "blocked",
                "restarts",
                "stop_records",
                "sourced",
                "source_conflicts",
                "team_sourced",
                "secret_lists",
            )
        ), SEEN


@pytest.fixture(autouse=True)
def _quiet_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("CRITICAL")


def test_an_outage_costs_a_few_requests_and_one_log_line_per_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten minutes of a hub that refuses every connection, while every spoke goes down too so
    that each Cluster has a status change to write: each Cluster's retries back off to minutes,
    and its failure is logged once, not once per attempt (5,000 Clusters retrying every 5 s
    would be a thousand requests and log lines a second)."""
    caplog.set_level("WARNING", logger="kokumi")
    machine = ManagerMachine()
    try:
        machine.start(
            layout=[("ws1", "a", SERVERS[0]), ("ws1", "b", SERVERS[1]), ("ws2", "a", SERVERS[2])],
            before=True,
        )
        machine.world.arun(machine.world.advance, 5.0)
        requests: dict[str, int] = {}

        def count(request: httpx.Request) -> None:
            parts = request.url.path.split("/")
            for i, part in enumerate(parts[:-1]):
                if part == "clusters" or (part == "secrets" and parts[i + 1].endswith("-kc")):
                    ref = f"{parts[i - 1]}/{parts[i + 1].removesuffix('-kc')}"
                    requests[ref] = requests.get(ref, 0) + 1

        machine.world.observer = count
        caplog.clear()
        machine.world.run(lambda: setattr(machine.world.fake, "down", True))
        for server in SERVERS:
            machine.world.spokes[normalise_server(server)] = "down"
        machine.world.arun(machine.world.advance, 600.0)
        # The in-cluster Cluster, kept by the manager itself, retries too: a read and a write
        # per attempt.
        keeper = requests.pop(f"{OWN}/in-cluster", 0)
        assert 1 <= keeper <= 40, keeper
        assert set(requests) == {"ws1/a", "ws1/b", "ws2/a"}, requests
        # 1 s doubling to 2 min: about log2(120) + 600/120 attempts; a fixed 5 s retry is 120.
        assert all(n <= 20 for n in requests.values()), requests
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Cluster ")]
        for ref in ("ws1/a", "ws1/b", "ws2/a"):
            mine = [line for line in lines if line.startswith(f"Cluster {ref}:")]
            assert 1 <= len(mine) <= 2, mine  # the failure, perhaps once more when it changes
    finally:
        machine.close()


def test_a_waiter_created_again_mid_check_does_not_inherit_the_old_claim() -> None:
    """The waiting Cluster is deleted while its actor is inside a check, and created again
    before that check ends: the old actor then stays silent (its claims are the new object's),
    and the holder lets go before the new object's first check and selection have spoken. The
    server must not be handed over on the old object's claim and connection."""
    machine = ManagerMachine()
    try:
        server = SERVERS[0]
        machine.start(layout=[("ws1", "a", server), ("ws1", "b", server)], before=True)
        machine.world.arun(machine.world.advance, 5.0)
        (secret,) = machine.ours().values()
        holder = argocd.holder_of(secret)
        assert holder is not None
        waiter = "b" if holder.name == "a" else "a"
        machine.spoke(server, "hang")
        machine.put_kubeconfig("ws1", waiter, server, None)  # a check that hangs for 10 s
        machine.delete_cluster("ws1", waiter)
        machine.put_cluster("ws1", waiter, TIERS[0], in_cluster=False)
        machine.delete_cluster("ws1", holder.name)
        machine.world.arun(machine.world.advance, 1.0)
        assert machine.violations == [], machine.violations
        machine.spoke(server, "ok")
        machine.converge()
        assert machine.violations == [], machine.violations
        (secret,) = machine.ours().values()
        assert argocd.holder_of(secret) == ClusterRef("ws1", waiter)
    finally:
        machine.close()


@pytest.mark.parametrize("seed", range(16))
def test_a_waiter_handed_its_server_back_while_deselected_keeps_its_finalizer(seed: int) -> None:
    """A holder whose server a foreign Secret blocks waits in its line, finalizer on; the
    foreign Secret goes while its Environment's deletion reaches the manager. Its actor, having
    wanted the server a moment ago, must not drop the finalizer on the view "not holding" while
    the registry hands the server back to it: the drop would reach the API server after the
    Secret that names it again. Found by the model test; the order of the two depends on the
    scheduler's choices, so the steps run under several seeds of its (and the jitter's) random."""
    seed_scheduler(seed)
    machine = ManagerMachine()
    try:
        s0, s1, s2 = SERVERS
        machine.start(layout=[("ws1", "a", s0)] * 3, before=False)
        machine.plant_foreign(s1, by_name=False)
        machine.time_passes(1.0)
        machine.watch_fault("stall")
        for _ in range(3):
            machine.delete_environment("ws1")
        machine.put_environment("ws1", "gold")
        machine.delete_environment("ws1")
        machine.plant_foreign(s0, by_name=False)
        for _ in range(3):
            machine.delete_environment("ws1")
        machine.plant_foreign(s2, by_name=False)
        for _ in range(2):
            machine.delete_environment("ws1")
        machine.remove_foreign(s0)
        machine.watch_fault("drop")
        machine.converges_cleanly()
    finally:
        machine.close()


def test_a_release_whose_delete_fails_keeps_the_finalizer_until_it_is_done() -> None:
    """The hub refuses the DELETE of a leaving holder's Secret: the Cluster stays Terminating
    with its finalizer, the registry retries, and only once the Secret is gone does the
    Cluster go (a forgotten delete would leave Argo CD the credential of a deleted Cluster)."""
    machine = ManagerMachine()
    try:
        machine.start(layout=[("ws1", "a", SERVERS[0])], before=True)
        machine.world.arun(machine.world.advance, 5.0)
        assert len(machine.ours()) == 1
        fake = machine.world.fake
        machine.world.run(
            lambda: fake.fail(500, verb="delete", resource="secrets", namespace=ARGOCD, times=3)
        )
        machine.delete_cluster("ws1", "a")
        machine.world.arun(machine.world.advance, 2.0)
        assert machine.violations == [], machine.violations
        cluster = machine._object(api.CLUSTERS, "a", "ws1")
        assert cluster is not None and api.FINALIZER in cluster["metadata"]["finalizers"]
        assert len(machine.ours()) == 1  # still there: the deletes were refused
        machine.world.arun(machine.world.advance, 60.0)
        assert machine.violations == [], machine.violations
        assert machine.ours() == {}
        assert machine._object(api.CLUSTERS, "a", "ws1") is None
    finally:
        machine.close()


def test_a_label_write_refused_mid_change_converges_to_the_holders_labels() -> None:
    """A holder's carried label changes twice while the hub refuses the Secret's updates: the
    Secret is updated in place (the same uid) to what the holder carries at the end, never
    deleted and made again, and a quiet minute after writes nothing."""
    machine = ManagerMachine()
    try:
        machine.start(layout=[("ws1", "a", SERVERS[0])], before=True)
        machine.world.arun(machine.world.advance, 5.0)
        (secret,) = machine.ours().values()
        fake = machine.world.fake
        refused = machine.world.run(
            lambda: fake.fail(403, verb="update", resource="secrets", namespace=ARGOCD, times=3)
        )
        machine.label_cluster("ws1", "a", "edge", "a")
        machine.world.arun(machine.world.advance, 0.5)
        machine.label_cluster("ws1", "a", "core", None)
        machine.world.arun(machine.world.advance, 60.0)
        assert machine.violations == [], machine.violations
        (after,) = machine.ours().values()
        assert refused.hits == 3, "the updates were refused"
        assert after["metadata"]["uid"] == secret["metadata"]["uid"]
        assert after["metadata"]["labels"]["fleet"] == "core"
        assert "example.com/owner" not in (after["metadata"].get("annotations") or {})
        machine.check_converged()
        assert machine.world.manager is not None
        writes = machine.world.manager.metrics.registry_writes
        machine.world.arun(machine.world.advance, 60.0)
        assert machine.world.manager.metrics.registry_writes == writes
    finally:
        machine.close()


def test_a_cluster_created_again_is_not_selected_by_its_predecessors_environment() -> None:
    """A selected holder is deleted and created again under its name with labels that no
    Environment selects, while the Environments actor lags (its status write refused, it waits
    before retrying, as during a long pass over many namespaces): the new object must not
    register, not even before that pass speaks; the selection was the deleted object's."""
    machine = ManagerMachine()
    try:
        machine.start(layout=[("ws1", "a", SERVERS[0])], before=True)
        machine.put_environment("ws1", TIERS[0])
        machine.world.arun(machine.world.advance, 5.0)
        assert len(machine.ours()) == 1
        fake = machine.world.fake
        for verb in ("patch", "update"):
            machine.world.run(
                lambda verb=verb: fake.fail(500, verb=verb, resource="environments", times=1)
            )
        machine.delete_cluster("ws1", "a")  # released and gone; the pass that follows fails
        assert machine._object(api.CLUSTERS, "a", "ws1") is None
        machine.put_cluster("ws1", "a", TIERS[1], in_cluster=False)
        machine.world.arun(machine.world.advance, 5.0)
        assert machine.violations == [], machine.violations
        assert machine.ours() == {}
    finally:
        machine.close()


def test_a_deleted_cluster_whose_deleted_event_is_late_does_not_spin() -> None:
    """The Cluster's finalizer goes and the object with it, but the watch has stalled, so the
    DELETED event is late: its actor waits for it and does not reconcile in a loop once its
    check timer has passed (found by the soak: a busy loop in a Cluster actor)."""
    machine = ManagerMachine()
    try:
        machine.start(layout=[("ws1", "a", SERVERS[0])], before=True)
        machine.world.arun(machine.world.advance, 5.0)
        fake = machine.world.fake
        machine.world.run(lambda: fake.delay(1.0, times=10))
        machine.delete_cluster("ws1", "a")
        machine.world.run(fake.stall_watches)
        machine.world.arun(machine.world.advance, 10.0)
        assert machine._object(api.CLUSTERS, "a", "ws1") is None
        machine.world.arun(machine.world.advance, 200.0)  # the busy-loop instrument would trip
        assert machine.ours() == {}
        assert machine.violations == [], machine.violations
    finally:
        machine.close()


def test_the_old_holder_knows_it_let_go_before_the_handover_event_is_written() -> None:
    """A slow hub holds each request 3 s: the handover's Secret update goes through, then the
    ArgoCDNameChanged Event is slow too. The Cluster that let go must be told at once, not
    after the Event (found by the soak, seed 175073822265342411781423786753786991841: it went
    on believing it held a server whose Secret named its successor)."""
    machine = ManagerMachine()
    try:
        layout = [("ws2", "a", SERVERS[0]), ("ws1", "a", SERVERS[0])]
        machine.start(layout=layout, before=False)
        machine.slow_hub(seconds=3.0)
        machine.delete_environment(ns="ws2")
        for _ in range(20):
            machine.time_passes(seconds=0.5)
            machine.no_false_holder()
        assert machine.violations == [], machine.violations
    finally:
        machine.close()


def test_a_cluster_valid_again_after_an_invalid_spell_is_checked_afresh() -> None:
    """Invalid for a moment, then valid with a new spec (here switched to InCluster): the
    old check, made for the old spec, must not be served again, and the check timer the Invalid
    spell stopped must run again (found by the soak: a stale SecretNotFound for ever)."""
    machine = ManagerMachine()
    try:
        machine.start(layout=[("ws1", "a", SERVERS[0])], before=False)
        machine.delete_kubeconfig("ws1", "a")
        machine.invalidate_cluster("ws1", "a")
        machine.put_cluster("ws1", "a", TIERS[0], in_cluster=True)
        machine.world.arun(machine.world.advance, 5.0)
        cluster = api.parse_cluster(machine._object(api.CLUSTERS, "a", "ws1") or {})
        assert isinstance(cluster, api.Cluster)
        assert cluster.ready is not None and cluster.ready.reason == "Ready", cluster.ready
        machine.converge()
    finally:
        machine.close()


def test_a_sources_cluster_pushed_over_the_bounds_gets_its_labels_back() -> None:
    """A tenant adds labels past the bounds to a Cluster a ClusterSource made: the manager keeps
    only a stub of it, and the source must still know it as its own and write its labels back
    (found by the model test: seed 31000 left it over the bounds, taken for somebody else's)."""
    machine = OneReplicaMachine()
    try:
        machine.start(
            layout=[("ws1", "a", SERVERS[0])], before=False, sourced=[("a", SERVERS[0])], team=[]
        )
        machine.world.arun(machine.world.advance, 5.0)
        assert machine._object(api.CLUSTERS, "a", "ws2") is not None  # the source made it
        machine.invalidate_cluster("ws2", "a", how="labels")
        machine.converge()
    finally:
        machine.close()


def test_a_restart_after_a_move_cut_short_keeps_the_new_server() -> None:
    """A Cluster moves to another server while the old Secret's delete is refused, so two
    Secrets name it; a restart then keeps the one it moved to (written last) and deletes the
    old one, never the other way round (found by the soak)."""
    machine = ManagerMachine()
    try:
        machine.start(layout=[("ws2", "b", SERVERS[0])], before=True)
        machine.world.arun(machine.world.advance, 5.0)
        fake = machine.world.fake
        machine.world.run(
            lambda: fake.fail(403, verb="delete", resource="secrets", namespace=ARGOCD, times=4)
        )
        machine.put_kubeconfig("ws2", "b", SERVERS[2], None)
        assert len(machine.ours()) == 2  # the old one's delete was refused
        machine.restart_manager(None, graceful=False)
        assert machine.violations == [], machine.violations
        machine.converge()
        (secret,) = machine.ours().values()
        assert argocd.server_of(secret) == normalise_server(SERVERS[2])
    finally:
        machine.close()


def test_a_cluster_made_while_the_environments_watch_lags_is_judged_on_the_manager_view() -> None:
    """The two-replica model test failed on "POST ... registers ws2/b, which no Environment ever
    selected": its Environments watch stalled, the Environment of ws2 changed to select only
    tier iron, and the ClusterSource made ws2/b (tier gold) again after a deletion. The
    manager's view still had the Environment selecting every Cluster, so it registered the new
    ws2/b: a controller acts on its watches, which lag the hub each on its own. The model held
    it to the hub's moments alone; it is now held to its own view, and the late watch must
    still put it right (the Secret goes at convergence)."""
    machine = ManagerMachine()
    try:
        s0 = SERVERS[0]
        machine.start(layout=[("ws1", "a", SERVERS[1])], sourced=[("b", s0)], before=True)
        machine.time_passes(5.0)
        assert {argocd.holder_of(s) for s in machine.ours().values()} == {
            ClusterRef("ws1", "a"),
            ClusterRef("ws2", "b"),
        }
        machine.world.run(lambda: machine.world.fake.stall_watches(api.ENVIRONMENTS))
        machine.put_environment(ns="ws2", tier="iron")
        machine.delete_cluster(ns="ws2", name="b")
        machine.time_passes(5.0)
        # The new ws2/b, made by the source, registered on the manager's view.
        registered = {argocd.holder_of(s) for s in machine.ours().values()}
        assert ClusterRef("ws2", "b") in registered, registered
        machine.converges_cleanly()
        assert ClusterRef("ws2", "b") not in {argocd.holder_of(s) for s in machine.ours().values()}
    finally:
        machine.close()


def test_a_sourced_cluster_whose_secret_loses_its_owner_goes_and_lets_go_of_argo_cd() -> None:
    """A Secret a ClusterSource imported stops being Cluster API's (its ownerReference gone, as
    when anybody who may write Secrets writes it over): its Cluster goes, as when the Secret
    stops matching, and its Argo CD Secret with it; owned again, it comes back."""
    machine = ManagerMachine()
    try:
        s0 = SERVERS[0]
        machine.start(layout=[("ws1", "a", SERVERS[1])], sourced=[("b", s0)], before=True)
        machine.time_passes(5.0)
        b = ClusterRef("ws2", "b")
        assert b in {argocd.holder_of(s) for s in machine.ours().values()}
        machine.put_capi_secret(ns="ws2", name="b", server=s0, broken="unowned")
        machine.converges_cleanly()
        assert machine._object(api.CLUSTERS, "b", "ws2") is None
        assert b not in {argocd.holder_of(s) for s in machine.ours().values()}
        source = machine._object(CLUSTER_SOURCES, "capi", "ws2") or {}
        (entry,) = source["status"]["notImported"]
        assert (entry["secret"], entry["reason"]) == ("b-kubeconfig", "SecretNotOwned")
        machine.put_capi_secret(ns="ws2", name="b", server=s0, broken=None)
        machine.converges_cleanly()
        assert b in {argocd.holder_of(s) for s in machine.ours().values()}
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 1, 4, 5, 13])
def test_a_claim_made_before_a_deselection_reached_the_actor_may_be_let_go(seed: int) -> None:
    """Seed 528 of a flake run, shrunk: the Environment deleted and made again on a slow hub,
    and ws1/a given another server meanwhile. The actor claimed the new server before the news
    of the deletion reached it, let go when it did, and claimed again: the model called that
    "let go of ws1/a, which never stopped wanting s1", judging by the hub's moments, where the
    Cluster had that server only once the new Environment existed. It now judges a Secret
    written while the writer's own view selected the holder with nothing as one that may go
    (the manager's view was right: no Environment existed at that moment). The seeds are those
    that failed before, each replaying one path; the end state is held as ever."""
    seed_scheduler(seed)
    machine = ManagerMachine()
    try:
        s0, s1 = SERVERS[0], SERVERS[1]
        machine.start(layout=[("ws1", "a", s0), ("ws1", "a", s0)], before=False, sourced=[])
        machine.delete_capi_secret(name="a", ns="ws1")
        machine.slow_hub(seconds=0.5)
        machine.put_cluster(in_cluster=False, name="b", ns="ws1", tier="gold")
        machine.delete_environment(ns="ws1")
        machine.delete_environment(ns="ws1")
        machine.slow_hub(seconds=0.5)
        machine.watch_fault(how="drop")
        machine.put_environment(ns="ws1", tier=None)
        machine.put_kubeconfig(broken=None, name="a", ns="ws1", server=s1)
        machine.time_passes(seconds=1.0)
        machine.nothing_let_go_early()
        machine.converges_cleanly()
        holders = {argocd.holder_of(s): argocd.server_of(s) for s in machine.ours().values()}
        assert holders == {ClusterRef("ws1", "a"): normalise_server(s1)}, holders
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_a_sourced_cluster_made_while_the_view_lags_may_be_handed_its_server(seed: int) -> None:
    """A CI run's failing example, replayed: a restart, the hub restarted, both Environments
    deleted while the restarted manager's watches lag; the ClusterSource makes ws2/a, which
    joins s0's line while its manager's view selects it, and is handed s0 as the holder lets go,
    before its own release arrives. No Environment on the hub ever selected it; the manager's
    view did when it claimed, and nothing of Kokumi's may stay once the views catch up (the
    seeds are those that failed before)."""
    seed_scheduler(seed)
    machine = OneReplicaMachine()
    try:
        s0 = SERVERS[0]
        machine.foreign_from_the_start(server=None)
        machine.start(
            layout=[("ws1", "a", s0), ("ws1", "a", s0)], before=False, sourced=[("a", s0)]
        )
        machine.restart_manager(refused=None, graceful=False)
        machine.hub(down=False)
        machine.delete_environment(ns="ws1")
        machine.delete_environment(ns="ws2")
        machine.time_passes(seconds=1.0)
        machine.nothing_let_go_early()
        machine.converges_cleanly()
        assert machine.ours() == {}, sorted(machine.ours())
    finally:
        machine.close()


@pytest.mark.parametrize("seed", range(3))
def test_a_source_cluster_a_user_edited_is_restored_after_a_refused_update(seed: int) -> None:
    """A user rewrites a Cluster that the ClusterSource made (its spec and labels; the
    ownerReference stays), and the source's update is refused once as a conflict. The store
    had it all, so no watch event follows: the pass must come again by itself, or the
    Cluster keeps the user's spec. Found by the model test (seed 323 of 30); every seed of the
    scheduler failed before."""
    with _sourced_pair(seed) as machine:
        machine.time_passes(seconds=1.0)
        machine.put_cluster(ns="ws2", name="a", tier="gold", in_cluster=False)
        machine.fault(verb="patch", resource="clusters", status=409, times=1)
        machine.time_passes(seconds=1.0)
        machine.converges_cleanly()


@pytest.mark.parametrize("seed", range(3))
def test_a_cluster_api_secret_whose_read_was_refused_is_read_again(seed: int) -> None:
    """Found by the model test (seed 8700 of 4): after a restart, the ClusterSource's read of a
    Cluster API kubeconfig Secret is refused (403) twice. It reported SecretNotReadable, and
    nothing read the Secret again: the end of a refusal (or a RoleBinding made) changes no
    Secret, so no watch event came, and the status kept notUsable 1 for ever. Now a pass that
    could not read a Secret comes again with backoff. Every seed of the scheduler failed
    before."""
    with _sourced_pair(seed) as machine:
        for _ in range(20):
            machine.time_passes(seconds=1.0)
        machine.restart_manager(refused=None, graceful=False)
        machine.fault(resource="secrets", status=403, times=1, verb="create")
        machine.fault(resource="secrets", status=403, times=2, verb="get")
        machine.time_passes(seconds=1.0)
        machine.converges_cleanly()


@contextlib.contextmanager
def _sourced_pair(seed: int) -> Iterator[OneReplicaMachine]:
    """The replays' start: ws1/a made by hand and ws2/a by the ClusterSource, both for s0."""
    seed_scheduler(seed)
    machine = OneReplicaMachine()
    try:
        s0 = SERVERS[0]
        machine.foreign_from_the_start(server=None)
        machine.start(layout=[("ws1", "a", s0)] * 2, before=False, sourced=[("a", s0)], team=[])
        yield machine
    finally:
        machine.close()


@pytest.mark.parametrize("seed", range(3))
def test_a_cluster_made_again_under_a_waiters_name_does_not_take_its_status(seed: int) -> None:
    """Seed 14001 of a flake run, shrunk: ws2/b, a ClusterSource's Cluster waiting in s0's line
    behind foreign Secrets, is deleted and made again by hand as InCluster. The old actor's
    last status (ClusterConflict on s0) landed on the new object: a status merge patch goes to
    whatever has the name, and the status subresource ignores a uid in it. The write now tests
    the uid (a JSON patch) and is refused on the successor. Every seed failed before."""
    seed_scheduler(seed)
    machine = OneReplicaMachine()
    try:
        s0 = SERVERS[0]
        machine.foreign_from_the_start(server=None)
        machine.start(
            layout=[("ws1", "a", s0)] * 2, before=True, sourced=[("a", s0), ("b", s0)], team=[]
        )
        machine.time_passes(seconds=1.0)
        machine.delete_kubeconfig(name="b", ns="ws1")
        machine.restart_manager(graceful=False, refused=None)
        machine.delete_kubeconfig(name="a", ns="ws1")
        machine.put_source(ns="ws1", tier="gold")
        machine.put_cluster(in_cluster=False, name="a", ns="ws1", tier="gold")
        machine.plant_foreign(by_name=False, server=s0)
        machine.plant_foreign(by_name=False, server=s0)
        machine.delete_cluster(name="b", ns="ws2", refused=None)
        machine.plant_foreign(by_name=False, server=s0)
        machine.plant_foreign(by_name=False, server=s0)
        machine.put_cluster(in_cluster=True, name="b", ns="ws2", tier="gold")
        machine.put_team_secret(broken=None, labelled=True, name="a", ns="ws1", server=s0)
        machine.hub(down=False)
        machine.converges_cleanly()
        cluster = machine._object(api.CLUSTERS, "b", "ws2") or {}
        assert cluster["spec"] == {"connection": "InCluster"}
        (ready,) = cluster["status"]["conditions"]
        assert ready["reason"] == "Ready", ready
    finally:
        machine.close()


def _finalizers_set(body: Any, current: dict[str, Any]) -> list[str] | None:
    """The finalizers a Cluster has after a patch of ``current``: a merge patch (a map), or a
    JSON patch (a list of operations, as a ClusterSource restores the labels of one over the
    bounds with); None when the patch leaves them alone."""
    if isinstance(body, dict):
        finalizers = (body.get("metadata") or {}).get("finalizers")
        return None if finalizers is None else list(finalizers)
    result: list[str] | None = None
    for operation in body:
        path = str(operation.get("path", ""))
        if not path.startswith("/metadata/finalizers"):
            continue
        if result is None:
            result = list(current["metadata"].get("finalizers") or [])
        if path == "/metadata/finalizers":
            result = [] if operation.get("op") == "remove" else list(operation.get("value") or [])
        elif operation.get("op") == "remove":
            del result[int(path.rsplit("/", 1)[1])]
    return result
