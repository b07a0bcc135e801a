"""``kokumi cluster list``: the Clusters with their state, as a table, YAML, JSON or names."""

from __future__ import annotations

import argparse
import sys
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
from kokumi.cmd.cluster.errors import api_error
from kokumi.core import api
from kokumi.core.clusterview import scope_text
from kokumi.core.text import one_line
from kokumi.kube.errors import KubeError
from kokumi.objects import metadata_of
from kokumi.workspace.newcluster import SECRET_KEY

__all__ = ["add_parser", "cluster_rows"]


def cluster_rows(clusters: Sequence[Mapping[str, Any]], *, wide: bool = False) -> list[list[str]]:
    """The table ``kokumi cluster list`` prints, header first."""
    header = ["NAME", "NAMESPACE", "CONNECTION", "SERVER", "VERSION", "READY", "REASON", "LABELS"]
    if wide:
        header += ["SECRET", "SCOPE", "MESSAGE"]
    rows = [header]
    for cluster in clusters:
        meta = metadata_of(cluster)
        spec = cluster.get("spec") or {}
        status = cluster.get("status") or {}
        ready = ready_condition(cluster)
        row = [
            str(meta.get("name", "")),
            str(meta.get("namespace", "")),
            str(spec.get("connection", "")),
            str(status.get("server") or "-"),
            str(status.get("kubernetesVersion") or "-"),
            str(ready.get("status") or "Unknown"),
            str(ready.get("reason") or "-"),
            label_text(meta.get("labels")),
        ]
        if wide:
            ref = (spec.get("kubeconfig") or {}).get("secretRef") or {}
            secret = f"{ref['name']}/{ref.get('key', SECRET_KEY)}" if ref.get("name") else "-"
            shown = scope_text(cluster) if spec.get("connection") != "InCluster" else "-"
            row += [secret, shown, one_line(str(ready.get("message") or "not checked yet"))]
        rows.append(row)
    return rows


async def _cmd_list(args: argparse.Namespace) -> None:
    async with hub_client(args) as hub:
        namespace = None if args.all_namespaces else (args.namespace or hub.namespace)
        try:
            listing = await hub.list(
                api.CLUSTERS, namespace=namespace, label_selector=args.selector
            )
        except KubeError as exc:
            where = f"namespace {namespace}" if namespace else "all namespaces"
            if args.selector:
                where += f" with labels {args.selector}"
            raise api_error(f"cannot list Clusters in {where}", exc) from None
    items = sorted(
        listing.get("items") or [],
        key=lambda c: (c["metadata"].get("namespace", ""), c["metadata"]["name"]),
    )
    if args.output in OBJECT_FORMATS:
        print_clusters(items, args.output, one=False)
        return
    if not items:
        where = f"namespace {namespace}" if namespace else "any namespace"
        matching = f" matching {args.selector}" if args.selector else ""
        print(f"No Clusters{matching} in {where}.", file=sys.stderr)
        return
    print(table(cluster_rows(items, wide=args.output == "wide")), end="")


def add_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """Add ``list`` and its flags to ``kokumi cluster``."""
    formatter = argparse.RawDescriptionHelpFormatter
    list_cmd = sub.add_parser(
        "list",
        help="list Clusters with their state",
        description="List Clusters: connection, server, version, readiness and labels.",
        epilog=examples(
            """
            kokumi cluster list -n platform
            kokumi cluster list -A -o wide
            kokumi cluster list -n platform -o yaml
            kokumi cluster list -A -l fleet=edge,tier!=prod
            kokumi cluster list -n platform -l 'region in (eu,us)' -o name
            """
        ),
        formatter_class=formatter,
    )
    scope = list_cmd.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    list_cmd.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="only the Clusters whose labels match, as kubectl's -l: fleet=edge,tier!=prod",
    )
    list_cmd.add_argument(
        "-o",
        "--output",
        choices=("wide", *OBJECT_FORMATS),
        help="output format (default: a table); name prints cluster.delivery.kokumi.dev/NAME",
    )
    hub_flags(list_cmd)
    list_cmd.set_defaults(run=runner(_cmd_list))
