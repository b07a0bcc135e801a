"""Fixtures for tests against the real control plane: etcd, a hub and a spoke kube-apiserver.

The control plane starts once per session (about 5 s once built) and every test gets a fresh
namespace, so tests do not see each other's objects. When a test that used it fails, the tails of
the server logs are attached to the report: an apiserver's own words usually say why.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator

import hypothesis
import pytest

from kokumi.controlplane import APIServer, ControlPlane, tail
from kokumi.testing import Kubectl, run_kubectl

pytest_plugins = ["tests.fixtures_deploy", "tests.fixtures_spoke"]

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``cluster`` every test that needs the control plane, through any fixture.

    Marking by fixture use keeps the mark true without anyone remembering it: ``nox -s unit``
    (``-m "not cluster"``) runs the rest with no Go, no binaries and no server.
    """
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and "control_plane" in getattr(item, "fixturenames", ()):
        plane: ControlPlane | None = item.funcargs.get("control_plane")  # type: ignore[attr-defined]
        if plane is not None:
            for name, path in plane.logs():
                report.sections.append((f"{name} log (tail)", tail(path, 12)))
    return report
