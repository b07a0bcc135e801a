"""``kokumi manager``: the Cluster controller as the container runs it, its flags beside it."""

from __future__ import annotations

import argparse
import logging
import secrets
import socket

import trio

from kokumi.cmd import DONE, FAILED, UsageError
from kokumi.core.cluster.egress import DEFAULT_DENY, EgressPolicy
from kokumi.core.fleet.leader import DEFAULT_LEASE_NAME, LeaderElection, Timing
from kokumi.core.fleet.shards import Sharding
from kokumi.core.registry.carry import Carry, Carrying
from kokumi.core.secretaccess import SecretScope
from kokumi.core.sources.bounds import MAX_CLUSTERS_PER_SOURCE, MAX_CONTEXTS_PER_SECRET, Bounds
from kokumi.kube.config import SERVICE_ACCOUNT_ROOT, Config
from kokumi.kube.errors import ConfigError
from kokumi.runtime.election import LeadershipLost
from kokumi.runtime.logs import FORMATS
from kokumi.runtime.options import Options

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``manager`` and its flags to the ``kokumi`` command's subparsers."""
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
    manager.add_argument(
        "--secrets-scope",
        choices=[scope.value for scope in SecretScope],
        default=SecretScope.NAMESPACE.value,
        help="where to follow Secrets: in each namespace holding Kubeconfig Clusters, with a"
        " RoleBinding of kokumi-manager-secrets there (default), or cluster-wide, which needs the"
        " ClusterRoleBinding in deploy/optional and lets the manager read every Secret",
    )
    manager.add_argument(
        "--probe-deny-cidr",
        action="append",
        default=[],
        metavar="CIDR",
        help="never probe a Kubeconfig Cluster's server at these addresses, beyond the default"
        f" {', '.join(DEFAULT_DENY)} (repeat the flag; the most specific CIDR decides)",
    )
    manager.add_argument(
        "--probe-allow-cidr",
        action="append",
        default=[],
        metavar="CIDR",
        help="probe these addresses even inside a denied CIDR (repeat the flag; on a tie, allow"
        " wins)",
    )
    manager.add_argument(
        "--max-contexts-per-secret",
        type=_positive,
        default=MAX_CONTEXTS_PER_SECRET,
        metavar="N",
        help="a ClusterSource with contexts: All makes Clusters of the first N contexts of a"
        " Secret by name, and says so in its status past them (default"
        f" {MAX_CONTEXTS_PER_SECRET})",
    )
    manager.add_argument(
        "--max-clusters-per-source",
        type=_positive,
        default=MAX_CLUSTERS_PER_SOURCE,
        metavar="N",
        help="a ClusterSource keeps at most N Clusters, the first by Secret name, and says so"
        f" in its status past them; none is deleted for it (default {MAX_CLUSTERS_PER_SOURCE:,})",
    )
    for kind in ("labels", "annotations"):
        manager.add_argument(
            f"--carry-{kind}",
            action="append",
            default=[],
            metavar="KEYS",
            help=f"copy the holding Cluster's {kind} with these keys or key prefixes (a"
            " trailing *) onto its Argo CD cluster Secret, for ApplicationSets: comma-separated,"
            " or repeat the flag; Kokumi's and Argo CD's own keys never (default: none)",
        )
    manager.add_argument(
        "--service-account-dir",
        default=SERVICE_ACCOUNT_ROOT,
        help="where the pod's service-account token, ca.crt and namespace are mounted",
    )
    manager.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run only while holding the Lease in Kokumi's namespace, so replicas never both"
        " write (default: on)",
    )
    manager.add_argument(
        "--leader-elect-lease-name", default=DEFAULT_LEASE_NAME, help="the Lease's name"
    )
    for flag, default, what in (
        ("lease-duration", 15.0, "seconds a standby waits after the Lease last changed"),
        ("renew-deadline", 10.0, "seconds the leader keeps trying to renew before it stops"),
        ("retry-period", 2.0, "seconds between two tries to take or renew the Lease"),
    ):
        manager.add_argument(
            f"--leader-elect-{flag}", type=float, default=default, help=f"{what} ({default:g})"
        )
    manager.add_argument(
        "--shards",
        type=int,
        default=1,
        help="split the Clusters among the replicas in this many shards, one Lease each"
        " (kokumi-clusters-shard-<i>-of-<N>); 1: one leader does everything (default 1)",
    )
    manager.add_argument(
        "--max-shards",
        type=int,
        default=None,
        help="hold at most this many shards at once (default: all); see docs/operations.md",
    )
    manager.add_argument(
        "--health-port",
        type=int,
        default=8080,
        help="port of /healthz, /readyz and /metrics (0: none; default 8080)",
    )
    manager.add_argument(
        "--log-format", choices=FORMATS, default="text", help="text, or one JSON object a line"
    )
    manager.add_argument(
        "--field-manager",
        default="kokumi",
        help="the name in managedFields of every write (default kokumi)",
    )
    manager.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The command: the flags and the hub's config checked first, then the manager until a signal.

    A lost Lease ends it with status 1 once it has stopped writing; Kubernetes restarts the pod.
    """
    from kokumi.manager import run_manager_until_signalled  # noqa: PLC0415 - only this command

    try:
        election = _leader_election(args)
        sharding = _sharding(args)
        carry = _carrying(args)
        if sharding is not None:
            election = None  # the shard Leases replace the single leader Lease
        if args.kubeconfig or args.context:
            config = Config.from_kubeconfig(args.kubeconfig, context=args.context)
        else:
            config = Config.load(root=args.service_account_dir)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    try:
        egress = EgressPolicy.from_cidrs(deny=args.probe_deny_cidr, allow=args.probe_allow_cidr)
    except ValueError as exc:
        raise UsageError(f"--probe-deny-cidr/--probe-allow-cidr: {exc}") from None
    options = Options(
        namespace=args.namespace or config.namespace or "kokumi",
        argocd_namespace=args.argocd_namespace,
        keep_in_cluster=not args.no_in_cluster,
        secrets_scope=SecretScope(args.secrets_scope),
        probe_egress=egress,
        leader_election=election,
        sharding=sharding,
        health_port=args.health_port or None,
        field_manager=args.field_manager,
        freeze_heap=True,
        source_bounds=Bounds(args.max_contexts_per_secret, args.max_clusters_per_source),
        carry=carry,
    )
    lost: BaseException | None = None
    try:
        trio.run(run_manager_until_signalled, config, options)
    except* LeadershipLost as group:
        lost = group
        while isinstance(lost, BaseExceptionGroup):
            lost = lost.exceptions[0]
    if lost is not None:
        # Stopped writing already; Kubernetes restarts the pod, which comes back as a standby.
        logging.getLogger("kokumi").error("leadership lost: %s; exiting", lost)
        return FAILED
    return DONE


def _positive(text: str) -> int:
    """A bound of 1 or more: 0 would make a source keep nothing, which deleting it does."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def _carrying(args: argparse.Namespace) -> Carrying:
    """``--carry-labels``/``--carry-annotations``; ValueError names the flag and the pattern."""
    parsed = []
    for kind in ("labels", "annotations"):
        try:
            parsed.append(Carry.parse(getattr(args, f"carry_{kind}")))
        except ValueError as exc:
            raise ValueError(f"--carry-{kind}: {exc}") from None
    return Carrying(*parsed)


def _leader_election(args: argparse.Namespace) -> LeaderElection | None:
    """The election flags as :class:`LeaderElection`; ValueError names a bad combination."""
    if not args.leader_elect:
        return None
    timing = Timing(
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )
    # The pod's name, and a suffix so that a restarted pod is a new candidate, as in client-go.
    identity = f"{socket.gethostname()}_{secrets.token_hex(4)}"
    return LeaderElection(identity, lease_name=args.leader_elect_lease_name, timing=timing)


def _sharding(args: argparse.Namespace) -> Sharding | None:
    """``--shards``/``--max-shards`` as :class:`Sharding` (None: one shard, today's manager)."""
    if args.shards == 1:
        if args.max_shards is not None:
            raise ValueError("--max-shards needs --shards above 1: set both, or neither")
        return None
    timing = Timing(
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )
    identity = f"{socket.gethostname()}_{secrets.token_hex(4)}"
    return Sharding(
        identity, args.shards, args.max_shards, timing, leader_lease=args.leader_elect_lease_name
    )
