"""``kokumi cluster add | list | describe | label | remove | import``: Clusters from a shell.

Every command acts as the user of the current kubeconfig (or ``--hub-kubeconfig``), never as the
manager: their own RBAC applies, and the admission policy kokumi-cluster-secret-access sees who
names which Secret. One module per subcommand holds its flags and its command; the shared pieces
are :mod:`~kokumi.cmd.cluster.command` (the hub, the runner, the tables),
:mod:`~kokumi.cmd.cluster.spoke` (the cluster to add) and :mod:`~kokumi.cmd.cluster.errors`;
creating a Cluster and its kubeconfig Secret is :mod:`kokumi.workspace.newcluster`, which
``kokumi ui`` calls too. Nothing here prints a token, a key or a kubeconfig.
"""

from __future__ import annotations

import argparse
import functools

from kokumi.cmd.cluster import add, describe, import_, label, list_, remove
from kokumi.cmd.cluster.command import OneLineParser, examples, usage_error

__all__ = ["add_parser"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster`` and its subcommands to the ``kokumi`` command's subparsers."""
    formatter = argparse.RawDescriptionHelpFormatter
    cluster = commands.add_parser(
        "cluster",
        help="register and inspect Clusters: add, list, describe, label, remove, import",
        description="Register, inspect, label and remove Clusters as the user of your kubeconfig.",
        epilog=examples(
            """
            kokumi cluster add spoke -n platform --context spoke --label fleet=edge
            kokumi cluster list -A -l fleet=edge
            kokumi cluster label spoke -n platform tier=prod
            kokumi cluster remove spoke -n platform
            """
        ),
        formatter_class=formatter,
    )
    setattr(cluster, "error", functools.partial(usage_error, cluster))  # noqa: B010
    sub = cluster.add_subparsers(
        dest="cluster_command", required=True, metavar="COMMAND", parser_class=OneLineParser
    )
    add.add_parser(sub)
    list_.add_parser(sub)
    describe.add_parser(sub)
    label.add_parser(sub)
    remove.add_parser(sub)
    import_.add_parser(sub)
