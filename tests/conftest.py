"""Fixtures for tests against the real control plane: etcd, a hub and a spoke kube-apiserver.

Every test is also held to ``kokumi.testing.canary``: its captured output, logs and exception
text, and after a test that used the hub every Event and status there, must not show the canary
that the credentials tests make up carry.

The control plane starts once per session (about 5 s once built) and every test gets a fresh
namespace, so tests do not see each other's objects. When a test that used it fails, the tails of
the server logs are attached to the report: an apiserver's own words usually say why.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterator

import httpx
import hypothesis
import pytest

from kokumi.testing import Kubectl, canary, run_kubectl
from kokumi.testing.controlplane import APIServer, ControlPlane, tail

pytest_plugins = ["tests.support.deploy", "tests.support.spoke", "tests.support.tools"]

# Fixtures of tests.support.tools whose use needs Go, as the control plane does.
GO_FIXTURES = ("argocd_appset_clusters", "argocd_lua_health", "helm", "promtool")

# No per-example deadline: on a shared machine it measures the neighbours, not Kokumi, and speed
# is for benchmarks/, never an assertion in a test.
hypothesis.settings.register_profile("kokumi", deadline=None)
hypothesis.settings.load_profile("kokumi")
# The fast loop's (`nox -s unit`): fewer examples where a test does not set its own count.
hypothesis.settings.register_profile("unit", deadline=None, max_examples=25)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def hub(control_plane: ControlPlane) -> APIServer:
    return control_plane.hub


@pytest.fixture
def spoke(control_plane: ControlPlane) -> APIServer:
    return control_plane.spoke


@pytest.fixture
def kubectl() -> Kubectl:
    return run_kubectl


@pytest.fixture
def namespace(hub: APIServer) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    run_kubectl(hub, "create", "namespace", name)
    yield name
    run_kubectl(hub, "delete", "namespace", name, "--wait=false", check=False)


_HUB_READERS: dict[int, httpx.Client] = {}


@pytest.fixture(autouse=True, scope="session")
def _close_hub_readers() -> Iterator[None]:
    """The canary scan keeps one connection per hub for the whole run: closed at its end, not
    left to the interpreter's exit (which reported it as an unclosed socket)."""
    yield
    for reader in _HUB_READERS.values():
        reader.close()
    _HUB_READERS.clear()


def _hub_reader(hub: APIServer) -> httpx.Client:
    reader = _HUB_READERS.get(hub.port)
    if reader is None:
        context = hub.ssl_context("kokumi-admin", ["system:masters"])
        reader = httpx.Client(base_url=hub.url, verify=context, timeout=30)
        _HUB_READERS[hub.port] = reader
    return reader


@pytest.fixture(autouse=True)
def _no_canary_on_the_hub(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the hub: no Event and no status anywhere holds the canary."""
    if "hub" not in request.fixturenames:
        yield
        return
    hub: APIServer = request.getfixturevalue("hub")
    yield
    reader = _hub_reader(hub)
    leaks = []
    for path in (
        "/api/v1/events",
        "/apis/delivery.kokumi.dev/v1alpha1/clusters",
        "/apis/delivery.kokumi.dev/v1alpha1/environments",
    ):
        response = reader.get(path)
        for _ in range(10):
            # A test may leave the hub's flow control busy: wait as the hub asks, and read.
            if response.status_code != 429:
                break
            time.sleep(float(response.headers.get("Retry-After") or 1))
            response = reader.get(path)
        if response.status_code == 404:
            continue  # the CRDs are not installed yet
        response.raise_for_status()
        for obj in response.json()["items"]:
            shown = obj if path.endswith("events") else obj.get("status") or {}
            if canary.found(shown):
                meta = obj["metadata"]
                leaks.append(f"{path.rsplit('/', 1)[1]} {meta.get('namespace')}/{meta['name']}")
    assert leaks == [], f"the canary leaked into {leaks}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``cluster`` every test that needs the control plane or a tool built from Go.

    Marking by fixture use keeps the mark true without anyone remembering it: ``nox -s unit``
    (``-m "not cluster"``) runs the rest with no Go, no binaries and no server.
    """
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "control_plane" in names or any(name in names for name in GO_FIXTURES):
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # Captured output, logs and exception text: no test-made credential may show in any.
    leaked = [
        name
        for name, content in report.sections
        if name.endswith(report.when) and canary.found(content)
    ]
    if canary.found(report.longreprtext):
        leaked.append("the exception text")
    if leaked and not report.failed:
        report.outcome = "failed"
        report.longrepr = f"the canary leaked into {', '.join(leaked)}"
    if report.failed and "control_plane" in getattr(item, "fixturenames", ()):
        plane: ControlPlane | None = item.funcargs.get("control_plane")  # type: ignore[attr-defined]
        if plane is not None:
            for name, path in plane.logs():
                report.sections.append((f"{name} log (tail)", tail(path, 12)))
    return report
