"""``kokumi uninstall --release-finalizers``: let Clusters go once the manager is gone.

The manager puts the finalizer ``delivery.kokumi.dev/argocd-registration`` on every Cluster that
holds a registration in Argo CD, so that the registration is deleted even when the Cluster is
deleted while the manager is down: deleting such a Cluster waits for the manager to remove the
finalizer. Without a manager, it waits forever, and so does deleting the Cluster CRD (the API
server deletes a CRD only once all its objects are gone), and the namespace that holds it.

This command removes that finalizer, and only it, from every Cluster, as the person running it.
It deletes nothing else: the registrations Kokumi wrote in Argo CD's namespace stay, and it lists
them with the one kubectl line that deletes them, because deleting one takes the cluster away
from every Argo CD Application that deploys there, which is the operator's call to make.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import attrs
import trio

from kokumi.cmd import DONE, FAILED, CommandError, UsageError
from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS

__all__ = [
    "Released",
    "add_parser",
    "delete_registrations_command",
    "registrations_left",
    "release_finalizers",
    "run_uninstall",
]

log = logging.getLogger(__name__)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``uninstall`` and its flags to the ``kokumi`` command's subparsers."""
    remove = commands.add_parser(
        "uninstall", help="after the manager is gone: let Clusters go (see deploy/README.md)"
    )
    remove.add_argument("--kubeconfig", help="the hub's kubeconfig (default: as kubectl finds it)")
    remove.add_argument("--context", help="the kubeconfig context to use")
    remove.add_argument("--argocd-namespace", default="argocd", help="Argo CD's namespace")
    remove.add_argument(
        "--release-finalizers",
        action="store_true",
        help="remove Kokumi's finalizer from every Cluster, so that deleting them (and the CRD)"
        " does not wait for a manager that no longer runs",
    )
    remove.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    return run_uninstall(
        args.kubeconfig, args.context, args.argocd_namespace, args.release_finalizers
    )


REGISTRATIONS = f"{argocd.LABEL_MANAGED_BY}={argocd.MANAGED_BY},{argocd.LABEL_SECRET_TYPE}=cluster"


@attrs.frozen
class Released:
    """What one run did: Clusters released, and Clusters it could not change (with why)."""

    released: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]


async def release_finalizers(client: Client) -> Released:
    """Remove Kokumi's finalizer from every Cluster of every namespace.

    Each change names the resourceVersion it was computed from, so another finalizer added
    meanwhile is never dropped: a conflict re-reads the Cluster and tries again.
    """
    listing = await client.list(api.CLUSTERS)
    released: list[str] = []
    failed: list[tuple[str, str]] = []
    for item in listing["items"]:
        meta = item.get("metadata", {})
        ref = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            if await _release_one(client, item):
                released.append(ref)
        except errors.KubeError as exc:
            failed.append((ref, str(exc)))
    return Released(tuple(released), tuple(failed))


async def _release_one(client: Client, cluster: dict[str, Any]) -> bool:
    for _ in range(5):
        meta = cluster.get("metadata", {})
        finalizers = list(meta.get("finalizers") or ())
        if api.FINALIZER not in finalizers:
            return False
        patch = {
            "metadata": {
                "finalizers": [f for f in finalizers if f != api.FINALIZER],
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        try:
            await client.patch_merge(
                api.CLUSTERS, meta["name"], patch, namespace=meta.get("namespace")
            )
        except errors.NotFound:
            return False
        except errors.Conflict:
            cluster = await client.get(api.CLUSTERS, meta["name"], namespace=meta.get("namespace"))
            continue
        return True
    raise errors.Conflict(409, "Conflict", "the Cluster kept changing; run the command again")


async def registrations_left(client: Client, argocd_namespace: str) -> list[str]:
    """The names of Kokumi's cluster Secrets still in Argo CD's namespace (metadata only)."""
    try:
        listing = await client.list(
            SECRETS, namespace=argocd_namespace, label_selector=REGISTRATIONS, metadata_only=True
        )
    except errors.NotFound:
        return []
    return sorted(str(item["metadata"]["name"]) for item in listing["items"])


def delete_registrations_command(argocd_namespace: str) -> str:
    return f"kubectl -n {argocd_namespace} delete secret -l {REGISTRATIONS}"


def run_uninstall(
    kubeconfig: str | None, context: str | None, argocd_namespace: str, release: bool
) -> int:
    """The command: release, then say what is left in Argo CD's namespace; an exit status.

    Raises :class:`UsageError` before anything ran, :class:`CommandError` when the hub failed.
    """
    if not release:
        raise UsageError(
            "nothing to do; --release-finalizers removes Kokumi's finalizer from every Cluster"
            " (see deploy/README.md, Uninstall)",
            prefix="kokumi uninstall: ",
        )
    try:
        config = Config.from_kubeconfig(kubeconfig, context=context)
    except errors.ConfigError as exc:
        raise UsageError(str(exc)) from None

    async def run() -> tuple[Released, list[str]]:
        async with Client(config) as client:
            done = await release_finalizers(client)
            return done, await registrations_left(client, argocd_namespace)

    try:
        done, left = trio.run(run)
    except errors.KubeError as exc:
        raise CommandError(str(exc)) from None
    for ref in done.released:
        print(f"released Cluster {ref}")
    for ref, why in done.failed:
        print(f"kokumi: could not release Cluster {ref}: {why}", file=sys.stderr)
    if not done.released and not done.failed:
        print("no Cluster carries Kokumi's finalizer")
    if left:
        print(
            f"{len(left)} registration(s) Kokumi wrote remain in {argocd_namespace}"
            f" ({', '.join(left)}); Argo CD still deploys there. To remove them:"
            f" {delete_registrations_command(argocd_namespace)}"
        )
    return FAILED if done.failed else DONE
