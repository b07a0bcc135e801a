"""``kokumi cluster describe``: why a Cluster deploys or not, on one screen."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from kokumi.cmd.cluster.command import (
    OBJECT_FORMATS,
    OneLineParser,
    examples,
    hub_client,
    hub_flags,
    label_text,
    print_clusters,
    ready_condition,
    runner,
    table,
)
from kokumi.cmd.cluster.errors import CliError, api_error
from kokumi.core import api
from kokumi.core.clusterview import environment_targets, registration, scope_text
from kokumi.core.registry import argocd
from kokumi.core.sources.spec import source_of
from kokumi.core.text import one_line
from kokumi.kube.errors import KubeError, NotFound
from kokumi.objects import metadata_of
from kokumi.workspace.inspect import cluster_facts
from kokumi.workspace.newcluster import SECRET_KEY

__all__ = ["add_parser", "describe_text", "environment_targets", "registration"]


async def _cmd_describe(args: argparse.Namespace) -> None:
    async with hub_client(args) as hub:
        namespace = args.namespace or hub.namespace
        try:
            if args.output:
                # The object alone, as kubectl get prints it: one read, the user's right to get.
                cluster = await hub.get(api.CLUSTERS, args.name, namespace=namespace)
                print_clusters([cluster], args.output, one=True)
                return
            facts = await cluster_facts(hub, namespace, args.name, args.argocd_namespace)
        except NotFound:
            raise CliError(
                f"no Cluster {args.name} in namespace {namespace}: see kokumi cluster list "
                f"-n {namespace}"
            ) from None
        except KubeError as exc:
            raise api_error(f"cannot read Cluster {namespace}/{args.name}", exc) from None
    text = describe_text(
        facts.cluster,
        facts.clusters,
        facts.environments,
        facts.argocd_secrets,
        facts.events,
        args.argocd_namespace,
    )
    print(text, end="")


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
        context = (spec.get("kubeconfig") or {}).get("context")
        if context:
            connection += f" context {context}"
    lines = [
        ("Name", str(meta.get("name", ""))),
        ("Namespace", str(meta.get("namespace", ""))),
        ("Labels", label_text(meta.get("labels"))),
        ("Description", str(spec.get("description") or "-")),
        ("Connection", connection),
    ]
    if spec.get("connection") != "InCluster":
        lines.append(("Scope", scope_text(cluster)))
    made_by = source_of(cluster)
    if made_by is not None:
        # Edits to a sourced Cluster's labels or spec are undone: the source is where to edit.
        # Cluster API's sources describe their Clusters as "Cluster API cluster <name>".
        whose = (
            "Cluster API's Secret"
            if str(spec.get("description") or "").startswith("Cluster API cluster ")
            else "Secret"
        )
        lines.append(
            (
                "Source",
                f"ClusterSource {made_by[0]} (from {whose} {ref.get('name', '-')});"
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
        epilog=examples(
            """
            kokumi cluster describe spoke -n platform
            kokumi cluster describe spoke -n platform -o yaml
            """
        ),
        formatter_class=formatter,
    )
    describe.add_argument("name", metavar="NAME")
    describe.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    describe.add_argument(
        "--argocd-namespace", default=argocd.ARGOCD_NAMESPACE, help="Argo CD's namespace"
    )
    describe.add_argument(
        "-o",
        "--output",
        choices=OBJECT_FORMATS,
        help="print the Cluster itself instead (default: the summary), as kubectl get -o does",
    )
    hub_flags(describe)
    describe.set_defaults(run=runner(_cmd_describe))
