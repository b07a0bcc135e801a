"""The Kubernetes resources every controller names, ready to pass to the client's verbs."""

from __future__ import annotations

from kokumi.objects import Resource

__all__ = [
    "CONFIG_MAPS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "PODS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
]


CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PODS = Resource("", "v1", "pods", "Pod")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
