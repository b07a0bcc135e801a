"""``kokumi ui``: the Clusters pages in a browser, as the user of your kubeconfig.

It talks to the hub only, so it takes the hub as kubectl does (``--kubeconfig``, ``--context``;
docs/cli.md "Flags across commands"). It binds 127.0.0.1 and prints a link that signs in once.
"""

from __future__ import annotations

import argparse
import functools
import socket

import trio

from kokumi.cmd import DONE, UsageError
from kokumi.core import argocd
from kokumi.kube.config import Config
from kokumi.kube.errors import KubeError
from kokumi.runtime.signals import until_signalled

__all__ = ["add_parser"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ui`` and its flags to the ``kokumi`` command's subparsers."""
    ui = commands.add_parser(
        "ui",
        help="the Clusters pages and the New Cluster form in your browser, as you",
        description=(
            "Serve the Clusters, Environments and New Cluster pages on 127.0.0.1, acting with "
            "your kubeconfig; print a link that signs in once."
        ),
        epilog="example:\n  kokumi ui --context hub --port 8765",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ui.add_argument("--kubeconfig", help="kubeconfig of the hub (default: as kubectl)")
    ui.add_argument("--context", help="context of the hub (default: the current context)")
    ui.add_argument(
        "--port", type=int, default=8765, help="port on 127.0.0.1 (default: 8765; 0: a free one)"
    )
    ui.add_argument(
        "--argocd-namespace", default=argocd.ARGOCD_NAMESPACE, help="Argo CD's namespace"
    )
    ui.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port: give 0 to 65535 (0: a free one)")
    try:
        config = Config.from_kubeconfig(args.kubeconfig, context=args.context, run_exec=True)
    except KubeError as exc:
        raise UsageError(f"cannot connect to the hub: {exc}") from None
    if args.port:
        # Said before anything starts, as a usage error, rather than from inside the server.
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", args.port))
            except OSError as exc:
                raise UsageError(
                    f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}: choose another "
                    "--port, or 0 for a free one"
                ) from None
    trio.run(until_signalled, functools.partial(_serve, config, args.port, args.argocd_namespace))
    return DONE


async def _serve(config: Config, port: int, argocd_namespace: str) -> None:
    from kokumi.ui.serve import serve_ui  # noqa: PLC0415 - the web stack loads for this command only

    async with trio.open_nursery() as nursery:
        running = await nursery.start(
            functools.partial(serve_ui, config, port=port, argocd_namespace=argocd_namespace)
        )
        print(
            f"Kokumi UI on {running.url}, acting as the user of your kubeconfig.\n"
            f"Open this link to sign in (it works once):\n\n    {running.sign_in_url}\n",
            flush=True,
        )
