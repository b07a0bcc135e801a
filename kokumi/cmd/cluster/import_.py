"""``kokumi cluster import``: Cluster API's, labelled Secrets', vcluster's and Argo CD's clusters.

Argo CD's become a ``<name>-kubeconfig`` Secret and a Cluster through
:mod:`kokumi.workspace.newcluster`, as ``add`` would make them, with the report of what the new
registration carries (:mod:`kokumi.cmd.cluster.fromargocd`); Cluster API's Secrets, and the
labelled Secrets of ``--from secrets`` and ``--from vcluster``, stay where their tool rotates
them, and the Cluster reads them there. Which Secrets, their names and their verdicts are the
ClusterSource's own rules (:mod:`kokumi.core.sources.secretsource`), once instead of for as long
as a source exists.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any, Final

from kokumi.cmd.cluster.command import OneLineParser, examples, hub_client, hub_flags, runner
from kokumi.cmd.cluster.errors import CliUsageError, api_error
from kokumi.cmd.cluster.fromargocd import (
    ImportResult,
    argocd_connection,
    cluster_name_for,
    import_argocd,
    in_the_way,
)
from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.core.registry.carry import Carry
from kokumi.core.sources import clusterapi, secretplan, secretsource, vcluster
from kokumi.core.sources.plan import controller_of, kubeconfig_problem
from kokumi.core.sources.secretsource import Shape
from kokumi.kube.client import Client
from kokumi.kube.errors import KubeError, NotFound
from kokumi.kube.resources import SECRETS
from kokumi.workspace.newcluster import (
    SECRET_KEY,
    cluster_object,
)

__all__ = [
    "ImportResult",
    "add_parser",
    "argocd_connection",
    "cluster_name_for",
    "import_argocd",
    "import_cluster_api",
    "import_secrets",
    "shape_from_flags",
]


CAPI_CLUSTER_NAME: Final = clusterapi.CAPI_CLUSTER_NAME


async def import_cluster_api(hub: Client, namespace: str, *, dry_run: bool) -> list[ImportResult]:
    """Each Cluster API ``<cluster>-kubeconfig`` Secret becomes a Cluster that references it.

    The Secret stays where it is and whose it is: Cluster API rotates it, and the Cluster reads the
    rotated kubeconfig from it. As a ClusterSource, the import takes only a Secret whose Cluster API
    cluster exists and controls it (:func:`~kokumi.core.sources.clusterapi.owner_problem`), then
    checks its kubeconfig, so a Cluster is only created for one the manager can use.
    """
    try:
        listing = await hub.list(SECRETS, namespace=namespace, label_selector=CAPI_CLUSTER_NAME)
    except KubeError as exc:
        raise api_error(f"cannot list Secrets in namespace {namespace}", exc) from None
    found = []
    for secret in sorted(listing["items"], key=lambda s: s["metadata"]["name"]):
        meta = secret["metadata"]
        name = clusterapi.capi_cluster_of(meta["name"], meta.get("labels") or {})
        if name is not None:  # not Cluster API's other Secrets of the cluster: CAs, keys
            controller = controller_of(meta.get("ownerReferences"))
            found.append((secret, clusterapi.SecretView(meta["name"], name, None, controller)))
    capi = await _capi_clusters(hub, namespace) if found else clusterapi.CapiView(True)
    outcomes = []
    for secret, view in found:
        source = f"{namespace}/{view.name}"
        problem = clusterapi.owner_problem(view, capi) or kubeconfig_problem(secret)
        if problem is not None:
            outcomes.append(ImportResult(source, None, "not importable", problem[1]))
            continue
        outcomes.append(await _import_reference(hub, namespace, view.cluster, view.name, dry_run))
    return outcomes


async def _capi_clusters(hub: Client, namespace: str) -> clusterapi.CapiView:
    """The Cluster API clusters of the namespace; none when Cluster API is not installed.

    Without them no Secret can be told to be Cluster API's, so a refused list ends the import.
    """
    try:
        listing = await hub.list(clusterapi.CAPI_CLUSTERS, namespace=namespace, metadata_only=True)
    except NotFound:
        return clusterapi.CapiView(True)  # no such kind: no Cluster API cluster either
    except KubeError as exc:
        what = (
            f"cannot list Cluster API's clusters in namespace {namespace}, which an import "
            "needs to take only the Secrets they control"
        )
        raise api_error(what, exc) from None
    metas = [item["metadata"] for item in listing["items"]]
    return clusterapi.CapiView(
        True,
        {str(m["name"]): dict(m.get("labels") or {}) for m in metas},
        {str(m["name"]): str(m.get("uid") or "") for m in metas},
    )


async def _import_reference(
    hub: Client,
    namespace: str,
    name: str,
    secret: str,
    dry_run: bool,
    *,
    key: str = SECRET_KEY,
    context: str | None = None,
    description: str = "",
) -> ImportResult:
    source = f"{namespace}/{secret}"
    where = f"{namespace}/{name}"
    exists, blocked = await in_the_way(hub, namespace, name, secret, key, context)
    if blocked is not None:
        return ImportResult(source, where, "failed", blocked)
    if exists:
        return ImportResult(source, where, "exists", f"Cluster {where} already reads it")
    body = cluster_object(
        name, namespace, secret=secret, description=description or f"Cluster API cluster {name}"
    )
    reads = f"it reads Secret {secret}"
    if key != SECRET_KEY:
        body["spec"]["kubeconfig"]["secretRef"]["key"] = key
        reads += f" key {key}"
    if context is not None:
        body["spec"]["kubeconfig"]["context"] = context
        reads += f" context {context}"
    if dry_run:
        return ImportResult(source, where, "imported", reads)
    try:
        await hub.create(api.CLUSTERS, body, namespace=namespace)
    except KubeError as exc:
        error = api_error(f"cannot create Cluster {where}", exc)
        return ImportResult(source, where, "failed", str(error))
    return ImportResult(source, where, "imported", reads)


def shape_from_flags(
    origin: str,
    selector: str | None,
    key: str | None,
    name_label: str | None,
    trim_prefix: str | None,
    trim_suffix: str | None,
    contexts: str | None,
) -> Shape | str:
    """The Secrets ``--from secrets`` or ``--from vcluster`` takes: a ClusterSource's spec, read
    by the source's own parser, so that the import and a source never disagree; or why not."""
    spec: dict[str, Any] = {}
    if selector:
        parsed = _selector(selector)
        if isinstance(parsed, str):
            return parsed
        spec["secretSelector"] = parsed
    for field, value in (("key", key), ("contexts", contexts)):
        if value is not None:
            spec[field] = value
    naming = {
        k: v
        for k, v in (
            ("label", name_label),
            ("trimPrefix", trim_prefix),
            ("trimSuffix", trim_suffix),
        )
        if v is not None
    }
    if naming:
        spec["naming"] = naming
    from_ = secretsource.FROM_VCLUSTER if origin == "vcluster" else secretsource.FROM_SECRETS
    shape = secretsource.parse_shape(from_, spec)
    if isinstance(shape, tuple):
        # The source's words name its fields; the flags are what the user typed.
        return (
            shape[1]
            .replace("spec.secretSelector", "--selector")
            .replace("spec.key", "--key")
            .replace("spec.naming.label", "--name-label")
            .replace("spec.naming", "--name-label or --trim-prefix/--trim-suffix")
            .replace("spec.contexts", "--contexts")
        )
    return shape


def _selector(text: str) -> dict[str, Any] | str:
    """``key=value`` and ``key`` (the label is set) terms, comma-separated, as a selector."""
    labels: dict[str, str] = {}
    exists: list[dict[str, str]] = []
    for term in (t.strip() for t in text.split(",")):
        key, sep, value = term.partition("=")
        if not key or "!" in key or (sep and "=" in value):
            return (
                f"--selector term {term!r} is not key=value or key: write labels the Secrets "
                "carry, such as kokumi.dev/kubeconfig=true"
            )
        if sep:
            labels[key] = value
        else:
            exists.append({"key": key, "operator": "Exists"})
    return {"matchLabels": labels, "matchExpressions": exists}


async def import_secrets(
    hub: Client, namespace: str, shape: Shape, *, dry_run: bool, label_selector: str = ""
) -> list[ImportResult]:
    """Each Secret ``shape`` matches (or each of its contexts) becomes a Cluster that reads it.

    The same rules as a ``from: Secrets`` or ``from: VCluster`` source: which Secrets, the
    Cluster's name, vcluster's Service beside a ``vc-<name>`` Secret, each kubeconfig's verdict
    (only one the manager can use makes a Cluster), and two Secrets that name one Cluster: the
    first by name has it (a Cluster that exists already is left as it is). ``label_selector``
    lets the server leave out the Secrets no rule would take: their data never leaves it.
    """
    try:
        listing = await hub.list(SECRETS, namespace=namespace, label_selector=label_selector)
    except KubeError as exc:
        raise api_error(f"cannot list Secrets in namespace {namespace}", exc) from None
    services = None
    if shape.tool == secretsource.VCLUSTER_APP and listing["items"]:
        services = await _vcluster_services(hub, namespace)
    outcomes = []
    taken: dict[str, str] = {}
    for secret in sorted(listing["items"], key=lambda s: s["metadata"]["name"]):
        meta = secret["metadata"]
        name = str(meta["name"])
        source = f"{namespace}/{name}"
        named = secretsource.cluster_name(shape, name, meta.get("labels") or {})
        if named is None:
            continue
        if isinstance(named, tuple):
            outcomes.append(ImportResult(source, None, "not importable", named[1]))
            continue
        if services is not None:
            owners = vcluster.owners_of(meta.get("ownerReferences"))
            refused = vcluster.problem(name, named, owners, services)
            if refused is not None:
                where = f"{namespace}/{named}"
                outcomes.append(ImportResult(source, where, "not importable", refused[1]))
                continue
        wanted: list[tuple[str | tuple[Any, str], str | None, tuple[Any, str] | None]]
        if shape.all_contexts:
            whole, each = secretplan.context_verdicts(secret, shape)
            if whole is not None:
                outcomes.append(ImportResult(source, None, "not importable", whole[1]))
                continue
            wanted = [(secretsource.context_cluster(c), c, problem) for c, problem in each]
        else:
            wanted = [(named, None, kubeconfig_problem(secret, shape))]
        for cluster, context, problem in wanted:
            if isinstance(cluster, tuple):
                outcomes.append(ImportResult(source, None, "not importable", cluster[1]))
                continue
            where = f"{namespace}/{cluster}"
            if problem is not None:
                outcomes.append(ImportResult(source, where, "not importable", problem[1]))
                continue
            if cluster in taken:
                first = f"Secret {taken[cluster]} names Cluster {cluster} too, and comes first"
                outcomes.append(ImportResult(source, where, "not importable", first))
                continue
            taken[cluster] = name
            what = f"{shape.tool} {cluster}" if shape.tool else f"kubeconfig Secret {name}"
            outcomes.append(
                await _import_reference(
                    hub,
                    namespace,
                    cluster,
                    name,
                    dry_run,
                    key=shape.key,
                    context=context,
                    description=f"{what}, imported",
                )
            )
    return outcomes


async def _vcluster_services(hub: Client, namespace: str) -> vcluster.VClusterView:
    """vcluster's Services of the namespace: a ``vc-<name>`` Secret is imported only beside its
    vcluster's Service, as a ClusterSource takes it; a refused list ends the import."""
    try:
        listing = await hub.list(
            vcluster.SERVICES,
            namespace=namespace,
            label_selector=vcluster.SERVICE_SELECTOR,
            metadata_only=True,
        )
    except KubeError as exc:
        what = (
            f"cannot list Services in namespace {namespace}, which an import needs to take only "
            "the Secrets vcluster writes beside its Service"
        )
        raise api_error(what, exc) from None
    return vcluster.view_of(True, [item["metadata"] for item in listing["items"]])


def _carry(flag: str, given: list[str]) -> Carry:
    """The manager's allow-list as the user repeats it here, or a usage error in its words."""
    try:
        return Carry.parse(given)
    except ValueError as exc:
        raise CliUsageError(f"{flag}: {exc}") from None


async def _cmd_import(args: argparse.Namespace) -> int:
    carry_labels = _carry("--carry-labels", args.carry_labels)
    carry_annotations = _carry("--carry-annotations", args.carry_annotations)
    if (carry_labels or carry_annotations) and args.source != "argocd":
        raise CliUsageError(
            "--carry-labels and --carry-annotations are for --from argocd: leave them out"
        )
    async with hub_client(args) as hub:
        namespace = args.namespace or hub.namespace
        if args.source == "cluster-api":
            outcomes = await import_cluster_api(hub, namespace, dry_run=args.dry_run)
            where = f"Secrets labeled {CAPI_CLUSTER_NAME} in namespace {namespace}"
        elif args.source in ("secrets", "vcluster"):
            shape = shape_from_flags(
                args.source,
                args.selector,
                args.key,
                args.name_label,
                args.trim_prefix,
                args.trim_suffix,
                args.contexts,
            )
            if isinstance(shape, str):
                print(f"error: {shape}")
                return 2
            terms = [t for t in (args.selector or "").split(",") if t]
            if args.source == "vcluster":
                terms = ["app=vcluster", secretsource.VCLUSTER_NAME_LABEL, *terms]
            outcomes = await import_secrets(
                hub, namespace, shape, dry_run=args.dry_run, label_selector=",".join(terms)
            )
            where = f"{shape.describe()} matched in namespace {namespace}"
        else:
            outcomes = await import_argocd(
                hub,
                namespace,
                args.argocd_namespace,
                dry_run=args.dry_run,
                carry_labels=carry_labels,
                carry_annotations=carry_annotations,
            )
            where = f"cluster Secrets in {args.argocd_namespace} that Kokumi did not write"
    if not outcomes:
        print(f"Nothing to import: no {where}.")
    for outcome in outcomes:
        for line in outcome.lines(args.dry_run):
            print(line)
    if args.dry_run:
        print("(dry run: nothing was written)")
    withheld = [o.source for o in outcomes if o.withheld]
    if withheld:
        print(
            f"Keep {', '.join(withheld)}: deleting "
            f"{'it' if len(withheld) == 1 else 'them'} now would lose labels an ApplicationSet "
            "may select on (see above)"
        )
    return 1 if any(o.state == "failed" or o.withheld for o in outcomes) else 0


def add_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """Add ``import`` and its flags to ``kokumi cluster``."""
    formatter = argparse.RawDescriptionHelpFormatter
    import_cmd = sub.add_parser(
        "import",
        help="turn Cluster API, vcluster, labelled Secrets' or Argo CD clusters into Clusters",
        description=textwrap.dedent(
            """\
            --from cluster-api: each Secret <cluster>-kubeconfig labeled
            cluster.x-k8s.io/cluster-name and controlled by its Cluster API cluster, as Cluster
            API writes it, becomes a Cluster of that name that reads it.
            --from secrets: each Secret --selector selects becomes a Cluster that reads it
            (under --key, default value), named after the Secret, --name-label's value or the
            name without --trim-prefix/--trim-suffix; --contexts All: one per context.
            --from vcluster: each vcluster's Secret vc-<name> becomes the Cluster <name>.
            --from argocd: each cluster Secret of Argo CD's that Kokumi did not write becomes a
            Secret <name>-kubeconfig and a Cluster (its namespaces and clusterResources become
            spec.scope); then delete the old Argo CD Secret so Kokumi can take the server over.
            Before that it says which of the old Secret's labels and annotations the new Argo CD
            Secret carries, given the manager's allow-list, which you repeat here with
            --carry-labels and --carry-annotations (the same values as the manager's flags, or
            its chart's); while a label would be lost it says to keep the old Secret, and exits
            1. Clusters that sign in with exec plugins or AWS IAM are listed as not importable,
            with why."""
        ),
        epilog=examples(
            """
            kokumi cluster import --from cluster-api -n platform
            kokumi cluster import --from secrets -l kokumi.dev/kubeconfig=true --key kubeconfig
            kokumi cluster import --from vcluster -n team-a
            kokumi cluster import --from argocd -n platform --dry-run
            kokumi cluster import --from argocd -n platform --carry-labels env,example.com/*
            """
        ),
        formatter_class=formatter,
    )
    import_cmd.add_argument(
        "--from",
        dest="source",
        required=True,
        choices=("cluster-api", "secrets", "vcluster", "argocd"),
        help="where from",
    )
    import_cmd.add_argument(
        "-l", "--selector", help="secrets, vcluster: labels of the Secrets, such as a=b,c"
    )
    import_cmd.add_argument("--key", help="secrets: the key of the kubeconfig (default value)")
    import_cmd.add_argument("--name-label", help="secrets: the label that names each Cluster")
    import_cmd.add_argument("--trim-prefix", help="secrets: taken off the Secret's name")
    import_cmd.add_argument("--trim-suffix", help="secrets: taken off the Secret's name")
    import_cmd.add_argument(
        "--contexts", choices=("Current", "All"), help="secrets: Current (default) or All"
    )
    import_cmd.add_argument(
        "-n", "--namespace", help="the workspace namespace (default: the context's)"
    )
    import_cmd.add_argument(
        "--argocd-namespace", default=argocd.ARGOCD_NAMESPACE, help="Argo CD's namespace"
    )
    import_cmd.add_argument(
        "--carry-labels",
        action="append",
        default=[],
        metavar="PATTERNS",
        help="argocd: the manager's --carry-labels, as its chart sets them: label keys and "
        "prefixes ending in *, comma-separated or repeated (default: none)",
    )
    import_cmd.add_argument(
        "--carry-annotations",
        action="append",
        default=[],
        metavar="PATTERNS",
        help="argocd: the manager's --carry-annotations, likewise (default: none)",
    )
    import_cmd.add_argument("--dry-run", action="store_true", help="say what would be imported")
    hub_flags(import_cmd)
    import_cmd.set_defaults(run=runner(_cmd_import))
