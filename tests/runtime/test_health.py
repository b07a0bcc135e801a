"""The health server on loopback: its three paths, and /metrics as Prometheus parses it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest
import trio
from prometheus_client import CollectorRegistry, exposition
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kokumi.actors.metrics import Metrics
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.runtime import health


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


async def test_healthz_readyz_and_metrics() -> None:
    metrics = Metrics()
    state = {"ready": (False, "starting: the watches have not listed everything yet")}
    metrics.clusters_seen(
        Resync(
            (
                {
                    "metadata": {"namespace": "team", "name": "edge"},
                    "status": {
                        "conditions": [
                            {"type": "Ready", "status": "False", "reason": "Unreachable"}
                        ]
                    },
                },
            )
        )
    )
    # edge comes back, and goes away again: two flips, and Ready now False.
    for status in ("True", "False"):
        edge = {
            "metadata": {"namespace": "team", "name": "edge"},
            "status": {"conditions": [{"type": "Ready", "status": status, "reason": "X"}]},
        }
        metrics.clusters_seen(WatchEvent("MODIFIED", edge))
    metrics.request("GET", "200")
    metrics.watch_restarted("clusters", "gone")
    metrics.check_finished(ClusterRef("team", "edge"), "Unreachable")
    metrics.check_seconds.observe(0.3)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            health.serve, 0, metrics.exposition, lambda: state["ready"], "127.0.0.1"
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            healthz = await http.get("/healthz")
            assert (healthz.status_code, healthz.text) == (200, "ok\n")
            readyz = await http.get("/readyz")
            assert readyz.status_code == 503
            assert "watches have not listed" in readyz.text
            state["ready"] = (True, "leading: watches synced")
            assert (await http.get("/readyz")).status_code == 200
            assert (await http.get("/nope")).status_code == 404
            assert (await http.post("/metrics")).status_code == 405

            scraped = await http.get("/metrics")  # httpx asks for gzip, as Prometheus does
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain")
            assert scraped.headers["content-encoding"] == "gzip"
            assert int(scraped.headers["content-length"]) < len(scraped.content)
            found = families(scraped.text)
            plain = await http.get("/metrics", headers={"Accept-Encoding": "identity"})
            assert "content-encoding" not in plain.headers
            assert int(plain.headers["content-length"]) == len(plain.content)
            assert families(plain.text).keys() == found.keys()
            assert found["kokumi_clusters"] == [({"reason": "X"}, 1.0)]
            ((labels, ratio),) = found["kokumi_cluster_availability_ratio"]
            assert labels == {"namespace": "team", "name": "edge"}
            assert 0.0 <= ratio < 1.0
            assert found["kokumi_cluster_ready_flips_last_hour"] == [
                ({"namespace": "team", "name": "edge"}, 2.0)
            ]
            assert found["kokumi_cluster_ready_flips"] == [
                ({"namespace": "team", "name": "edge"}, 2.0)
            ]
            assert ({"verb": "GET", "code": "200"}, 1.0) in found["kokumi_api_requests"]
            assert ({"resource": "clusters", "reason": "gone"}, 1.0) in found[
                "kokumi_watch_restarts"
            ]
            assert ({"result": "Unreachable"}, 1.0) in found["kokumi_checks"]
            assert found["kokumi_leader"] == [({}, 0.0)]

            openmetrics = await http.get(
                "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            )
            assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
            assert openmetrics.text.endswith("# EOF\n")
        nursery.cancel_scope.cancel()


async def test_a_silent_client_is_dropped_and_others_still_answered() -> None:
    metrics = Metrics()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            health.serve, 0, metrics.exposition, lambda: (True, "ok"), "127.0.0.1"
        )
        silent = await trio.open_tcp_stream("127.0.0.1", port)
        await silent.send_all(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).status_code == 200
        await silent.aclose()
        nursery.cancel_scope.cancel()


def _seen(metrics: Metrics, status: str) -> None:
    edge = {
        "metadata": {"namespace": "team", "name": "edge"},
        "status": {"conditions": [{"type": "Ready", "status": status, "reason": "X"}]},
    }
    metrics.clusters_seen(WatchEvent("MODIFIED", edge))


def test_the_exposition_keeps_the_figures_of_its_moment() -> None:
    """What a worker thread renders shares nothing with the fleet that the loop goes on changing."""
    metrics = Metrics()
    for status in ("False", "True"):
        _seen(metrics, status)
    metrics.status_writes = 3
    taken = metrics.exposition()
    for status in ("False", "True"):
        _seen(metrics, status)
    metrics.status_writes = 5
    metrics.check_finished(ClusterRef("team", "edge"), "Ready")

    then = families(generate_latest(taken).decode())
    now = families(generate_latest(metrics.registry).decode())
    edge = {"namespace": "team", "name": "edge"}
    assert then["kokumi_cluster_ready_flips"] == [(edge, 1.0)]
    assert now["kokumi_cluster_ready_flips"] == [(edge, 3.0)]
    assert (then["kokumi_status_writes"], now["kokumi_status_writes"]) == ([({}, 3.0)], [({}, 5.0)])
    # The Prometheus metrics themselves are shared (they lock their own values).
    assert then["kokumi_checks"] == now["kokumi_checks"] == [({"result": "Ready"}, 1.0)]
    assert set(then) == set(now)


async def test_metrics_are_rendered_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape of 10,000 Clusters renders for 300 ms or more, not in the loop's thread."""
    rendered_in: list[int] = []
    real = exposition.choose_encoder

    def choose(accept: str) -> tuple[Callable[[CollectorRegistry], bytes], str]:
        encoder, content_type = real(accept)

        def encode(registry: CollectorRegistry) -> bytes:
            rendered_in.append(threading.get_ident())
            return encoder(registry)

        return encode, content_type

    monkeypatch.setattr(health, "choose_encoder", choose)  # as kokumi.runtime.health imported it
    metrics = Metrics()
    _seen(metrics, "True")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            health.serve, 0, metrics.exposition, lambda: (True, "ok"), "127.0.0.1"
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            scraped = await http.get("/metrics")
        nursery.cancel_scope.cancel()
    assert families(scraped.text)["kokumi_clusters"] == [({"reason": "X"}, 1.0)]
    assert len(rendered_in) == 1
    assert rendered_in[0] != threading.get_ident()


def test_checks_per_cluster_last_as_long_as_the_cluster_is_watched() -> None:
    metrics = Metrics()
    edge, core = ClusterRef("team", "edge"), ClusterRef("team", "core")

    def obj(ref: ClusterRef) -> dict[str, object]:
        return {"metadata": {"namespace": ref.namespace, "name": ref.name}}

    metrics.clusters_seen(Resync((obj(edge), obj(core))))
    for _ in range(3):
        metrics.check_finished(edge, "Ready")
    metrics.check_finished(core, "Unreachable")
    assert (metrics.checks_of(edge), metrics.checks_of(core)) == (3, 1)
    metrics.clusters_seen(WatchEvent("DELETED", obj(edge)))
    assert (metrics.checks_of(edge), metrics.checks_of(core)) == (0, 1)
    metrics.check_finished(edge, "Ready")
    metrics.clusters_seen(Resync((obj(core),)))  # edge went while the watch was away
    assert (metrics.checks_of(edge), metrics.checks_of(core)) == (0, 1)
