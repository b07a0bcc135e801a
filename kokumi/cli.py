"""``kokumi manager`` runs the controller; ``kokumi demo`` shows it on a local hub + spoke."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence

import trio

from kokumi.actors.context import Options
from kokumi.clustercli import add_parser as add_cluster_commands
from kokumi.kube.config import Config
from kokumi.kube.errors import ConfigError

__all__ = ["main"]


def _manager(args: argparse.Namespace) -> int:
    from kokumi.manager import run_manager  # noqa: PLC0415 - only this command needs it

    try:
        if args.kubeconfig or args.context:
            config = Config.from_kubeconfig(args.kubeconfig, context=args.context)
        else:
            config = Config.load()
    except ConfigError as exc:
        print(f"kokumi: {exc}", file=sys.stderr)
        return 2
    options = Options(
        namespace=args.namespace or config.namespace or "kokumi",
        argocd_namespace=args.argocd_namespace,
        keep_in_cluster=not args.no_in_cluster,
    )
    trio.run(until_signalled, run_manager, config, options)
    return 0


async def until_signalled(async_fn: Callable[..., Awaitable[object]], *args: object) -> object:
    """Run ``async_fn`` until it returns, or until SIGINT or SIGTERM stops it cleanly.

    Kubernetes stops a pod with SIGTERM: cancelling lets every actor, watch and check end inside
    its own nursery, instead of a KeyboardInterrupt tearing through them.
    """
    result: object = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                nonlocal result
                result = await async_fn(*args)
                nursery.cancel_scope.cancel()

            nursery.start_soon(run)
            async for signum in signals:
                logging.getLogger("kokumi").info(
                    "%s received: stopping", signal.Signals(signum).name
                )
                nursery.cancel_scope.cancel()
                break
    return result


def _demo(args: argparse.Namespace) -> int:
    from kokumi.demo import run_demo  # noqa: PLC0415 - only this command needs it

    return run_demo(once=args.once, timeout=args.timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kokumi", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(dest="command", required=True)

    manager = commands.add_parser("manager", help="run the Cluster controller")
    manager.add_argument("--kubeconfig", help="the hub's kubeconfig (default: in-cluster)")
    manager.add_argument("--context", help="the kubeconfig context to use")
    manager.add_argument(
        "--namespace", help="Kokumi's own namespace (default: the pod's, else kokumi)"
    )
    manager.add_argument("--argocd-namespace", default="argocd", help="Argo CD's namespace")
    manager.add_argument(
        "--no-in-cluster",
        action="store_true",
        help="do not keep the Cluster in-cluster and Environment local in Kokumi's namespace",
    )
    manager.set_defaults(run=_manager)

    demo = commands.add_parser(
        "demo", help="start a local hub + spoke, register the spoke, run the manager, show it"
    )
    demo.add_argument("--once", action="store_true", help="exit once everything is Ready")
    demo.add_argument("--timeout", type=float, default=180.0, help="seconds --once waits")
    demo.set_defaults(run=_demo)

    add_cluster_commands(commands)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # One line per HTTP request would drown what matters; httpx speaks up at WARNING.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
