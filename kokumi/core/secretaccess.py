"""Where the manager may read Secrets, and the one-line fix when it may not: decisions, no I/O.

The Secret watches follow these rules and a Cluster quotes the fix in its ``SecretNotReadable``
message; both import them from here, so neither actor imports the other.
"""

from __future__ import annotations

import enum

__all__ = [
    "MANAGER_SECRETS_ROLE",
    "PROTECTED_NAMESPACES",
    "SecretScope",
    "binding_command",
    "not_listable_message",
    "not_readable_message",
    "subject_flag",
]

MANAGER_SECRETS_ROLE = "kokumi-manager-secrets"


class SecretScope(enum.StrEnum):
    """Where the manager follows Secrets: ``kokumi manager --secrets-scope``."""

    NAMESPACE = "namespace"
    CLUSTER = "cluster"


_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def subject_flag(username: str | None) -> str:
    """The ``kubectl create rolebinding`` flag that names the manager's identity."""
    if username and username.startswith(_SERVICE_ACCOUNT_PREFIX):
        namespace, _, name = username.removeprefix(_SERVICE_ACCOUNT_PREFIX).partition(":")
        if namespace and name:
            return f"--serviceaccount={namespace}:{name}"
    if username:
        return f"--user={username}"
    return "--serviceaccount=kokumi:kokumi"


def binding_command(namespace: str, username: str | None) -> str:
    """The one command that lets the manager read Secrets in ``namespace``."""
    return (
        f"kubectl -n {namespace} create rolebinding {MANAGER_SECRETS_ROLE}"
        f" --clusterrole={MANAGER_SECRETS_ROLE} {subject_flag(username)}"
    )


PROTECTED_NAMESPACES = frozenset({"kokumi-signing"})
"""Where no Secret role is ever bound (kokumi-secret-role-bindings), besides Kokumi's own."""


def not_readable_message(
    secret: str, namespace: str, username: str | None, own_namespace: str = "kokumi"
) -> str:
    """The Ready message of a Cluster whose kubeconfig Secret the manager may not read.

    In Kokumi's own namespace and kokumi-signing the binding is refused on purpose (the signing
    key and login Secrets live there), so the fix there is to move the Cluster, not to bind.
    """
    if namespace == own_namespace or namespace in PROTECTED_NAMESPACES:
        return (
            f"Kokumi may not read Secret {secret} in namespace {namespace}, and never will: the"
            " session signing key and login Secrets live there; keep Kubeconfig Clusters and"
            " their Secrets in a workspace of their own"
        )
    return (
        f"Kokumi may not read Secret {secret} in namespace {namespace}: bind it the ClusterRole"
        f" {MANAGER_SECRETS_ROLE} there: {binding_command(namespace, username)}"
    )


def not_listable_message(
    namespace: str, username: str | None, own_namespace: str = "kokumi"
) -> str:
    """The Ready message of a ClusterSource whose namespace's Secrets the manager may not list."""
    if namespace == own_namespace or namespace in PROTECTED_NAMESPACES:
        return (
            f"Kokumi may not list Secrets in namespace {namespace}, and never will: the session"
            " signing key and login Secrets live there; keep ClusterSources and Cluster API's"
            " Secrets in a workspace of their own"
        )
    return (
        f"Kokumi may not list Secrets in namespace {namespace}: bind it the ClusterRole"
        f" {MANAGER_SECRETS_ROLE} there: {binding_command(namespace, username)}; its Clusters"
        " stay as they are meanwhile"
    )
