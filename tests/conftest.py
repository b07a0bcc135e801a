"""Fixtures for tests against the real control plane: etcd, a hub and a spoke kube-apiserver.

The control plane starts once per session (about 5 s once built) and every test gets a fresh
namespace, so tests do not see each other's objects. When a test that used it fails, the tails of
the server logs are attached to the report: an apiserver's own words usually say why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import hypothesis
import pytest

from kokumi.controlplane import APIServer, ControlPlane, tail

pytest_plugins = ["tests.fixtures_deploy", "tests.fixtures_spoke"]

# No per-example deadline: on a shared machine it measures the neighbours, not Kokumi, and speed
# is for benchmarks/, never an assertion in a test.
hypothesis.settings.register_profile("kokumi", deadline=None)
hypothesis.settings.load_profile("kokumi")

KUBECTL = str(Path(sys.executable).with_name("kubectl"))

Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


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


def run_kubectl(
    server: APIServer | Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """kubectl with a server's admin kubeconfig (or the kubeconfig path given)."""
    kubeconfig = server if isinstance(server, Path) else server.admin_kubeconfig
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KUBECACHEDIR": str(Path(kubeconfig).parent / ".kube-cache")},
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
        )
    return result


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
