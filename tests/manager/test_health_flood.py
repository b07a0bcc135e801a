"""A flood of idle connections to the health port leaves the manager able to check and watch.

Run on the real hub: another process holds many connections to /healthz that never finish their
headers, opening a new one whenever one is closed, while the manager's file descriptors are
limited as a pod's would be. The Cluster created meanwhile must still be checked, and its
status written (which needs the watch and a connection to the hub).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import trio

from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import manager, wait_reason, workspace

FLOOD = 1500  # more than the descriptors left to the manager below

FLOODER = textwrap.dedent(
    """\
    import resource, selectors, socket, sys, time
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    port, count = int(sys.argv[1]), int(sys.argv[2])
    held = []
    def fill():
        while len(held) < count:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
    fill()
    time.sleep(0.5)
    for s in held:
        try:
            s.send(b"GET /healthz HTTP/1.1\\r\\n")  # and never the rest
        except OSError:
            pass
    print("flooding", flush=True)
    while True:
        time.sleep(0.05)
        for s in list(held):
            try:
                if s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                continue
            except OSError:
                pass
            held.remove(s)
            s.close()
        fill()
    """
)


@pytest.fixture
def few_descriptors() -> Iterator[None]:
    """The descriptors open now plus 600, as a pod's limit leaves a manager a few hundred."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 600, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_flood_of_idle_connections_leaves_checks_and_watches_working(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration, few_descriptors: None
) -> None:
    async with workspace(hub) as ws:
        options = ws.options(keep_in_cluster=False, health_port=0)
        async with manager(hub, options) as running:
            assert running.health_port
            flooder = subprocess.Popen(  # noqa: ASYNC220 - a helper process for the whole test
                [sys.executable, "-c", FLOODER, str(running.health_port), str(FLOOD)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert flooder.stdout is not None
                assert flooder.stdout.readline().strip() == "flooding"
                await trio.sleep(1.5)  # for the server to accept what it will
                ns = await ws.namespace()
                await ws.kubeconfig_secret(ns, "spoke-kubeconfig", spoke_kubeconfig.kubeconfig)
                await ws.cluster(ns, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})
                await wait_reason(ws, ns, "spoke", "Ready")
                assert flooder.poll() is None, "the flood held on all along"
            finally:
                flooder.kill()
                flooder.wait()
                if flooder.stdout is not None:
                    flooder.stdout.close()
            await ws.cleanup()
