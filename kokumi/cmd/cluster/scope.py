"""``spec.scope`` from ``--scope-namespace`` and ``--cluster-resources``, checked by the manager's
own parser, in the words of the flags the user typed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kokumi.cmd.cluster.errors import CliError
from kokumi.core import api
from kokumi.workspace.newcluster import Refused, check_cluster, cluster_object

__all__ = ["scope_from_flags"]

_FLAG_WORDS: Final = (
    ("spec.scope.namespaces", "--scope-namespace"),
    ("spec.scope.clusterResources", "--cluster-resources"),
    ("remove spec.scope", "leave out --scope-namespace and --cluster-resources"),
    ("spec.scope", "--scope-namespace"),
)


def scope_from_flags(
    name: str,
    namespace: str,
    given: Sequence[str],
    cluster_resources: bool,
    *,
    in_cluster: bool,
) -> api.Scope | None:
    """The scope the flags say (None: no flag given), or a one-line CliError saying what to fix.

    The would-be Cluster is read by :func:`kokumi.core.api.parse_cluster`, as the manager reads
    it, so the command refuses exactly what the manager would call Invalid.
    """
    namespaces = [n.strip() for chunk in given for n in chunk.split(",") if n.strip()]
    if not namespaces and not cluster_resources:
        if given:
            raise CliError("--scope-namespace is empty: name a namespace, such as team-a")
        return None
    scope = api.Scope(tuple(namespaces), cluster_resources)
    body = cluster_object(
        name, namespace, secret=None if in_cluster else f"{name}-kubeconfig", scope=scope
    )
    try:
        check_cluster(body)
    except Refused as refused:
        text = str(refused)
        for field, flag in _FLAG_WORDS:
            text = text.replace(field, flag)
        raise CliError(text) from None
    return scope
