"""``kokumi cluster remove``: delete a Cluster as the user, after saying what goes with it.

What goes with a Cluster is not in the Cluster: its kubeconfig Secret goes only when the Cluster
owns it (the garbage collector follows the ownerReference ``add`` writes; a Secret another tool
rotates, or one written with ``--secret-only``, stays), and its Argo CD registration is released
by the manager, whose finalizer holds the Cluster until it is. The command reads both first and
says them, then asks, as ``argocd cluster rm`` asks: a registration that goes takes Argo CD's
Applications on that cluster with it, which is more than ``kubectl delete`` of one object.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Mapping
from typing import Any, Final, Literal

from kokumi.cmd.cluster.command import (
    OneLineParser,
    examples,
    hub_client,
    hub_flags,
    rbac_hint,
    read_cluster,
    runner,
    where_of,
)
from kokumi.cmd.cluster.errors import CliError, CliUsageError, api_error
from kokumi.core import api
from kokumi.core.sources.spec import source_of
from kokumi.kube.client import Client
from kokumi.kube.errors import Conflict, Forbidden, KubeError, NotFound
from kokumi.kube.resources import SECRETS
from kokumi.objects import Resource, metadata_of
from kokumi.workspace.newcluster import Refused, check_name

__all__ = ["add_parser", "goes_with"]


def goes_with(
    cluster: Mapping[str, Any], secret: Mapping[str, Any] | Literal[False] | None
) -> list[str]:
    """What removing ``cluster`` takes with it and what it leaves, one line each.

    ``secret`` is the Secret its spec names: the object, None when there is none, False when the
    user may not read it (so whether the Cluster owns it is not known to them).
    """
    meta = metadata_of(cluster)
    namespace = meta.get("namespace", "")
    spec = cluster.get("spec") or {}
    ref = (spec.get("kubeconfig") or {}).get("secretRef") or {}
    said = []
    if not ref.get("name"):
        said.append("Secret: none (the Cluster connects InCluster)")
    else:
        where = f"Secret {namespace}/{ref['name']}"
        if secret is False:
            said.append(
                f"{where}: deleted with it if the Cluster owns it (you may not read it to tell)"
            )
        elif secret is None:
            said.append(f"{where}: not there")
        elif any(
            owner.get("uid") == meta.get("uid")
            for owner in metadata_of(secret).get("ownerReferences") or ()
        ):
            said.append(f"{where}: deleted with it (the Cluster owns it)")
        else:
            said.append(
                f"{where}: kept (the Cluster does not own it): delete it yourself if nothing "
                "else reads it"
            )
    if api.FINALIZER in (meta.get("finalizers") or ()):
        said.append(
            "Argo CD registration: released by Kokumi's manager, which then lets the Cluster go "
            f"(finalizer {api.FINALIZER}); Argo CD no longer deploys to it"
        )
    else:
        said.append("Argo CD registration: none held for it")
    made_by = source_of(cluster)
    if made_by is not None:
        said.append(
            f"ClusterSource {made_by[0]} made this Cluster and makes it again: to remove it for "
            "good, change or delete that source"
        )
    return said


async def _secret_named(
    hub: Client, cluster: Mapping[str, Any]
) -> Mapping[str, Any] | Literal[False] | None:
    meta = metadata_of(cluster)
    ref = ((cluster.get("spec") or {}).get("kubeconfig") or {}).get("secretRef") or {}
    if not ref.get("name"):
        return None
    try:
        return await hub.get(SECRETS, ref["name"], namespace=meta.get("namespace"))
    except NotFound:
        return None
    except KubeError:
        return False  # Forbidden, or unreadable: the line says it is not known


ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io",
    "v1",
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    namespaced=False,
)


async def _may_delete(hub: Client, namespace: str, name: str) -> bool:
    """Whether the user may delete the Cluster, asked before asking them (``kubectl auth
    can-i``): a user who may not is told so at once, not after answering y. A review that
    cannot be made says yes, and the delete itself answers."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "group": api.GROUP,
                "resource": api.CLUSTERS.plural,
                "verb": "delete",
                "namespace": namespace,
                "name": name,
            }
        },
    }
    try:
        answer = await hub.create(ACCESS_REVIEWS, review)
    except KubeError:
        return True
    return bool((answer.get("status") or {}).get("allowed", True))


def _confirmed(where: str) -> bool:
    """y or yes on stdin, as ``argocd cluster rm`` reads it; end of input is no."""
    print(f"Remove Cluster {where}? [y/N] ", end="", flush=True)
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):
        print()
    return answer.strip().lower() in ("y", "yes")


async def _cmd_remove(args: argparse.Namespace) -> None:
    try:
        check_name(args.name)
    except Refused as refused:
        raise CliUsageError(str(refused)) from None
    async with hub_client(args) as hub:
        namespace = where_of(args, hub)
        where = f"{namespace}/{args.name}"
        cluster = await read_cluster(hub, namespace, args.name, "delete")
        print(f"Cluster {where}, and with it:")
        for line in goes_with(cluster, await _secret_named(hub, cluster)):
            print(f"  {line}")
        if not await _may_delete(hub, namespace, args.name):
            raise CliError(
                f"cannot delete Cluster {where}: you may not delete Clusters in namespace "
                f"{namespace}, so nothing was removed; {rbac_hint('delete', namespace)}"
            )
        if not args.yes and not _confirmed(where):
            raise CliError(f"Cluster {where} not removed: answer y, or pass --yes")
        meta = metadata_of(cluster)
        try:
            # Only the Cluster shown: one made again meanwhile under its name is not this one.
            left = await hub.delete(api.CLUSTERS, args.name, namespace=namespace, uid=meta["uid"])
        except NotFound:
            print(f"Cluster {where} was removed meanwhile")
            return
        except Conflict:
            raise CliError(
                f"Cluster {where} was replaced by another of the same name meanwhile, so nothing "
                "was removed: run remove again to see what goes with that one"
            ) from None
        except Forbidden as exc:
            error = api_error(f"cannot delete Cluster {where}", exc)
            raise CliError(f"{error}; {rbac_hint('delete', namespace)}") from None
        except KubeError as exc:
            raise api_error(f"cannot delete Cluster {where}", exc) from None
    if left.get("kind") == "Cluster" and metadata_of(left).get("finalizers"):
        print(
            f"Cluster {where} is being removed: it is gone once the manager has released its "
            f"Argo CD registration (kubectl get clusters.{api.GROUP} {args.name} -n {namespace} "
            "-w shows when)"
        )
    else:
        print(f"Cluster {where} removed")


def add_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """Add ``remove`` and its flags to ``kokumi cluster``."""
    formatter = argparse.RawDescriptionHelpFormatter
    remove = sub.add_parser(
        "remove",
        help="delete a Cluster, after saying what goes with it",
        description=textwrap.dedent(
            """\
            Delete the Cluster NAME as the user of your kubeconfig. First says what goes with
            it: its kubeconfig Secret when the Cluster owns it (the garbage collector deletes it),
            and its Argo CD registration, which Kokumi's manager releases before the Cluster is
            gone. Then asks, as argocd cluster rm does, unless --yes."""
        ),
        epilog=examples(
            """
            kokumi cluster remove spoke -n platform
            kokumi cluster remove spoke -n platform --yes
            """
        ),
        formatter_class=formatter,
    )
    remove.add_argument("name", metavar="NAME", help="the Cluster's name")
    remove.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    remove.add_argument(
        "-y", "--yes", action="store_true", help="do not ask: for scripts (stdin is not read)"
    )
    hub_flags(remove)
    remove.set_defaults(run=runner(_cmd_remove))
