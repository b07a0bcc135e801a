"""The Secret edits of a handover: the waiting line a server's Secret records, and the relabel.

A server changes hands without its Secret ever going, so that Argo CD never sees the cluster
vanish: the registry updates the Secret in place, to name the new holder, and records on it who
waits next. That line lives on the Secret (not in memory) so that it survives a restart and, with
shards, is the one line every replica's waiters share. Each edit here is the one place it is
spelled; the registry decides when to write, this module what.

Pure: values in, values out; the registry does the writes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef

__all__ = [
    "ANNOTATION_WAITING",
    "first_waiting",
    "handed_to",
    "merged_line",
    "waiting_of",
    "with_waiting",
]

ANNOTATION_WAITING = "delivery.kokumi.dev/waiting"
"""The Clusters waiting for the server, in order, as ``namespace/name,namespace/name``.

The waiting order lives on the server's Secret so that it survives a restart of the manager: a
holder that lets go right after a restart hands the server to the Cluster that waited first, not
to whichever Cluster's check happens to finish first.
"""


# --- the waiting line on the Secret --------------------------------------------------------------


def waiting_of(secret: Mapping[str, Any]) -> tuple[ClusterRef, ...]:
    """The waiting order a Secret of Kokumi's records; malformed entries are skipped."""
    if not argocd.is_ours(secret):
        return ()
    metadata = secret.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(ANNOTATION_WAITING) if isinstance(annotations, Mapping) else None
    if not isinstance(value, str):
        return ()
    found: list[ClusterRef] = []
    for entry in value.split(","):
        namespace, _, name = entry.strip().partition("/")
        if namespace and name and "/" not in name:
            ref = ClusterRef(namespace=namespace, name=name)
            if ref not in found:
                found.append(ref)
    return tuple(found)


def with_waiting(secret: Mapping[str, Any], line: Sequence[ClusterRef]) -> dict[str, Any]:
    """A copy of ``secret`` that records ``line`` as its waiting order; no line, no annotation.

    Other annotations stay as they are, and an annotation map left empty goes, so a Secret with
    nobody waiting is the same whether it never had a line or its last waiter left.
    """
    metadata = dict(secret.get("metadata") or {})
    annotations = dict(metadata.get("annotations") or {})
    if line:
        annotations[ANNOTATION_WAITING] = ",".join(str(c) for c in line)
    else:
        annotations.pop(ANNOTATION_WAITING, None)
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    return {**secret, "metadata": metadata}


# --- handing the Secret over ---------------------------------------------------------------------


def handed_to(secret: Mapping[str, Any], holder: ClusterRef) -> dict[str, Any]:
    """``secret`` relabelled to register ``holder``, the rest of its line recorded behind it.

    Only the labels and the line change: the connection stays the old holder's until the
    replica that serves ``holder`` copies its own in, since the replica that hands over may
    have no copy of it. The old holder leaves the line as well as the labels.
    """
    previous = argocd.holder_of(secret)
    line = tuple(c for c in waiting_of(secret) if c not in (previous, holder))
    metadata = dict(secret.get("metadata") or {})
    metadata["labels"] = {
        **(metadata.get("labels") or {}),
        argocd.LABEL_CLUSTER: holder.name,
        argocd.LABEL_CLUSTER_NAMESPACE: holder.namespace,
    }
    return with_waiting({**secret, "metadata": metadata}, line)


# --- the waiting order of one server, across replicas --------------------------------------------


def merged_line(
    recorded: Sequence[ClusterRef],
    local: Sequence[ClusterRef],
    served: Callable[[ClusterRef], bool],
) -> tuple[ClusterRef, ...]:
    """The waiting order a replica records on a server's Secret, the next holder first.

    ``recorded`` is what the Secret says now, written by whichever replicas' Clusters wait;
    ``local`` this replica's waiters in the order they came. Entries of Clusters served
    elsewhere are never this replica's to drop or move; its own keep their place while they
    still wait, leave when they stop, and join at the end when they start.
    """
    waiting = set(local)
    kept = [c for c in recorded if not served(c) or c in waiting]
    recorded_set = set(kept)
    kept += [c for c in local if c not in recorded_set]
    return tuple(dict.fromkeys(kept))


def first_waiting(
    recorded: Sequence[ClusterRef],
    holder: ClusterRef | None,
    local: Collection[ClusterRef],
    served: Callable[[ClusterRef], bool],
) -> ClusterRef | None:
    """Who comes next once ``holder`` lets go: the first recorded waiter that still waits.

    Clusters served here still wait only if they are in ``local``; Clusters served elsewhere
    are taken at their word (their replica removes them when they stop). A local waiter not yet
    recorded comes after every recorded one.
    """
    for cluster in recorded:
        if cluster != holder and (not served(cluster) or cluster in local):
            return cluster
    return next((c for c in local if c != holder), None)
