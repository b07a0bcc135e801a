"""The Lease loop against the real hub: one leader, the Lease handed back on stop, and a leader
that loses.

Short timings (a 2 s lease) keep the tests quick; the rules are the same as with 15/10/2.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import httpx
import pytest
import trio

from kokumi.core.fleet.leader import LeaderElection, Timing
from kokumi.kube import LEASES, SERVICE_ACCOUNTS, Client, Config
from kokumi.runtime.election import LeadershipLost, LeaseElector
from kokumi.testing import run_kubectl
from kokumi.testing.controlplane import APIServer

TIMING = Timing(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)
LEASE = "kokumi-clusters"


@pytest.fixture
async def admin(hub: APIServer) -> AsyncIterator[Client]:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as client:
        yield client


def candidate(client: Client, namespace: str, identity: str) -> LeaseElector:
    return LeaseElector(client, namespace, LeaderElection(identity, timing=TIMING))


async def holder(admin: Client, namespace: str) -> dict[str, object]:
    spec: dict[str, object] = (await admin.get(LEASES, LEASE, namespace=namespace))["spec"]
    return spec


async def test_one_leads_the_other_waits_and_takes_over_when_it_stops(
    admin: Client, namespace: str
) -> None:
    a, b = candidate(admin, namespace, "a"), candidate(admin, namespace, "b")
    running: list[str] = []

    def body(name: str) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            running.append(name)
            await trio.sleep_forever()

        return work

    async with trio.open_nursery() as nursery:
        first = trio.CancelScope()

        async def run_a() -> None:
            with first:
                await a.run(body("a"))

        nursery.start_soon(run_a)
        with trio.fail_after(5):
            await a.leading.wait()
        nursery.start_soon(b.run, body("b"))
        await trio.sleep(TIMING.lease_duration * 2)  # a renews all along: b never gets in
        assert running == ["a"]
        spec = await holder(admin, namespace)
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("a", 2)
        assert spec["leaseTransitions"] == 0

        first.cancel()  # a stops as on SIGTERM: it hands the Lease back
        stopped = trio.current_time()
        with trio.fail_after(5):
            await b.leading.wait()
        took = trio.current_time() - stopped
        # At b's next try, not after the lease ran out (that would take 1.7 s or more).
        assert took < TIMING.lease_duration * 0.75
        assert running == ["a", "b"]
        spec = await holder(admin, namespace)
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
        nursery.cancel_scope.cancel()
    spec = await holder(admin, namespace)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)


@attrs.define
class Switchable:
    """A bearer token the test can spoil, as if the API server stopped accepting the leader."""

    value: str = attrs.field(repr=False)

    async def token(self) -> str:
        return self.value

    async def refresh(self) -> str | None:
        return None


class _RenewalLostOnItsWay(httpx.AsyncBaseTransport):
    """Passes every request to the hub; once armed, the next PUT of a Lease is written there
    and its answer never comes back, as when the stop comes while a renewal is in flight."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.armed = False
        self.written = trio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.armed and request.method == "PUT" and "/leases/" in request.url.path:
            self.armed = False
            await response.aread()
            await response.aclose()
            self.written.set()
            await trio.sleep_forever()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_leader_stopped_while_a_renewal_is_in_flight_still_hands_the_lease_back(
    hub: APIServer, admin: Client, namespace: str
) -> None:
    """The renewal reached the hub but its answer did not reach the leader: the Lease is a
    version newer than the one the leader knows. Handing it back must not fail on that
    (409 Conflict), or the standby waits for the lease to run out."""
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    wire = _RenewalLostOnItsWay(httpx.AsyncHTTPTransport(verify=config.ssl_context()))
    async with Client(config, transport=wire) as client:
        a = candidate(client, namespace, "a")
        async with trio.open_nursery() as nursery:
            stopped = trio.CancelScope()

            async def run_a() -> None:
                with stopped:
                    await a.run(trio.sleep_forever)

            nursery.start_soon(run_a)
            with trio.fail_after(5):
                await a.leading.wait()
            wire.armed = True
            with trio.fail_after(5):
                await wire.written.wait()  # a renewal the hub has, a's answer held back
            stopped.cancel()
    spec = await holder(admin, namespace)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)


async def test_a_leader_that_cannot_renew_stops_before_anyone_may_take_over(
    admin: Client, hub: APIServer, namespace: str
) -> None:
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": "elect"}}, namespace=namespace)
    run_kubectl(
        hub,
        "-n",
        namespace,
        "create",
        "role",
        "elect",
        "--verb=get,create,update",
        "--resource=leases.coordination.k8s.io",
    )
    run_kubectl(
        hub,
        "-n",
        namespace,
        "create",
        "rolebinding",
        "elect",
        "--role=elect",
        f"--serviceaccount={namespace}:elect",
    )
    token = run_kubectl(hub, "-n", namespace, "create", "token", "elect").stdout.strip()
    switch = Switchable(token)
    config = attrs.evolve(
        Config.from_kubeconfig(hub.admin_kubeconfig),
        token=switch,
        client_certificate=None,
        client_key=None,
    )
    async with Client(config) as client:
        elector = candidate(client, namespace, "a")
        stopped: list[tuple[float, float | None]] = []

        async def body() -> None:
            try:
                await trio.sleep_forever()
            finally:
                stopped.append((trio.current_time(), elector.state.renewed_at))

        async def spoil_once_leading() -> None:
            await elector.leading.wait()
            await trio.sleep(TIMING.retry_period * 3)  # a few good renewals first
            switch.value = "spoiled"

        with (
            trio.fail_after(20),
            pytest.RaisesGroup(pytest.RaisesExc(LeadershipLost, match=r"within 1\.5 s")),
        ):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(spoil_once_leading)
                try:
                    await elector.run(body)
                finally:
                    nursery.cancel_scope.cancel()
    ((stopped_at, last_renewal),) = stopped
    assert last_renewal is not None
    # Stopped by the renew deadline, before the lease (2 s) lets a standby in.
    assert TIMING.renew_deadline <= stopped_at - last_renewal < TIMING.lease_duration
    assert not elector.leading.is_set()
    spec = await holder(admin, namespace)
    assert spec["holderIdentity"] == "a"  # it could not write, so it did not hand back


async def test_a_leader_that_sees_another_holder_steps_down_at_once(
    admin: Client, namespace: str
) -> None:
    elector = candidate(admin, namespace, "a")
    cancelled = trio.Event()

    async def body() -> None:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    async def intrude() -> None:
        await elector.leading.wait()
        lease = await admin.get(LEASES, LEASE, namespace=namespace)
        lease["spec"]["holderIdentity"] = "intruder"
        await admin.replace(LEASES, lease, namespace=namespace)

    with (
        trio.fail_after(10),
        pytest.RaisesGroup(pytest.RaisesExc(LeadershipLost, match="held by intruder")),
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(intrude)
            await elector.run(body)
    assert cancelled.is_set()
    assert (await holder(admin, namespace))["holderIdentity"] == "intruder"


async def test_a_deleted_lease_never_has_two_writers(admin: Client, namespace: str) -> None:
    """The Lease is deleted while a leads and b stands by, and again while a fresh candidate c
    that never saw it starts: a stops at its next renewal, and nobody leads before every body
    that wrote under the deleted Lease has ended (client-go lets a standby create it at once)."""
    a, b = candidate(admin, namespace, "a"), candidate(admin, namespace, "b")
    writing: set[str] = set()
    both: list[set[str]] = []

    def body(name: str) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            writing.add(name)
            if len(writing) > 1:
                both.append(set(writing))
            try:
                await trio.sleep_forever()
            finally:
                writing.discard(name)

        return work

    async def stand(elector: LeaseElector, name: str) -> None:
        while True:
            try:
                await elector.run(body(name))
            except LeadershipLost:
                continue

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stand, a, "a")
        with trio.fail_after(5):
            await a.leading.wait()
        nursery.start_soon(stand, b, "b")
        await trio.sleep(TIMING.retry_period * 3)  # b has seen a hold it
        for round_ in range(2):
            leader = next(e for e in (a, b) if e.leading.is_set())
            if round_:
                nursery.start_soon(stand, candidate(admin, namespace, "c"), "c")
            deleted = trio.current_time()
            await admin.delete(LEASES, LEASE, namespace=namespace)
            stopped = await _until(functools.partial(_stopped, leader), TIMING.retry_period * 2)
            led = await _until(lambda: bool(writing), TIMING.renew_deadline * 3)
            print(f"round {round_}: the leader stopped {stopped - deleted:.2f} s after the delete,")
            print(f"  {sorted(writing)} led {led - deleted:.2f} s after it")
            assert led - stopped > 0
            assert led - deleted >= TIMING.renew_deadline, "led before a renew deadline"
        nursery.cancel_scope.cancel()
    assert both == [], "two bodies ran at once"


async def _until(condition: Callable[[], bool], timeout: float) -> float:
    """Poll ``condition`` (a Lease loop's state has no event for every change); when it held."""
    with trio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.01)
    return trio.current_time()


def _stopped(elector: LeaseElector) -> bool:
    return not elector.leading.is_set()
