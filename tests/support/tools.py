"""Fixtures for the tools, built from Go modules, that check Kokumi's deliverables.

kokumi.testing.tools builds them.

They build once per machine (cached like the control plane), so the tests that use them are marked
``cluster`` by tests/conftest.py (its GO_FIXTURES): ``nox -s unit`` needs no Go.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kokumi.testing.tools import (
    HELM_VERSIONS,
    ensure_argocd_appset_clusters,
    ensure_argocd_lua_health,
    ensure_helm,
    ensure_promtool,
)


@pytest.fixture(scope="session")
def argocd_lua_health() -> Path:
    """Argo CD's own Lua health code, as a program over a resource_customizations folder."""
    return ensure_argocd_lua_health()


@pytest.fixture(scope="session")
def argocd_appset_clusters() -> Path:
    """Argo CD's own ApplicationSet cluster generator and renderer, as a program over a hub."""
    return ensure_argocd_appset_clusters()


@pytest.fixture(scope="session", params=HELM_VERSIONS)
def helm(request: pytest.FixtureRequest) -> Path:
    """The helm CLI, once per major the chart claims (each test that uses it runs with both)."""
    version: str = request.param
    return ensure_helm(version)


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Prometheus' promtool: ``promtool check rules`` parses rules as Prometheus does."""
    return ensure_promtool()
