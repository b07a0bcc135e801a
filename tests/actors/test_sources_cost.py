"""A ClusterSource's Secret of 2,000 contexts, on the in-process API: read once, off the event
loop, cut at the manager's bound with the reason in the source's status, no Cluster lost to a
cut; and every kubeconfig read, the source's and each Cluster's, in a worker thread."""

from __future__ import annotations

import base64
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig import events, reader
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from kokumi.core.sources.bounds import Bounds
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.core.kubeconfig.test_contexts import shared
from tests.support.fakeapi import FakeApi
from tests.support.standin import put_cluster

NS = "fleet"
MARK = {"kokumi.dev/kubeconfig": "true"}


async def _unreachable(
    connection: Connection, *, timeout: float, egress: object = None, cluster_wide: bool = True
) -> Outcome:
    return Outcome(False, Reason.UNREACHABLE, "connection refused", connection.server)


async def _own(client: Client, *, timeout: float) -> Outcome:
    return Outcome(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")


def _secret(name: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS, "labels": dict(MARK)},
        "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
    }


def _source() -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "ClusterSource",
        "metadata": {"name": "team", "namespace": NS},
        "spec": {
            "from": "Secrets",
            "secretSelector": {"matchLabels": MARK},
            "key": "kubeconfig",
            "contexts": "All",
        },
    }


@asynccontextmanager
async def _manager(fake: FakeApi, limits: Bounds) -> AsyncIterator[Manager]:
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        options = Options(namespace="kokumi", argocd_namespace="argocd", source_bounds=limits)
        manager = Manager(client, options, check=_unreachable, check_own=_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            yield manager
            nursery.cancel_scope.cancel()


async def _until(what: str, holds: Callable[[], bool]) -> None:
    for _ in range(1200):  # two minutes, for a loaded machine
        if holds():
            return
        await trio.sleep(0.1)
    raise AssertionError(f"not reached: {what}")


def _status(fake: FakeApi) -> dict[str, Any]:
    obj = fake.object(CLUSTER_SOURCES, "team", NS) or {}
    return dict(obj.get("status") or {})


def _ready(fake: FakeApi) -> dict[str, Any]:
    found = [c for c in _status(fake).get("conditions", ()) if c.get("type") == "Ready"]
    return dict(found[0]) if found else {}


def _clusters(fake: FakeApi) -> set[str]:
    return {c["metadata"]["name"] for c in fake.objects(api.CLUSTERS, NS)}


async def test_a_secret_of_2000_contexts_is_read_off_the_loop_and_cut_at_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_loop: list[bool] = []
    load = events.load

    def watched(text: str | bytes) -> object:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return load(text)

    monkeypatch.setattr(reader, "load", watched)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS, "team"))
    fake.put(_source())
    fake.put(_secret("many", shared(2_000)))
    # A hand-made Cluster of a typical 2 KiB kubeconfig: read off the loop too.
    put_cluster(fake, "team", "small", "https://small.example:6443")
    async with _manager(fake, Bounds()) as manager:
        # The documented default: the first 100 contexts by name, the reason in the status.
        await _until(
            "100 Clusters and TooManyContexts",
            lambda: (
                len(_clusters(fake)) == 100
                and _ready(fake).get("reason") == Reason.TOO_MANY_CONTEXTS
            ),
        )
        assert _clusters(fake) == {f"ctx-{i:05d}" for i in range(100)}
        await _until("each Cluster read its kubeconfig", lambda: len(on_loop) >= 102)
        await manager.dispatcher.wait_checked()
    status = _status(fake)
    assert (status["matched"], status["made"]) == (100, 100)
    ready = _ready(fake)
    assert ready["status"] == "False"
    assert ready["message"].startswith(
        "1 matched Secret has more than 100 contexts (--max-contexts-per-secret)"
    )
    (entry,) = status["notImported"]
    assert (entry["secret"], entry["reason"]) == ("many", "TooManyContexts")
    assert "it has 2,000 contexts" in entry["message"]
    # Every read of the tenant's text, the source's and each Cluster's, ran in a worker thread.
    assert on_loop and not any(on_loop)

    # The bounds lowered (a restart): no Cluster goes; a new Secret's wait for room.
    fake.put(_secret("more", shared(5).replace("ctx-", "new-")))
    async with _manager(fake, Bounds(contexts_per_secret=10, clusters_per_source=50)):
        await _until(
            "both bounds in the status",
            lambda: "5 Clusters are not made" in _ready(fake).get("message", ""),
        )
        assert len(_clusters(fake)) == 100
    ready = _ready(fake)
    assert ready["reason"] == Reason.TOO_MANY_CONTEXTS
    assert "one ClusterSource keeps at most 50 (--max-clusters-per-source)" in ready["message"]
    waiting = [e for e in _status(fake)["notImported"] if e["reason"] == "TooManyClusters"]
    assert [e["cluster"] for e in waiting] == [f"new-{i:05d}" for i in range(5)]
    assert all("\n" not in e["message"] for e in _status(fake)["notImported"])
