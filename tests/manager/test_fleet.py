"""A fleet over simulated minutes: a quiet fleet costs no writes; eight checks at a time at most.

The clock is Trio's MockClock: it jumps to the next timer once every task has been idle for a
fifth of a real second, so ten minutes of timers pass in seconds while the checks themselves still
talk to the real spoke over real sockets (each answers in milliseconds, well inside that).
"""

from __future__ import annotations

import base64
import functools
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from kokumi.core import api
from kokumi.core.cluster import schedule
from kokumi.kube.resources import SECRETS
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import manager, ready_of, wait_for, wait_reason, workspace


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A server that accepts TCP connections (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"


async def test_quiet_fleet_writes_nothing_and_checks_eight_at_a_time(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    black_hole: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Frozen while the fleet is created: a slow request on a busy machine must not look like
    # half a minute to the client's own timeouts.
    autojump_clock.autojump_threshold = float("inf")
    reg = spoke_kubeconfig
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        names = [f"good-{index}" for index in range(3)]
        silent = [f"silent-{index}" for index in range(9)]  # one more than the limit
        for name in names:
            await ws.kubeconfig_secret(ns, name, reg.kubeconfig)
            await ws.cluster(ns, name, secret=name)
        for name in silent:
            await ws.kubeconfig_secret(ns, name, reg.variant(server=black_hole))
            await ws.cluster(ns, name, secret=name)
        names += silent
        autojump_clock.autojump_threshold = 0.2
        async with manager(hub, ws.options(keep_in_cluster=False)) as running:
            await running.wait_checked()
            for name in names:
                await wait_for(
                    functools.partial(ws.get_cluster, ns, name),
                    lambda c: ready_of(c).get("reason") in ("Ready", "Unreachable"),
                    f"{name} to be checked",
                    timeout=120,
                )
            assert ready_of(await ws.get_cluster(ns, "silent-0"))["reason"] == "Unreachable"
            # Other tests' Clusters may still be around on the shared hub: look at ours only.
            actors = [a for a in running.dispatcher.actors if a.ref.namespace == ns]
            assert len(actors) == len(names)
            versions = {
                n: (await ws.get_cluster(ns, n))["metadata"]["resourceVersion"] for n in names
            }
            checks = {a.ref.name: running.metrics.checks_of(a.ref) for a in actors}
            await trio.sleep(600)  # ten simulated minutes
            after = {n: (await ws.get_cluster(ns, n))["metadata"]["resourceVersion"] for n in names}
            assert after == versions, "a quiet fleet costs no writes"
            # About once a minute each: ten minutes less the jitter make at least nine rounds.
            assert all(running.metrics.checks_of(a.ref) - checks[a.ref.name] >= 9 for a in actors)
            # Eight at a time at most; the nine silent ones (one more than the limit) hold seven
            # at most, the last slot being the answering ones', which take it for milliseconds.
            assert running.metrics.max_concurrent_checks in (7, 8)
            await ws.cleanup()


async def test_a_label_change_reuses_a_check_younger_than_half_a_minute(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Real-time pace, plus the jumps the test makes: the ages of checks are the test's to set.
    autojump_clock.autojump_threshold = float("inf")
    autojump_clock.rate = 1.0
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)) as running:
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "kc", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "spoke", secret="kc")
        await wait_for(
            lambda: ws.get_cluster(ns, "spoke"),
            lambda c: ready_of(c).get("reason") == "Ready",
            "spoke to be Ready",
        )
        actor = next(a for a in running.dispatcher.actors if a.ref.namespace == ns)
        checks = running.metrics.checks_of(actor.ref)

        async def relabel(value: str) -> None:
            await ws.client.patch_merge(
                api.CLUSTERS, "spoke", {"metadata": {"labels": {"tier": value}}}, namespace=ns
            )
            await wait_for(
                lambda: _labels(actor),
                lambda labels: labels.get("tier") == value,
                "the actor to see the label",
            )
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)

        autojump_clock.jump(20)
        await relabel("a")
        assert running.metrics.checks_of(actor.ref) == checks, "a check 20 s old is reused"
        autojump_clock.jump(11)
        await relabel("b")
        assert running.metrics.checks_of(actor.ref) == checks + 1, "a check 31 s old is not"
        await ws.cleanup()


async def _labels(actor: Any) -> Mapping[str, str]:
    labels: Mapping[str, str] = actor.cluster.metadata.labels
    return labels


async def test_steady_checks_reuse_the_kubeconfig_until_its_secret_changes(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = float("inf")
    reg = spoke_kubeconfig
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "spoke", reg.kubeconfig)
        await ws.cluster(ns, "spoke", secret="spoke")
        autojump_clock.autojump_threshold = 0.2
        async with manager(hub, ws.options(keep_in_cluster=False)) as running:
            await wait_reason(ws, ns, "spoke", "Ready", timeout=120)
            (actor,) = [a for a in running.dispatcher.actors if a.ref.namespace == ns]
            await wait_for(
                trio.lowlevel.checkpoint,
                lambda _: ns in {k[0] for k in running.context.secret_versions},
                "the Secret watch of the namespace",
                timeout=120,
            )
            first_read, checks = actor.state.read, running.metrics.checks_of(actor.ref)
            assert first_read is not None
            await trio.sleep(300)  # five simulated minutes: about five checks
            assert running.metrics.checks_of(actor.ref) - checks >= 4, (
                "still checked about once a minute"
            )
            # Each check still asked the spoke (a new connection, the credential); only the
            # kubeconfig's read and parse were reused, since the watch saw the same version.
            assert actor.state.read is first_read
            # A new kubeconfig version is read at once: a revoked token shows on the next check.
            await ws.client.patch_merge(
                SECRETS,
                "spoke",
                {
                    "data": {
                        "value": base64.b64encode(reg.variant(token="x" * 40).encode()).decode()
                    }
                },
                namespace=ns,
            )
            await wait_reason(ws, ns, "spoke", "Unauthorized", timeout=120)
            assert actor.state.read is not first_read
            await ws.cleanup()


async def test_a_restart_writes_nothing_and_spreads_its_first_checks(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = float("inf")
    reg = spoke_kubeconfig
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        names = [f"c{index}" for index in range(6)]
        await ws.environment(ns, "all", {"fleet": "edge"})
        for name in names:
            await ws.kubeconfig_secret(ns, name, reg.kubeconfig)
        # c0 is selected and holds the registration; the others are Ready and unselected.
        await ws.cluster(ns, "c0", secret="c0", labels={"fleet": "edge"})
        for name in names[1:]:
            await ws.cluster(ns, name, secret=name)
        autojump_clock.autojump_threshold = 0.2
        options = ws.options(keep_in_cluster=False)
        async with manager(hub, options) as running:
            for name in names:
                await wait_reason(ws, ns, name, "Ready", timeout=120)
            await running.wait_checked()
        versions = {n: (await ws.get_cluster(ns, n))["metadata"]["resourceVersion"] for n in names}
        secrets = [s["metadata"]["resourceVersion"] for s in await ws.argocd_secrets()]
        assert len(secrets) == 1
        async with manager(hub, options) as running:
            await running.wait_checked()  # every actor has its first check: the status's
            actors = [a for a in running.dispatcher.actors if a.ref.namespace == ns]
            assert len(actors) == len(names)
            # At once only those whose place in the minute came since the manager began (or a
            # little before, while the last one may have been stopping): their check may have
            # been missed. The rest wait for their place.
            now, interval = trio.current_time(), options.check_interval
            missed = {
                a.ref.name
                for a in actors
                if schedule.missed_place(now, a._offset, interval, a._since)
            }
            assert all(
                running.metrics.checks_of(a.ref) == 0 for a in actors if a.ref.name not in missed
            ), "no check at once after a restart but of a place missed"
            await trio.sleep(10)
            assert all(
                running.metrics.checks_of(a.ref) >= 1 for a in actors if a.ref.name in missed
            ), "a place missed is checked at once"
            await trio.sleep(70)
            assert all(running.metrics.checks_of(a.ref) >= 1 for a in actors), (
                "each checked within the interval"
            )
            after = {n: (await ws.get_cluster(ns, n))["metadata"]["resourceVersion"] for n in names}
            assert after == versions, "a restart with nothing changed writes nothing"
            assert [s["metadata"]["resourceVersion"] for s in await ws.argocd_secrets()] == secrets
            await ws.cleanup()
