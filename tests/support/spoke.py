"""The spoke registered once per session, as the spec's steps register it.

Registering takes about a second (kubectl runs and the token controller), and the result never
changes, so every test shares one. Tests that need a broken variant call ``.variant(...)``.
"""

from __future__ import annotations

import pytest

from kokumi.testing import run_kubectl
from kokumi.testing.controlplane import ControlPlane
from kokumi.testing.spoke import Registration, register


@pytest.fixture(scope="session")
def spoke_kubeconfig(control_plane: ControlPlane) -> Registration:
    return register(control_plane.spoke, run_kubectl)


NARROW_NAMESPACE = "team-a"
"""The one namespace the narrow spoke credential may use."""


@pytest.fixture(scope="session")
def narrow_spoke_kubeconfig(control_plane: ControlPlane) -> Registration:
    """A spoke ServiceAccount granted less than cluster-admin, as the spec advises: the
    ClusterRole admin in :data:`NARROW_NAMESPACE` only."""
    return register(
        control_plane.spoke,
        run_kubectl,
        service_account="kokumi-narrow",
        namespace=NARROW_NAMESPACE,
    )
