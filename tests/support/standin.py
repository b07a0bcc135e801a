"""Stand-in spokes for the actor-layer tests on the in-process API fake: a check that answers
at once or hangs out its whole timeout, and Clusters with kubeconfig Secrets put straight into
the fake. The probe's own tests (tests/runtime) check the real thing against real servers."""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterable, Mapping

import trio

from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from kokumi.kube.client import Client
from tests.support import strategies as s
from tests.support.fakeapi import FakeApi


class StandInSpokes:
    """Which spokes hang, and when each was asked."""

    def __init__(self, hanging: Iterable[str] = (), latency: float = 0.005) -> None:
        self.hanging = set(hanging)
        self.latency = latency  # how long an answering spoke takes
        self.asked: dict[str, list[float]] = defaultdict(list)

    async def check(
        self,
        connection: Connection,
        *,
        timeout: float,
        egress: object = None,
        cluster_wide: bool = True,
    ) -> Outcome:
        self.asked[connection.server].append(trio.current_time())
        if connection.server in self.hanging:
            await trio.sleep(timeout)
            return Outcome(
                False, Reason.UNREACHABLE, f"timed out after {timeout:g} s", connection.server
            )
        await trio.sleep(self.latency)
        return Outcome(True, Reason.READY, "reachable", connection.server, "v1.36.3")

    async def check_own(self, client: Client, *, timeout: float) -> Outcome:
        return Outcome(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")


def put_cluster(
    fake: FakeApi, namespace: str, name: str, url: str, labels: Mapping[str, str] | None = None
) -> None:
    """A Kubeconfig Cluster for ``url`` and its Secret, as a user's ``kubectl apply`` makes."""
    text = s.dump(
        s.kubeconfig(
            cluster={"server": url, "certificate-authority-data": s.b64(s.ca_pem())},
            user={"token": f"token-{name}"},
        )
    )
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"value": base64.b64encode(text.encode()).decode()},
        }
    )
    fake.put(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": name}}},
        }
    )


def put_environment(fake: FakeApi, namespace: str) -> None:
    """An Environment ``all`` that selects every Cluster of ``namespace``."""
    fake.put(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": "all", "namespace": namespace},
            "spec": {"clusterSelector": {}},
        }
    )
