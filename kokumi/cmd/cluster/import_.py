"""``kokumi cluster import``: Cluster API's, labelled Secrets', vcluster's and Argo CD's clusters.

Argo CD's become a ``<name>-kubeconfig`` Secret and a Cluster through
:mod:`kokumi.workspace.newcluster`, as ``add`` would make them; Cluster API's Secrets, and the
labelled Secrets of ``--from secrets`` and ``--from vcluster``, stay where their tool rotates
them, and the Cluster reads them there. Which Secrets, their names and their verdicts are the
ClusterSource's own rules (:mod:`kokumi.core.sources.secretsource`), once instead of for as long
as a source exists.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Mapping
from typing import Any, Final

import attrs

from kokumi.cmd.cluster.command import OneLineParser, examples, hub_client, hub_flags, runner
from kokumi.cmd.cluster.errors import api_error
from kokumi.core import api
from kokumi.core.kubeconfig.connection import Connection, KubeconfigRefused
from kokumi.core.kubeconfig.reader import minimise, render
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import is_argocd_own
from kokumi.core.sources import clusterapi, secretplan, secretsource, vcluster
from kokumi.core.sources.plan import controller_of, kubeconfig_problem
from kokumi.core.sources.secretsource import Shape
from kokumi.kube.client import Client
from kokumi.kube.errors import KubeError, NotFound
from kokumi.kube.resources import SECRETS
from kokumi.objects import secret_data
from kokumi.workspace.newcluster import (
    SECRET_KEY,
    Refused,
    Source,
    add_cluster,
    cluster_object,
    kubeconfig_secret_name,
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


@attrs.frozen
class ImportResult:
    """What became of one Secret found by ``import``: imported, kept, or why not."""

    source: str  # namespace/name of the Secret
    cluster: str | None  # the Cluster it became (or would become)
    state: str  # imported, updated, exists, not importable, failed
    detail: str = ""
    next_step: str = ""

    def lines(self, dry_run: bool) -> list[str]:
        if self.cluster is not None and self.state in ("imported", "updated"):
            verb = "would be imported" if dry_run else self.state
            head = f"{self.source}: {verb} as Cluster {self.cluster}"
        else:
            head = f"{self.source}: {self.state}"
        lines = [f"{head}: {self.detail}" if self.detail else head]
        if self.next_step:
            lines.append(f"  next: {self.next_step}")
        return lines


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


async def _in_the_way(
    hub: Client,
    namespace: str,
    name: str,
    secret: str,
    key: str = SECRET_KEY,
    context: str | None = None,
) -> tuple[bool, str | None]:
    """Whether the Cluster ``name`` exists, and why an import may not write it (None: it may).

    An import never re-points a Cluster somebody made otherwise: that would swap its credential.
    A Cluster that reads ``secret`` already is the one an earlier import made.
    """
    where = f"{namespace}/{name}"
    try:
        existing = await hub.get(api.CLUSTERS, name, namespace=namespace)
    except NotFound:
        return False, None
    except KubeError as exc:
        return False, str(api_error(f"cannot read Cluster {where}", exc))
    kubeconfig = (existing.get("spec") or {}).get("kubeconfig") or {}
    ref = kubeconfig.get("secretRef") or {}
    if (
        ref.get("name") == secret
        and ref.get("key", SECRET_KEY) == key
        and kubeconfig.get("context") == context
    ):
        return True, None
    return True, (
        f"Cluster {where} exists and reads another Secret: rename or delete it to import this one"
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
    exists, blocked = await _in_the_way(hub, namespace, name, secret, key, context)
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


_ARGOCD_LABELS: Final = "argocd.argoproj.io/"

_INSTEAD: Final = "use kokumi cluster add --create-service-account"


def argocd_connection(secret: Mapping[str, Any]) -> Connection | str:
    """The connection an Argo CD cluster Secret describes, or why Kokumi cannot carry it over.

    Read as Argo CD reads it (:func:`kokumi.core.registry.argocd.config_from_secret`), in Argo CD's
    order of precedence: AWS authentication, then an exec plugin, then basic auth or a bearer token.
    """
    server = argocd.server_of(secret)
    if server is None:
        return "it names no server: Argo CD ignores it too"
    if is_argocd_own(server):
        return (
            f"it is Argo CD's own cluster ({server}), reached with Argo CD's own "
            "connection: add a Cluster with --in-cluster instead"
        )
    try:
        config = argocd.config_from_secret(secret)
    except ValueError as exc:
        return f"Argo CD cannot read its config either ({exc})"
    if config["awsAuthConfig"]:
        return (
            "it signs in with awsAuthConfig (AWS IAM), which runs a program Kokumi does not "
            f"run: {_INSTEAD}"
        )
    if config["execProviderConfig"]:
        return (
            "it signs in with execProviderConfig (an exec credential plugin), which Kokumi does "
            f"not run: {_INSTEAD}"
        )
    if config["username"] or config["password"]:
        return (
            f"it signs in with username and password, which Kubernetes does not offer: {_INSTEAD}"
        )
    tls = config["tlsClientConfig"]
    return Connection(
        server=server,
        token=config["bearerToken"] or None,
        client_certificate=tls["certData"] or None,
        client_key=tls["keyData"] or None,
        certificate_authority=tls["caData"] or None,
        tls_server_name=tls["serverName"] or None,
        insecure_skip_tls_verify=tls["insecure"],
        proxy_url=config["proxyUrl"] or None,
    )


def cluster_name_for(text: str) -> str:
    """A DNS label from an Argo CD cluster name: lowercase, '-' for the rest, at most 63."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].strip("-") or "cluster"


async def import_argocd(
    hub: Client, namespace: str, argocd_namespace: str, *, dry_run: bool
) -> list[ImportResult]:
    """Each cluster Secret of Argo CD's that Kokumi did not write becomes a kubeconfig + Cluster.

    The old Secret is left alone: Kokumi never takes over a cluster Argo CD already knows. Until
    somebody deletes it, the new Cluster reports ClusterConflict naming it, hence the next step.
    """
    try:
        listing = await hub.list(
            SECRETS,
            namespace=argocd_namespace,
            label_selector=f"{argocd.LABEL_SECRET_TYPE}=cluster",
        )
    except KubeError as exc:
        what = f"cannot list Argo CD's cluster Secrets in {argocd_namespace}"
        raise api_error(what, exc) from None
    outcomes = []
    taken: set[str] = set()
    for secret in sorted(listing["items"], key=lambda s: s["metadata"]["name"]):
        meta = secret["metadata"]
        if argocd.is_ours(secret):
            continue
        source = f"{argocd_namespace}/{meta['name']}"
        found = argocd_connection(secret)
        if isinstance(found, str):
            outcomes.append(ImportResult(source, None, "not importable", found))
            continue
        label = (secret_data(secret, "name") or b"").decode("utf-8", "replace")
        name = base = cluster_name_for(label or meta["name"])
        number = 2
        while name in taken:
            suffix = f"-{number}"
            name, number = base[: 63 - len(suffix)] + suffix, number + 1
        taken.add(name)
        try:
            text = minimise(render(found, context=name, cluster=name, user=name))
        except KubeconfigRefused as refused:
            outcomes.append(ImportResult(source, None, "not importable", refused.refusal.message))
            continue
        labels = {
            k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(_ARGOCD_LABELS)
        }
        where = f"{namespace}/{name}"
        next_step = (
            "delete the old Argo CD Secret so Kokumi can take the server over: "
            f"kubectl delete secret {meta['name']} -n {argocd_namespace}"
        )
        _, blocked = await _in_the_way(hub, namespace, name, kubeconfig_secret_name(name))
        if blocked is not None:
            outcomes.append(ImportResult(source, where, "failed", blocked))
            continue
        state = "imported"
        if not dry_run:
            try:
                added = await add_cluster(
                    hub,
                    name,
                    namespace,
                    Source(found.server, text),
                    labels=labels,
                    description=f"Imported from Argo CD Secret {source}",
                )
            except Refused as error:
                outcomes.append(ImportResult(source, where, "failed", str(error)))
                continue
            state = "imported" if added.cluster_created else "updated"
        detail = f"Secret {kubeconfig_secret_name(name)}, server {found.server}"
        scoped = (secret_data(secret, "namespaces") or b"").decode("utf-8", "replace").strip()
        if scoped:
            # Kokumi registers clusters for every namespace; the credential may not reach them.
            detail += f" (Argo CD limited it to namespaces {scoped}; Kokumi does not)"
        outcomes.append(ImportResult(source, where, state, detail, next_step))
    return outcomes


async def _cmd_import(args: argparse.Namespace) -> int:
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
                hub, namespace, args.argocd_namespace, dry_run=args.dry_run
            )
            where = f"cluster Secrets in {args.argocd_namespace} that Kokumi did not write"
    if not outcomes:
        print(f"Nothing to import: no {where}.")
    for outcome in outcomes:
        for line in outcome.lines(args.dry_run):
            print(line)
    if args.dry_run:
        print("(dry run: nothing was written)")
    return 1 if any(o.state == "failed" for o in outcomes) else 0


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
            Secret <name>-kubeconfig and a Cluster; then delete the old Argo CD Secret so Kokumi
            can take the server over. Clusters that sign in with exec plugins or AWS IAM are
            listed as not importable, with why."""
        ),
        epilog=examples(
            """
            kokumi cluster import --from cluster-api -n platform
            kokumi cluster import --from secrets -l kokumi.dev/kubeconfig=true --key kubeconfig
            kokumi cluster import --from vcluster -n team-a
            kokumi cluster import --from argocd -n platform --dry-run
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
    import_cmd.add_argument("--dry-run", action="store_true", help="say what would be imported")
    hub_flags(import_cmd)
    import_cmd.set_defaults(run=runner(_cmd_import))
