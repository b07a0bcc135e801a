"""Whether a ``vc-<name>`` Secret is the one vcluster wrote, for ``from: VCluster``.

Name and labels (``vc-<name>``, ``app: vcluster``, ``vcluster-name: <name>``) are what anybody who
may create Secrets can write, and the credential would go to every Environment of the
namespace. What vcluster itself makes, and a Secret-writer cannot:

- vcluster's chart makes, in the vcluster's namespace, the Service ``<name>`` and the StatefulSet
  (or Deployment) ``<name>``, both labelled ``app: vcluster`` and ``release: <name>``;
- vcluster writes ``vc-<name>`` there (always, besides any other Secrets it exports), and, with
  ``experimental.syncSettings.setOwner`` (the default), gives it one ownerReference: that
  Service (``apiVersion: v1``, ``kind: Service``, its name and uid, ``controller: false``).

So a ``vc-<name>`` Secret is taken only while the Service ``<name>`` labelled ``app: vcluster``
exists in its namespace, and, if the Secret has ownerReferences, one of them is that Service
with its uid (vcluster with ``setOwner: false`` writes none). Pure functions, for Hypothesis;
the actor and ``kokumi cluster import`` feed them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from kokumi.core.reasons import Reason
from kokumi.core.sources.plan import OwnerRef
from kokumi.core.text import quoted
from kokumi.objects import Resource

__all__ = [
    "SERVICES",
    "SERVICE_SELECTOR",
    "VClusterView",
    "owners_of",
    "problem",
    "view_of",
]

SERVICES: Final = Resource("", "v1", "services", "Service")
SERVICE_SELECTOR: Final = "app=vcluster"
"""The label vcluster's chart puts on the vcluster's Service: the only Services read."""


@attrs.frozen
class VClusterView:
    """The vclusters' Services of one namespace (metadata only), if the manager may read them.

    ``services`` maps the name of each Service labelled ``app: vcluster`` to its uid.
    """

    readable: bool
    services: Mapping[str, str] = attrs.field(factory=dict)


def view_of(readable: bool, metas: Sequence[Mapping[str, object]]) -> VClusterView:
    """A view from the Services' metadata, as a watch or a list hands it."""
    return VClusterView(
        readable, {str(m.get("name", "")): str(m.get("uid") or "") for m in metas if m.get("name")}
    )


def owners_of(references: object) -> tuple[OwnerRef, ...]:
    """Every ``metadata.ownerReferences`` entry: vcluster's is not a controller reference."""
    if not isinstance(references, list | tuple):
        return ()
    return tuple(
        OwnerRef(
            str(ref.get("apiVersion", "")),
            str(ref.get("kind", "")),
            str(ref.get("name", "")),
            str(ref.get("uid", "")),
        )
        for ref in references
        if isinstance(ref, Mapping)
    )


def problem(
    secret: str, cluster: str, owners: Sequence[OwnerRef], view: VClusterView
) -> tuple[Reason, str] | None:
    """Why ``secret`` is not the ``vc-<cluster>`` Secret vcluster wrote, or None if it is.

    Only for a ``view`` that is readable. ``kokumi cluster import --from vcluster`` asks the same.
    """
    uid = view.services.get(cluster)
    why = (
        "a ClusterSource from VCluster imports only the Secret vcluster writes, since anybody "
        "who may create Secrets can name and label one"
    )
    if uid is None:
        return (
            Reason.SECRET_NOT_OWNED,
            f"no vcluster {cluster} runs in this namespace (no Service {cluster} labelled "
            f"app: vcluster, which vcluster's chart makes beside its StatefulSet {cluster}): "
            f"{why}; this one is imported once vcluster {cluster} runs here, else delete it",
        )
    if not owners:
        return None  # vcluster with setOwner: false; its Service here vouches for the name
    for ref in owners:
        if (ref.api_version, ref.kind, ref.name) == ("v1", "Service", cluster):
            if not uid or ref.uid == uid:
                return None
            what = (
                f"its ownerReference names the Service {cluster} with uid {quoted(ref.uid)}, "
                f"and the Service {cluster} here has uid {uid}"
            )
            break
    else:
        named = ", ".join(
            f"{quoted(r.kind)} {quoted(r.name)} of {quoted(r.api_version)}" for r in owners[:3]
        )
        more = f" and {len(owners) - 3} more" if len(owners) > 3 else ""
        what = f"its owners are {named}{more}, not vcluster {cluster}'s Service {cluster}"
    owner = f"apiVersion v1, kind Service, name {cluster}" + (f", uid {uid}" if uid else "")
    return (
        Reason.SECRET_NOT_OWNED,
        f"{what}: {why}, owned by the vcluster's Service; if this is vcluster {cluster}'s, "
        f"set that ownerReference ({owner}), else delete it",
    )
