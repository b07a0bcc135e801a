"""``kokumi cluster describe``: why a Cluster deploys or not, on one screen."""

from __future__ import annotations

import argparse
import contextlib
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from kokumi.cmd.cluster.command import (
    OneLineParser,
    examples,
    hub_config,
    hub_flags,
    label_text,
    ready_condition,
    runner,
    table,
)
from kokumi.cmd.cluster.errors import CliError, api_error
from kokumi.cmd.cluster.newcluster import FIELD_MANAGER, SECRET_KEY
from kokumi.core import api, argocd, clustersource, selectors, targets
from kokumi.core.ownership import ClusterRef, normalise_server
from kokumi.core.text import one_line
from kokumi.kube.client import EVENTS, SECRETS, Client
from kokumi.kube.errors import Forbidden, KubeError, NotFound
from kokumi.kube.objects import metadata_of

__all__ = ["add_parser", "describe_text", "environment_targets", "registration"]


def registration(
    cluster: Mapping[str, Any],
    argocd_secrets: Sequence[Mapping[str, Any]] | None,
    argocd_namespace: str,
) -> str:
    """One line on the Cluster's Argo CD registration: held here, by whom, or why there is none.

    ``argocd_secrets`` are the cluster Secrets of Argo CD's namespace, None when the user may not
    list them. Names come from :mod:`kokumi.core.argocd`, the module the registry writes them with.
    """
    meta = metadata_of(cluster)
    spec = cluster.get("spec") or {}
    if spec.get("connection") == "InCluster":
        return "none needed: Argo CD knows the cluster it runs in (InCluster)"
    server = (cluster.get("status") or {}).get("server")
    if not server:
        return "none: the Cluster reports no server yet, so it cannot be registered"
    server = normalise_server(server)
    name = argocd.secret_name(server)
    if argocd_secrets is None:
        return (
            f"unknown: you may not list Secrets in {argocd_namespace}; Kokumi would register "
            f"{server} in Secret {argocd_namespace}/{name}"
        )
    me = ClusterRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
    by_name = {s["metadata"]["name"]: s for s in argocd_secrets}
    ours = by_name.get(name)
    if ours is not None and argocd.is_ours(ours):
        holder = argocd.holder_of(ours)
        if holder == me:
            shown = argocd.cluster_name(me, server)
            return (
                f"Secret {argocd_namespace}/{name} registers this Cluster with Argo CD as {shown}"
            )
        if holder is not None:
            return (
                f"Cluster {holder.namespace}/{holder.name} holds server {server} (Secret "
                f"{argocd_namespace}/{name}); this Cluster waits and takes over once it lets go"
            )
    foreign = sorted(
        s["metadata"]["name"]
        for s in argocd_secrets
        if not argocd.is_ours(s)
        and (s["metadata"]["name"] == name or argocd.server_of(s) == server)
    )
    if foreign:
        return (
            f"Argo CD's Secret {argocd_namespace}/{foreign[0]}, which Kokumi did not write, holds "
            f"server {server}: delete it so Kokumi can take the server over"
        )
    return "none: Kokumi registers the Cluster while an Environment selects it and it is Ready"


def environment_targets(
    cluster: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, str]]:
    """(Environment, target, message) for each Environment of the namespace that selects it.

    Computed with :mod:`kokumi.core.selectors` and :mod:`kokumi.core.targets`, as the manager
    computes it, from the Clusters' reported status.
    """
    name = cluster["metadata"]["name"]
    parsed = [c for c in map(api.parse_cluster, clusters) if isinstance(c, api.Cluster)]
    parsed.sort(key=lambda c: c.metadata.name)
    rows: list[tuple[str, str, str]] = []
    for obj in sorted(environments, key=lambda e: e["metadata"]["name"]):
        environment = api.parse_environment(obj)
        if isinstance(environment, api.Invalid):
            continue
        selector = selectors.parse(environment.spec.cluster_selector)
        if isinstance(selector, selectors.SelectorError):
            continue
        selected = [c for c in parsed if selector.matches(c.metadata.labels)]
        for target in targets.targets([targets.selected_cluster(c) for c in selected]):
            if target.cluster == name:
                rows.append((environment.metadata.name, target.reason, target.message))
    return rows


async def _cmd_describe(args: argparse.Namespace) -> None:
    async with Client(hub_config(args), field_manager=FIELD_MANAGER) as hub:
        namespace = args.namespace or hub.namespace
        try:
            cluster = await hub.get(api.CLUSTERS, args.name, namespace=namespace)
        except NotFound:
            raise CliError(
                f"no Cluster {args.name} in namespace {namespace}: see kokumi cluster list "
                f"-n {namespace}"
            ) from None
        except KubeError as exc:
            raise api_error(f"cannot read Cluster {namespace}/{args.name}", exc) from None
        try:
            clusters = (await hub.list(api.CLUSTERS, namespace=namespace))["items"]
            environments = (await hub.list(api.ENVIRONMENTS, namespace=namespace))["items"]
        except KubeError as exc:
            what = f"cannot list the Clusters and Environments of namespace {namespace}"
            raise api_error(what, exc) from None
        secrets: list[dict[str, Any]] | None
        try:
            listing = await hub.list(
                SECRETS,
                namespace=args.argocd_namespace,
                label_selector=f"{argocd.LABEL_SECRET_TYPE}=cluster",
            )
            secrets = listing["items"]
        except (Forbidden, NotFound):
            secrets = None
        events: list[dict[str, Any]] = []
        uid = cluster["metadata"].get("uid")
        # Events are a courtesy; a user who may not read them still gets the rest.
        with contextlib.suppress(KubeError):
            events = (
                await hub.list(
                    EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={uid}"
                )
            )["items"]
    print(
        describe_text(cluster, clusters, environments, secrets, events, args.argocd_namespace),
        end="",
    )


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def describe_text(
    cluster: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, Any]],
    argocd_secrets: Sequence[Mapping[str, Any]] | None,
    events: Sequence[Mapping[str, Any]],
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE,
) -> str:
    """Everything that answers "why is my Cluster not deploying?", on one screen."""
    meta = metadata_of(cluster)
    spec = cluster.get("spec") or {}
    status = cluster.get("status") or {}
    ready = ready_condition(cluster)
    ref = (spec.get("kubeconfig") or {}).get("secretRef") or {}
    connection = str(spec.get("connection", ""))
    if ref.get("name"):
        connection += f", Secret {ref['name']} key {ref.get('key', SECRET_KEY)}"
    lines = [
        ("Name", str(meta.get("name", ""))),
        ("Namespace", str(meta.get("namespace", ""))),
        ("Labels", label_text(meta.get("labels"))),
        ("Description", str(spec.get("description") or "-")),
        ("Connection", connection),
    ]
    made_by = clustersource.source_of(cluster)
    if made_by is not None:
        # Edits to a sourced Cluster's labels or spec are undone: the source is where to edit.
        lines.append(
            (
                "Source",
                f"ClusterSource {made_by[0]} (from Cluster API's Secret {ref.get('name', '-')});"
                " edit the source, not this Cluster",
            )
        )
    lines += [
        ("Server", str(status.get("server") or "-")),
        ("Version", str(status.get("kubernetesVersion") or "-")),
    ]
    if ready:
        lines.append(("Ready", f"{ready.get('status')} ({ready.get('reason')})"))
        lines.append(("Message", one_line(str(ready.get("message", "")))))
        lines.append(("Since", str(ready.get("lastTransitionTime") or "-")))
    else:
        lines.append(("Ready", "Unknown (not checked yet: is the manager running?)"))
    observed = status.get("observedGeneration")
    generation = meta.get("generation")
    if observed is not None and observed != generation:
        lines.append(
            ("Observed", f"generation {observed} of {generation}: the status is of an older spec")
        )
    if events:
        last = max(_event_time(e) for e in events)
        lines.append(
            ("Last change", f"{last} (Kokumi checks about once a minute and records changes only)")
        )
    lines.append(("Registration", registration(cluster, argocd_secrets, argocd_namespace)))
    width = max(len(key) for key, _ in lines) + 2
    out = "".join(f"{key + ':':<{width}}{value}\n" for key, value in lines)
    found = environment_targets(cluster, clusters, environments)
    if found:
        rows = [["ENVIRONMENT", "TARGET", "MESSAGE"], *[list(row) for row in found]]
        out += "Environments:\n" + textwrap.indent(table(rows), "  ")
    else:
        out += (
            "Environments: none selects it: label it to match an Environment's "
            "spec.clusterSelector\n"
        )
    if events:
        recent = sorted(events, key=_event_time)[-5:]
        rows = [["TIME", "TYPE", "REASON", "MESSAGE"]]
        rows += [
            [
                _event_time(e),
                str(e.get("type", "")),
                str(e.get("reason", "")),
                one_line(str(e.get("message", ""))),
            ]
            for e in recent
        ]
        out += "Events:\n" + textwrap.indent(table(rows), "  ")
    return out


def add_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """Add ``describe`` and its flags to ``kokumi cluster``."""
    formatter = argparse.RawDescriptionHelpFormatter
    describe = sub.add_parser(
        "describe",
        help="why a Cluster deploys or not: status, Environments, Argo CD registration",
        description=(
            "Show a Cluster's status, the Environments that select it and its target in each, "
            "and who holds its server in Argo CD."
        ),
        epilog=examples("kokumi cluster describe spoke -n platform"),
        formatter_class=formatter,
    )
    describe.add_argument("name", metavar="NAME")
    describe.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    describe.add_argument(
        "--argocd-namespace", default=argocd.ARGOCD_NAMESPACE, help="Argo CD's namespace"
    )
    hub_flags(describe)
    describe.set_defaults(run=runner(_cmd_describe))
