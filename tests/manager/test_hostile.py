"""Hostile API servers beside live ones, on the real hub: a tenant's servers cannot stop the
checks of every other Cluster.

Anyone who may create a Cluster with a kubeconfig chooses what its server answers. Eight servers
that pad one header line of each answer with 15,000 spaces once held the lean check's worker
threads in a backtracking regex with the GIL held, and the hub's other Clusters got 1 check in
180 s where 30 were due. Here the live Clusters must go on being checked on their minute (a
short one) while the padding servers are checked beside them.
"""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import pytest
import trio

from kokumi.core.registry.ownership import ClusterRef
from kokumi.manager import Manager
from kokumi.testing.controlplane import APIServer, CertificateAuthority
from kokumi.testing.spoke import Registration
from tests.support.manager import manager, wait_for, wait_reason, workspace
from tests.support.spoke_answers import answer_checks

pytestmark = pytest.mark.usefixtures("crds")

LIVE = 10
HOSTILE = 8
PAD = "X-Pad: x" + " " * 15_000 + "y"
VERSION = b'{"major":"1","minor":"36","gitVersion":"v1.36.0-padded"}'


padding = functools.partial(answer_checks, version=VERSION, username="padded", extra=PAD)
"""An API server whose every answer is right, with one header line padded with spaces."""


async def checks(running: Manager, refs: list[ClusterRef]) -> list[int]:
    await trio.sleep(0.2)
    return [running.metrics.checks_of(ref) for ref in refs]


async def test_padding_servers_do_not_stop_the_live_clusters_checks(
    hub: APIServer, spoke_kubeconfig: Registration, tmp_path: Path
) -> None:
    authority = CertificateAuthority.create("kokumi-padding-ca")
    cert, key = authority.issue("padding", server_names=["127.0.0.1"])
    chain = tmp_path / "padding.pem"
    chain.write_bytes(cert + key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    options = dict(check_interval=2.0, check_jitter=0.2, keep_in_cluster=False)
    async with trio.open_nursery() as servers, workspace(hub) as ws:
        listeners = await servers.start(
            functools.partial(trio.serve_ssl_over_tcp, padding, 0, context, host="127.0.0.1")
        )
        port = listeners[0].transport_listener.socket.getsockname()[1]
        hostile = spoke_kubeconfig.variant(server=f"https://127.0.0.1:{port}", ca_pem=authority.pem)
        async with manager(hub, ws.options(**options)) as running:
            ns = await ws.namespace()
            await ws.kubeconfig_secret(ns, "live", spoke_kubeconfig.kubeconfig)
            await ws.kubeconfig_secret(ns, "hostile", hostile)
            live = [ClusterRef(ns, f"live-{i}") for i in range(LIVE)]
            padded = [ClusterRef(ns, f"padded-{i}") for i in range(HOSTILE)]
            for ref in live:
                await ws.cluster(ns, ref.name, secret="live")
            for ref in live:
                await wait_reason(ws, ns, ref.name, "Ready")
            for ref in padded:
                await ws.cluster(ns, ref.name, secret="hostile")
            for ref in padded:
                # A padded header is a header: the answers are right, the Cluster is Ready.
                cluster = await wait_reason(ws, ns, ref.name, "Ready")
                assert cluster["status"]["kubernetesVersion"] == "v1.36.0-padded"

            # Five more minutes of two seconds each, the padding servers checked all along: every
            # live Cluster is checked again on its minute, as many times as a padding one.
            before = await checks(running, live + padded)
            after = await wait_for(
                lambda: checks(running, live + padded),
                lambda now: all(n - b >= 5 for n, b in zip(now, before, strict=True)),
                "every Cluster, live and padded, to be checked five more times",
                timeout=40,
            )
            gained = [n - b for n, b in zip(after, before, strict=True)]
            assert min(gained[:LIVE]) >= 5, gained
            await ws.cleanup()
        servers.cancel_scope.cancel()
