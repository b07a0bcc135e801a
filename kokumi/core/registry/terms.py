"""The first-come table's terms: who (:class:`ClusterRef`), which server (its one spelling), what
happens to the table (its events) and what the table asks for (its effects).

Apart from :mod:`kokumi.core.registry.ownership` so that the table's rules fit in one module a
reader can hold; every name here is re-exported there, where the registry's callers read it.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

IN_CLUSTER_SERVER = "https://kubernetes.default.svc"
"""Argo CD reaches this server with its own connection; a Secret for it would replace that."""


_OWN_PREFIXES = ("https://kubernetes.default", "http://kubernetes.default")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def is_argocd_own(server: str) -> bool:
    """Whether ``server`` names Argo CD's own cluster, in any of its spellings.

    The one predicate for it: the manager, the CLI, the Secret builder and the admission policy
    kokumi-argocd-secret-integrity (whose base64 patterns tests/deploy/test_b64_patterns.py checks
    against this) agree, so a spelling the policy refuses is a ClusterConflict with its hint,
    never a registration retried for ever. ``https://KUBERNETES.default.svc``, ``:443`` and
    ``.svc.cluster.local`` are all this cluster to the pods Argo CD runs in; so the rule is the
    policy's: either scheme, then ``kubernetes.default``, ASCII letters in any case, whatever
    follows.
    """
    return server.translate(_ASCII_LOWER).startswith(_OWN_PREFIXES)


def normalise_server(url: str) -> str:
    """The key a server is known by: Argo CD trims trailing slashes, so Kokumi must too."""
    return url.rstrip("/")


@attrs.frozen(order=True)
class ClusterRef:
    """A Cluster by namespace and name: the identity that holds or waits for a server.

    Ordered so that sorting is deterministic; the text form is what conflict messages show.
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# Events


@attrs.frozen
class Want:
    """The Cluster is selected, has a usable kubeconfig, and that kubeconfig points at ``server``.

    Sent again whenever the kubeconfig Secret changes, so that the holder's Secret is copied anew. A
    Want for another server than before releases the old one first.
    """

    cluster: ClusterRef
    server: str = attrs.field(converter=normalise_server)


@attrs.frozen
class Release:
    """The Cluster lets go of whatever it holds or waits for.

    It is deleted, no Environment selects it, or its kubeconfig can no longer be used.
    """

    cluster: ClusterRef


@attrs.frozen
class Foreign:
    """A cluster Secret Kokumi did not write has this server, or the name Kokumi would give it.

    Kokumi never takes over a cluster Argo CD already knows, so the server is out of reach until
    every such Secret is gone. Sending the same pair again changes nothing.
    """

    server: str = attrs.field(converter=normalise_server)
    secret_name: str


@attrs.frozen
class ForeignGone:
    """The foreign Secret ``secret_name`` for ``server`` is gone; with None, all of them are."""

    server: str = attrs.field(converter=normalise_server)
    secret_name: str | None = None


@attrs.frozen
class Remote:
    """A Secret of Kokumi's registers ``holder``, a Cluster of a shard another replica serves.

    The server is held, by a holder this table does not act for: the Clusters here that want it
    wait, and nothing here writes its Secret. A local holder found in this position lost the
    API server's atomic create to the other replica and waits first in line.
    """

    server: str = attrs.field(converter=normalise_server)
    holder: ClusterRef


@attrs.frozen
class RemoteGone:
    """The Secret of a server held elsewhere is gone: the first here in line creates it."""

    server: str = attrs.field(converter=normalise_server)


@attrs.frozen
class Adopt:
    """This replica now serves the shard of ``holder``, which the server's Secret registers.

    As after a restart: the holder keeps the server (no write for that), and the Clusters the
    Secret records as waiting (``waiting``, those of shards served here) queue behind it. The
    line follows ``recorded``, the order the Secret records (default: ``waiting``'s), with
    Clusters waiting here that it does not record at the end.
    """

    server: str = attrs.field(converter=normalise_server)
    holder: ClusterRef
    waiting: tuple[ClusterRef, ...] = ()
    recorded: tuple[ClusterRef, ...] | None = None


@attrs.frozen
class Disown:
    """Another replica serves ``cluster``'s shard now: it leaves this table without a write.

    A server it held stays held, elsewhere (as :class:`Remote`); its place in a line is gone.
    """

    cluster: ClusterRef


Event: TypeAlias = Want | Release | Foreign | ForeignGone | Remote | RemoteGone | Adopt | Disown


# Effects


@attrs.frozen
class WriteSecret:
    """Make the server's Secret register ``holder``: create it, or update it in place.

    A handover is always an update of the same Secret, never delete + create, because Argo CD and
    ApplicationSet generators would see the cluster vanish in between and prune what deploys there.
    """

    server: str
    holder: ClusterRef


@attrs.frozen
class DeleteSecret:
    """Remove Kokumi's Secret for the server; a Secret Kokumi did not write must be left alone."""

    server: str


@attrs.frozen
class Holding:
    """Tell the Cluster it holds the server, so that it can report itself registered."""

    cluster: ClusterRef
    server: str


@attrs.frozen
class ServerTaken:
    """Tell the Cluster it cannot register the server, and why, in one line without credentials."""

    cluster: ClusterRef
    server: str
    message: str


Effect: TypeAlias = WriteSecret | DeleteSecret | Holding | ServerTaken
