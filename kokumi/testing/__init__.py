"""A local hub + spoke for tests and ``kokumi demo``, as :mod:`trio.testing` is Trio's test kit.

It ships in the wheel, with the Go wrapper modules that build the control plane (``go/``) and the
manifests the demo applies (``crds/``, ``example/``), so that ``kokumi demo`` runs from an install
outside any checkout. Nothing in the manager imports it.
"""

from kokumi.testing.controlplane import APIServer, ControlPlane
from kokumi.testing.kubectl import Kubectl, KubectlError, kubectl_binary, run_kubectl
from kokumi.testing.spoke import Registration, register

__all__ = [
    "APIServer",
    "ControlPlane",
    "Kubectl",
    "KubectlError",
    "Registration",
    "kubectl_binary",
    "register",
    "run_kubectl",
]
