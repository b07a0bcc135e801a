"""``kokumi ui``: the Clusters pages in a browser, as the user of your kubeconfig.

It talks to the hub only, so it takes the hub as kubectl does (``--kubeconfig``, ``--context``;
docs/cli.md "Flags across commands"). It binds 127.0.0.1 and prints a link that signs in once.
With ``--in-cluster`` it is the Deployment of deploy/ui/: users sign in with their own bearer
token, or through the authenticating proxy ``--trusted-proxy`` names (docs/ui.md).
"""

from __future__ import annotations

import argparse
import functools
import socket

import trio

from kokumi.cmd import DONE, CommandError, UsageError
from kokumi.core.registry import argocd
from kokumi.kube.config import Config
from kokumi.kube.errors import KubeError
from kokumi.runtime.signals import until_signalled

KEY_NAMESPACE = "kokumi-signing"
KEY_SECRET = "kokumi-clusters-ui-session"  # noqa: S105 - a Secret's name
# Repeated from kokumi.ui.incluster, which loads the web stack: `kokumi --help` should not.

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
    ui.add_argument(
        "--namespaces", default="", metavar="NS,NS",
        help="where to look for a user's Clusters when they may not list every namespace (as "
        "well as their ServiceAccount's own and those they typed); each is tried as the user",
    )  # fmt: skip
    cluster = ui.add_argument_group(
        "in a cluster",
        "Serve many users, each signed in with their own bearer token (checked with a "
        "SelfSubjectReview), or named by a trusted authenticating proxy. The UI's own account "
        "(the pod's ServiceAccount, or --kubeconfig) keeps the session key in a Secret.",
    )
    cluster.add_argument(
        "--in-cluster", action="store_true", help="serve users in a cluster (deploy/ui/)"
    )
    cluster.add_argument(
        "--listen", default="0.0.0.0:8080", metavar="HOST:PORT",
        help="where to listen with --in-cluster (default: 0.0.0.0:8080)",
    )  # fmt: skip
    cluster.add_argument(
        "--trusted-proxy", action="append", default=[], metavar="ADDRESS",
        help="the authenticating proxy's address or CIDR (repeatable): believe its user and "
        "groups headers and impersonate them; requests from anywhere else are refused",
    )  # fmt: skip
    cluster.add_argument(
        "--proxy-user-header", default="X-Forwarded-User", help="the proxy's user header"
    )
    cluster.add_argument(
        "--proxy-groups-header", default="X-Forwarded-Groups",
        help="the proxy's groups header (comma-separated, may repeat)",
    )  # fmt: skip
    cluster.add_argument(
        "--session-secret", default=f"{KEY_NAMESPACE}/{KEY_SECRET}", metavar="NAMESPACE/NAME",
        help=f"the Secret holding the session key (default: {KEY_NAMESPACE}/{KEY_SECRET})",
    )  # fmt: skip
    cluster.add_argument(
        "--session-hours", type=float, default=8.0,
        help="how long a session lasts at most (default: 8; never longer than its token)",
    )  # fmt: skip
    cluster.add_argument(
        "--secure-cookies", action="store_true",
        help="always mark the session cookie Secure (it is anyway over TLS, or when a proxy "
        "sends X-Forwarded-Proto: https)",
    )  # fmt: skip
    cluster.add_argument("--tls-cert-file", help="serve HTTPS with this certificate (PEM)")
    cluster.add_argument("--tls-key-file", help="the key of --tls-cert-file (PEM)")
    ui.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    args.namespaces = _namespaces(args.namespaces)
    if args.in_cluster:
        return _run_in_cluster(args)
    if args.trusted_proxy:
        raise UsageError("--trusted-proxy is for --in-cluster: locally the link signs you in")
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
    trio.run(
        until_signalled,
        functools.partial(_serve, config, args.port, args.argocd_namespace, args.namespaces),
    )
    return DONE


def _namespaces(given: str) -> tuple[str, ...]:
    """The namespaces of ``--namespaces a,b``, each checked to be a namespace's name."""
    from kokumi.workspace.newcluster import Refused, check_namespace  # noqa: PLC0415

    names = tuple(dict.fromkeys(n.strip() for n in given.split(",") if n.strip()))
    for name in names:
        try:
            check_namespace(name)
        except Refused as refused:
            raise UsageError(f"--namespaces: {refused}") from None
    return names


async def _serve(
    config: Config, port: int, argocd_namespace: str, namespaces: tuple[str, ...]
) -> None:
    from kokumi.ui.serve import serve_ui  # noqa: PLC0415 - the web stack loads for this command only

    async with trio.open_nursery() as nursery:
        running = await nursery.start(
            functools.partial(
                serve_ui,
                config,
                port=port,
                argocd_namespace=argocd_namespace,
                namespaces=namespaces,
            )
        )
        print(
            f"Kokumi UI on {running.url}, acting as the user of your kubeconfig.\n"
            f"Open this link to sign in (it works once):\n\n    {running.sign_in_url}\n",
            flush=True,
        )


def _run_in_cluster(args: argparse.Namespace) -> int:
    namespace, slash, name = args.session_secret.partition("/")
    if not slash or not namespace or not name:
        raise UsageError(f"--session-secret {args.session_secret!r} is not NAMESPACE/NAME")
    if args.session_hours <= 0:
        raise UsageError("--session-hours must be more than 0")
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        raise UsageError("--tls-cert-file and --tls-key-file go together: give both")
    _host, colon, port = args.listen.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {args.listen!r} is not HOST:PORT, e.g. 0.0.0.0:8080")
    try:
        if args.kubeconfig or args.context:
            own = Config.from_kubeconfig(args.kubeconfig, context=args.context)
        else:
            own = Config.load()
    except KubeError as exc:
        raise UsageError(f"cannot connect to the hub: {exc}") from None
    from kokumi.ui.incluster import ProxyTrust, SessionKeyError  # noqa: PLC0415 - the web stack
    from kokumi.ui.serve import serve_in_cluster  # noqa: PLC0415 - loads for this command only

    proxy = None
    if args.trusted_proxy:
        try:
            proxy = ProxyTrust.parse(
                args.trusted_proxy, args.proxy_user_header, args.proxy_groups_header
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    serve = functools.partial(
        serve_in_cluster,
        own,
        bind=args.listen,
        proxy=proxy,
        key_secret=(namespace, name),
        lifetime=args.session_hours * 3600,
        secure_cookies=args.secure_cookies,
        tls=(args.tls_cert_file, args.tls_key_file) if args.tls_cert_file else None,
        argocd_namespace=args.argocd_namespace,
        namespaces=args.namespaces,
    )
    try:
        trio.run(until_signalled, serve)
    except* SessionKeyError as group:
        raise CommandError(str(group.exceptions[0])) from None
    return DONE
