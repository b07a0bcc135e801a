"""``kokumi cluster label``: add, change or remove a Cluster's labels, as ``kubectl label`` does.

A Cluster's labels are what Environments select it by, so a label changed by mistake moves
deployments: as kubectl, a label that has a value already changes only with ``--overwrite``, and
``KEY-`` removes one. The change is one merge patch conditional on the version read, so a label
someone else set meanwhile is never overwritten unseen; the admission policy
kokumi-object-limits (how many labels, how large) and the API server's own label rules apply,
and their refusal is said in one line.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

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
from kokumi.cmd.cluster.errors import CliError, CliUsageError, api_error, warn
from kokumi.core import api
from kokumi.core.sources.spec import source_of
from kokumi.kube.errors import Conflict, Forbidden, KubeError
from kokumi.objects import metadata_of
from kokumi.workspace.newcluster import Refused, check_name

__all__ = ["Change", "add_parser", "change_of", "patch_of"]


@attrs.frozen
class Change:
    """What the command line asks: labels to set, keys to remove."""

    set: dict[str, str]
    remove: tuple[str, ...]


def change_of(arguments: Sequence[str]) -> Change:
    """``KEY=VALUE`` and ``KEY-`` as kubectl reads them; anything else is refused before any
    request. Whether a key or value is valid the API server says, in its own words."""
    labels: dict[str, str] = {}
    remove: list[str] = []
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if equals and key:
            labels[key] = value
        elif not equals and len(argument) > 1 and argument.endswith("-"):
            remove.append(argument[:-1])
        else:
            raise CliUsageError(
                f"{argument!r} is neither KEY=VALUE (to set a label) nor KEY- (to remove one)"
            )
    both = sorted(set(labels) & set(remove))
    if both:
        raise CliUsageError(
            f"label {both[0]} is both set and removed: give it once, as KEY=VALUE or KEY-"
        )
    return Change(labels, tuple(dict.fromkeys(remove)))


def patch_of(
    labels: Mapping[str, str], change: Change, *, overwrite: bool, where: str
) -> dict[str, str | None]:
    """The labels to change, with None for those to remove: only what differs from ``labels``.

    A label with another value already is refused without ``--overwrite``, in kubectl's terms.
    """
    patch: dict[str, str | None] = {}
    for key, value in change.set.items():
        if key in labels and labels[key] != value and not overwrite:
            raise CliError(
                f"label {key} of Cluster {where} is {labels[key]!r} already, and --overwrite "
                f"was not given: add --overwrite to make it {value!r}; nothing was changed"
            )
        if labels.get(key) != value:
            patch[key] = value
    for key in change.remove:
        if key in labels:
            patch[key] = None
    return patch


def _warn_absent(change: Change, labels: Mapping[str, str], where: str) -> None:
    """As kubectl: a label to remove that is not there is said, and is no error."""
    for key in change.remove:
        if key not in labels:
            warn(f"Cluster {where} has no label {key} to remove")


def _said(patch: Mapping[str, str | None]) -> str:
    set_ = [f"{key}={value}" for key, value in patch.items() if value is not None]
    removed = [key for key, value in patch.items() if value is None]
    said = []
    if set_:
        said.append("set " + ", ".join(set_))
    if removed:
        said.append("removed " + ", ".join(removed))
    return "; ".join(said)


async def _cmd_label(args: argparse.Namespace) -> None:
    try:
        check_name(args.name)
    except Refused as refused:
        raise CliUsageError(str(refused)) from None
    change = change_of(args.labels)
    async with hub_client(args) as hub:
        namespace = where_of(args, hub)
        where = f"{namespace}/{args.name}"
        for _attempt in range(5):
            cluster = await read_cluster(hub, namespace, args.name, "patch")
            meta = metadata_of(cluster)
            patch = patch_of(
                meta.get("labels") or {}, change, overwrite=args.overwrite, where=where
            )
            if not patch:
                _warn_absent(change, meta.get("labels") or {}, where)
                print(f"Cluster {where} not labeled: its labels are so already")
                return
            body: dict[str, Any] = {
                # The version read: a label changed meanwhile is a Conflict, read again.
                "metadata": {"labels": patch, "resourceVersion": meta["resourceVersion"]}
            }
            try:
                await hub.patch_merge(api.CLUSTERS, args.name, body, namespace=namespace)
            except Conflict:
                continue
            except Forbidden as exc:
                error = api_error(f"cannot label Cluster {where}", exc)
                if "ValidatingAdmissionPolicy" in str(error):
                    raise error from None  # the policy's own words say what to fix
                raise CliError(f"{error}; {rbac_hint('patch', namespace)}") from None
            except KubeError as exc:
                raise api_error(f"cannot label Cluster {where}", exc) from None
            break
        else:
            raise CliError(f"Cluster {where} kept changing while being labeled: run again")
    _warn_absent(change, meta.get("labels") or {}, where)
    print(f"Cluster {where} labeled: {_said(patch)}")
    made_by = source_of(cluster)
    if made_by is not None:
        warn(
            f"ClusterSource {made_by[0]} made Cluster {where} and may set its labels back: "
            "label it in the source"
        )


def add_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """Add ``label`` and its flags to ``kokumi cluster``."""
    formatter = argparse.RawDescriptionHelpFormatter
    label = sub.add_parser(
        "label",
        help="add, change or remove a Cluster's labels",
        description=textwrap.dedent(
            """\
            Change the labels of the Cluster NAME as the user of your kubeconfig, as kubectl
            label does: KEY=VALUE sets a label, KEY- removes one, and a label that has another
            value already changes only with --overwrite. Environments select Clusters by their
            labels: a change moves what deploys where."""
        ),
        epilog=examples(
            """
            kokumi cluster label spoke -n platform fleet=edge tier=prod
            kokumi cluster label spoke -n platform tier=staging --overwrite
            kokumi cluster label spoke -n platform tier-
            """
        ),
        formatter_class=formatter,
    )
    label.add_argument("name", metavar="NAME", help="the Cluster's name")
    label.add_argument(
        "labels", metavar="KEY=VALUE|KEY-", nargs="+", help="a label to set, or to remove"
    )
    label.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    label.add_argument(
        "--overwrite", action="store_true", help="change labels that have a value already"
    )
    hub_flags(label)
    label.set_defaults(run=runner(_cmd_label))
