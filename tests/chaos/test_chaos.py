"""Chaos on the real hub: a seeded random sequence of changes while manager replicas are killed.

The manager runs as two real processes (``python -m kokumi manager --shards 2``, leader election
on, Lease timings of a few seconds) against the real hub and spoke, as the replicas of one
Deployment. A seeded random sequence creates and deletes Clusters and Environments, relabels,
points kubeconfig Secrets at other servers (the one spoke reached at several URLs: its own,
``localhost`` and TCP forwarders of the test's, which go down and up again), breaks and mends
credentials, deletes Kokumi's Argo CD Secrets behind the manager's back, plants and removes
foreign Argo CD Secrets — and meanwhile SIGKILLs a replica at random moments (mostly one that
holds shard Leases, so its shards move to the other once the Leases expire; it starts again a
few operations later), restarts the hub's kube-apiserver once (etcd keeps the data), and changes
the shard count once as a rolling update does: one replica is stopped (SIGTERM) and started
again with ``--shards 3 --max-shards 2``, some operations later the other, so for a while the
two counts stand side by side and the new one waits until the old one's Leases are handed back
or have expired.

After the sequence, once things settle: the Argo CD Secrets, their holders, every Cluster's Ready
reason and finalizer equal what ``tests.support.prediction`` (the pure core) predicts from the final
objects; the foreign Secrets are untouched; deleting every Cluster leaves no Secret and no
finalizer behind. Throughout, a watch on Argo CD's namespace checks that no Secret is deleted and
created again for a holder none of whose inputs changed meanwhile.

The credentials carry a random canary (a refused token, a proxy password, a token in a broken
kubeconfig) or are one (the key of a client certificate the spoke accepts); afterwards no manager
log line, Event, status or file under the test's temp dir holds any of them. A failing run
prints its seed and the command that replays it.

``CHAOS_SEED`` replays a seed (the sequence of operations, kills and the count change; which
replica holds which shard when is up to the Leases); ``CHAOS_OPS`` sets the number of operations
(200 here, the soak session runs more); ``CHAOS_KILLS`` the least number of SIGKILLs (5).
"""

from __future__ import annotations

import base64
import functools
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import yaml

from kokumi.core import api
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef, normalise_server
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.resources import EVENTS, LEASES, NAMESPACES, SECRETS
from kokumi.kube.watch import Resync, WatchEvent, watch
from kokumi.testing import canary
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration, closed_port_server
from tests.support import prediction
from tests.support.manager import drop_finalizers, hub_client, make_namespace

SEED = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**32))
OPERATIONS = int(os.environ.get("CHAOS_OPS", "200"))
KILLS = int(os.environ.get("CHAOS_KILLS", "5"))
SETTLE = 120.0  # seconds the settled state may take to appear after the last operation

NAMES = ("a", "b", "c")
KUBECONFIGS = ("k0", "k1", "k2")
TIERS = ("gold", "iron")
CREDENTIALS = ("good", "good", "client-key", "refused", "proxy", "broken")
# A re-created Secret counts as spurious only when nothing touching its holder or server
# happened within this many seconds before the Secret last appeared: the manager may act on a
# view that is that old.
STALE_VIEW = 2.0

SEEN = {
    "operations": 0,
    "kills": 0,
    "kills_serving": 0,  # of a replica that held a shard Lease
    "hub_restarts": 0,
    "count_changes": 0,
    "holders": 0,
    "waiters": 0,
    "blocked": 0,
    "targets": 0,
}


# --- the spoke at several URLs ---------------------------------------------------------------


async def _pump(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
        await sink.send_eof()  # type: ignore[attr-defined]
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


async def _forward(port: int, client: trio.SocketStream) -> None:
    """One connection through the forwarder: bytes both ways, TLS end to end."""
    async with client:
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            return
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client, upstream)
            nursery.start_soon(_pump, upstream, client)


@attrs.define
class Forwarder:
    """A TCP forwarder to the spoke on a port of its own: one more server URL for the spoke.
    ``down()`` closes its port (connections are refused: an outage), ``up()`` opens it again."""

    nursery: trio.Nursery
    target: int
    port: int = 0
    scope: trio.CancelScope | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def is_up(self) -> bool:
        return self.scope is not None

    async def up(self) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        scope = self.scope = trio.CancelScope()

        async def serve() -> None:
            try:
                with scope:
                    await trio.serve_listeners(functools.partial(_forward, self.target), listeners)
            finally:
                with trio.CancelScope(shield=True):
                    for listener in listeners:
                        await listener.aclose()

        self.nursery.start_soon(serve)

    async def down(self) -> None:
        assert self.scope is not None
        self.scope.cancel()
        self.scope = None
        await trio.lowlevel.checkpoint()  # let it close the port


# --- the manager processes -------------------------------------------------------------------

# Short Lease timings: a SIGKILLed replica's shards move to the other within a few seconds.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.5
SHARDS_BEFORE, SHARDS_AFTER = 2, 3
# At the new count a replica holds at most this many shards, so the two replicas split them
# (with no limit the first one up takes every shard and the other only stands by).
MAX_SHARDS_AFTER = 2


@attrs.define
class ManagerProcess:
    """One replica: ``python -m kokumi manager --shards N`` on the hub's admin kubeconfig, with
    leader election on and one log file per start."""

    name: str
    hub: APIServer
    own: str
    argocd: str
    logs: Path
    shards: int = SHARDS_BEFORE
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    down_for: int = 0  # operations to wait before starting it again

    def start(self) -> None:
        assert self.process is None
        self.starts += 1
        limit = [f"--max-shards={MAX_SHARDS_AFTER}"] if self.shards == SHARDS_AFTER else []
        with (self.logs / f"manager-{self.name}-{self.starts}.log").open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kokumi",
                    "manager",
                    "--kubeconfig",
                    str(self.hub.admin_kubeconfig),
                    "--namespace",
                    self.own,
                    "--argocd-namespace",
                    self.argocd,
                    "--no-in-cluster",
                    f"--shards={self.shards}",
                    *limit,
                    f"--leader-elect-lease-duration={LEASE_DURATION:g}",
                    f"--leader-elect-renew-deadline={RENEW_DEADLINE:g}",
                    f"--leader-elect-retry-period={RETRY_PERIOD:g}",
                    "--health-port=0",
                    "--log-format=json",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def identity(self) -> str | None:
        """Its candidate name in the Leases, as its log says once it stands (None before)."""
        log = self.logs / f"manager-{self.name}-{self.starts}.log"
        found = re.search(r"candidate ([\w.-]+)", log.read_text(errors="replace"))
        return found.group(1) if found else None

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, its memory gone, its Leases left to expire."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None
        self.kills += 1

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"manager {self.name} exited with {self.process.returncode}")

    def stop(self) -> None:
        """SIGTERM, as a rolling update does: the replica hands its Leases back."""
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


@attrs.define
class Replicas:
    """The replicas of one Deployment: any of them may be SIGKILLed, and the shard count
    changes once, one replica after the other."""

    members: list[ManagerProcess]

    @property
    def starts(self) -> int:
        return sum(each.starts for each in self.members)

    def check_alive(self) -> None:
        for each in self.members:
            each.check_alive()

    def stop(self) -> None:
        for each in self.members:
            each.stop()


# --- the test's view of the Argo CD namespace -------------------------------------------------


@attrs.define
class Recreations:
    """Follows Kokumi's Argo CD Secrets: a Secret deleted and created again for the same holder,
    with nothing touching that holder's namespace or that server in between, is a violation."""

    touched: list[tuple[float, str | None, str | None]]
    current: dict[str, tuple[ClusterRef, str, float]] = attrs.field(factory=dict)
    gone: dict[str, tuple[ClusterRef, str, float]] = attrs.field(factory=dict)
    violations: list[str] = attrs.field(factory=list)
    deletions: int = 0
    creations: int = 0
    writes: int = 0  # every ADDED and MODIFIED event: the manager's creates and updates

    def _touched(self, ref: ClusterRef, server: str, since: float, until: float) -> bool:
        return any(
            since - STALE_VIEW <= at <= until and (namespace == ref.namespace or srv == server)
            for at, namespace, srv in self.touched
        )

    def seen(self, secret: dict[str, Any], now: float) -> None:
        holder = argocd.holder_of(secret)
        server = argocd.server_of(secret)
        name = secret["metadata"]["name"]
        if holder is None or server is None:
            return
        server = normalise_server(server)
        known = self.current.get(name)
        if known is not None and known[0] == holder:
            return
        if known is None:
            self.creations += 1
            before = self.gone.pop(name, None)
            if (
                before is not None
                and before[0] == holder
                and not self._touched(holder, server, before[2], now)
            ):
                self.violations.append(
                    f"Secret {name} for {server} was deleted and created again for {holder},"
                    " which never changed"
                )
        self.current[name] = (holder, server, now)

    def deleted(self, name: str) -> None:
        known = self.current.pop(name, None)
        if known is not None:
            self.deletions += 1
            self.gone[name] = known

    def resync(self, objects: tuple[dict[str, Any], ...], now: float) -> None:
        names = {obj["metadata"]["name"] for obj in objects}
        for name in list(self.current):
            if name not in names:
                self.deleted(name)
        for obj in objects:
            self.seen(obj, now)


async def follow_argocd(
    client: Client,
    namespace: str,
    recreations: Recreations,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    send, receive = trio.open_memory_channel[WatchEvent | Resync](1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(
                watch,
                client,
                SECRETS,
                send,
                namespace=namespace,
                label_selector=f"{argocd.LABEL_MANAGED_BY}={argocd.MANAGED_BY}",
                backoff_max=1.0,
            )
        )
        task_status.started()
        async for event in receive:
            now = time.monotonic()
            if isinstance(event, Resync):
                recreations.resync(event.objects, now)
            elif event.type == "DELETED":
                recreations.deleted(event.object["metadata"]["name"])
            else:
                recreations.writes += 1
                recreations.seen(event.object, now)


# --- the sequence -----------------------------------------------------------------------------


def _b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


@attrs.define
class Chaos:
    rng: random.Random
    client: Client
    hub: APIServer
    replicas: Replicas
    registration: Registration
    servers: list[str]  # the spoke's URLs, the last one a closed port
    namespaces: list[str]
    argocd: str
    own: str  # Kokumi's namespace: the shard Leases
    client_identity: tuple[bytes, bytes]  # a client certificate and key the spoke accepts
    recreations: Recreations
    forwarders: list[Forwarder]
    history: list[str] = attrs.field(factory=list)
    foreign: dict[str, str] = attrs.field(factory=dict)  # name -> resourceVersion we wrote

    @property
    def dead(self) -> str:
        return self.servers[-1]

    def note(self, what: str, namespace: str | None = None, server: str | None = None) -> None:
        self.history.append(what)
        self.recreations.touched.append(
            (time.monotonic(), namespace, normalise_server(server) if server else None)
        )

    async def retrying(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """A user's write: a 404/409 is the sequence racing itself; a dropped connection (the hub
        restarting) is tried again."""
        deadline = trio.current_time() + 60
        while True:
            try:
                return await call()
            except (errors.NotFound, errors.Conflict, errors.AlreadyExists):
                return None
            except (errors.TransportError, errors.ServiceUnavailable):
                if trio.current_time() > deadline:
                    raise
                await trio.sleep(0.5)

    # The kubeconfigs, with a canary in every credential that is not the spoke's real token.

    def kubeconfig(self, server: str, credential: str) -> str:
        document = yaml.safe_load(self.registration.kubeconfig)
        document["clusters"][0]["cluster"]["server"] = server
        user = document["users"][0]["user"]
        if credential == "refused":
            user["token"] = canary.token("refused")
        elif credential == "client-key":
            cert, key = self.client_identity
            document["users"][0]["user"] = {
                "client-certificate-data": _b64(cert),
                "client-key-data": _b64(key),
            }
        elif credential == "proxy":
            _, port = closed_port_server().rsplit(":", 1)
            document["clusters"][0]["cluster"]["proxy-url"] = canary.proxy_url(f"127.0.0.1:{port}")
        elif credential == "broken":
            del document["clusters"][0]["cluster"]["server"]
            user["token"] = canary.token("broken")
        return str(yaml.safe_dump(document))

    def probe(self, connection: Connection) -> str:
        """What the check of a connection finds: the spoke answers at every URL but the dead
        one; the canary token is refused; the proxy listens nowhere; the spoke's token and the
        client certificate it issued are accepted."""
        down = [f.url for f in self.forwarders if not f.is_up]
        if normalise_server(connection.server) in {normalise_server(u) for u in [self.dead, *down]}:
            return "Unreachable"
        if connection.proxy_url is not None:
            return "Unreachable"
        if connection.client_key is not None:
            return "Ready"
        if connection.token != self.registration.token:
            return "Unauthorized"
        return "Ready"

    # The operations.

    async def put(self, resource: Any, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]

        async def write() -> None:
            try:
                existing = await self.client.get(resource, name, namespace=namespace)
            except errors.NotFound:
                await self.client.create(resource, body, namespace=namespace)
                return
            if existing["metadata"].get("deletionTimestamp"):
                return
            existing["metadata"]["labels"] = body["metadata"].get("labels", {})
            for field in ("spec", "data"):
                if field in body:
                    existing[field] = body[field]
            await self.client.replace(resource, existing, namespace=namespace)

        await self.retrying(write)

    async def op_cluster(self) -> None:
        ns, name = self.rng.choice(self.namespaces), self.rng.choice(NAMES)
        tier = self.rng.choice(TIERS)
        secret = self.rng.choice(KUBECONFIGS)
        self.note(f"cluster {ns}/{name} tier={tier} secret={secret}", ns)
        await self.put(
            api.CLUSTERS,
            {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}},
                "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": secret}}},
            },
        )

    async def op_relabel(self) -> None:
        ns, name = self.rng.choice(self.namespaces), self.rng.choice(NAMES)
        tier = self.rng.choice(TIERS)
        self.note(f"relabel {ns}/{name} tier={tier}", ns)
        await self.retrying(
            lambda: self.client.patch_merge(
                api.CLUSTERS, name, {"metadata": {"labels": {"tier": tier}}}, namespace=ns
            )
        )

    async def op_delete_cluster(self) -> None:
        ns, name = self.rng.choice(self.namespaces), self.rng.choice(NAMES)
        self.note(f"delete cluster {ns}/{name}", ns)
        await self.retrying(lambda: self.client.delete(api.CLUSTERS, name, namespace=ns))

    async def op_kubeconfig(self) -> None:
        ns, name = self.rng.choice(self.namespaces), self.rng.choice(KUBECONFIGS)
        server = self.rng.choice(self.servers)
        credential = self.rng.choice(CREDENTIALS)
        self.note(f"kubeconfig {ns}/{name} -> {server} ({credential})", ns)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": ns},
            "data": {"value": _b64(self.kubeconfig(server, credential))},
        }
        await self.put(SECRETS, body)

    async def op_swap(self) -> None:
        """Two kubeconfig Secrets of a namespace trade contents: both holders change server."""
        ns = self.rng.choice(self.namespaces)
        first, second = self.rng.sample(KUBECONFIGS, 2)
        self.note(f"swap kubeconfigs {ns}/{first} <-> {second}", ns)

        async def swap() -> None:
            try:
                one = await self.client.get(SECRETS, first, namespace=ns)
                two = await self.client.get(SECRETS, second, namespace=ns)
            except errors.NotFound:
                return
            one["data"], two["data"] = two.get("data"), one.get("data")
            await self.client.replace(SECRETS, one, namespace=ns)
            await self.client.replace(SECRETS, two, namespace=ns)

        await self.retrying(swap)

    async def op_delete_kubeconfig(self) -> None:
        ns, name = self.rng.choice(self.namespaces), self.rng.choice(KUBECONFIGS)
        self.note(f"delete kubeconfig {ns}/{name}", ns)
        await self.retrying(lambda: self.client.delete(SECRETS, name, namespace=ns))

    async def op_environment(self) -> None:
        ns = self.rng.choice(self.namespaces)
        name = self.rng.choice(("env-gold", "env-all"))
        selector: dict[str, Any] = {"matchLabels": {"tier": "gold"}}
        if name == "env-all":
            selector = {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}
        self.note(f"environment {ns}/{name}", ns)
        await self.put(
            api.ENVIRONMENTS,
            {
                "apiVersion": api.API_VERSION,
                "kind": "Environment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterSelector": selector},
            },
        )

    async def op_delete_environment(self) -> None:
        ns = self.rng.choice(self.namespaces)
        name = self.rng.choice(("env-gold", "env-all"))
        self.note(f"delete environment {ns}/{name}", ns)
        await self.retrying(lambda: self.client.delete(api.ENVIRONMENTS, name, namespace=ns))

    async def op_delete_argocd_secret(self) -> None:
        """Behind the manager's back: it must write the registration again."""
        listing = await self.retrying(
            lambda: self.client.list(
                SECRETS,
                namespace=self.argocd,
                label_selector=f"{argocd.LABEL_MANAGED_BY}={argocd.MANAGED_BY}",
            )
        )
        items = (listing or {}).get("items") or []
        if not items:
            return
        secret = self.rng.choice(items)
        self.note(
            f"delete Argo CD Secret {secret['metadata']['name']}",
            None,
            argocd.server_of(secret),
        )
        await self.retrying(
            lambda: self.client.delete(SECRETS, secret["metadata"]["name"], namespace=self.argocd)
        )

    async def op_plant_foreign(self) -> None:
        server = self.rng.choice(self.servers)
        name = f"foreign-{argocd.server_hash(server)[:8]}"
        self.note(f"plant foreign Secret for {server}", None, server)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": self.argocd,
                "labels": {argocd.LABEL_SECRET_TYPE: "cluster"},
            },
            "data": {"server": _b64(server), "name": _b64(f"hand-made-{name}")},
        }
        created = await self.retrying(
            lambda: self.client.create(SECRETS, body, namespace=self.argocd)
        )
        if created is not None:
            self.foreign[name] = created["metadata"]["resourceVersion"]

    async def op_remove_foreign(self) -> None:
        if not self.foreign:
            return
        name = self.rng.choice(sorted(self.foreign))
        secret = await self.retrying(lambda: self.client.get(SECRETS, name, namespace=self.argocd))
        self.note(f"remove foreign Secret {name}", None, argocd.server_of(secret or {}))
        del self.foreign[name]
        await self.retrying(lambda: self.client.delete(SECRETS, name, namespace=self.argocd))

    async def op_outage(self) -> None:
        """A forwarder's port closes or opens again: its holder must keep its registration."""
        forwarder = self.rng.choice(self.forwarders)
        if forwarder.is_up:
            self.note(f"outage of {forwarder.url}")
            await forwarder.down()
        else:
            self.note(f"{forwarder.url} answers again")
            await forwarder.up()

    OPERATIONS: tuple[tuple[str, int], ...] = (
        ("op_cluster", 6),
        ("op_relabel", 4),
        ("op_delete_cluster", 2),
        ("op_kubeconfig", 6),
        ("op_swap", 2),
        ("op_delete_kubeconfig", 1),
        ("op_environment", 3),
        ("op_delete_environment", 1),
        ("op_delete_argocd_secret", 2),
        ("op_plant_foreign", 1),
        ("op_remove_foreign", 1),
        ("op_outage", 1),
    )

    async def run(self, operations: int, kills: int) -> None:
        names = [name for name, _ in self.OPERATIONS]
        weights = [weight for _, weight in self.OPERATIONS]
        # Kills at least ``kills`` times, at steps the seed picks, a replica the seed picks; the
        # hub restarts once; the shard count changes once, one replica some steps after the
        # other, so the two counts run side by side meanwhile.
        kill_at = set(self.rng.sample(range(5, operations - 5), kills))
        restart_at = self.rng.randrange(operations // 4, 3 * operations // 4)
        first = self.rng.randrange(operations // 4, operations // 2)
        rollout = {first: 0, first + self.rng.randrange(1, max(2, min(10, operations // 4))): 1}
        for step in range(operations):
            for replica in self.replicas.members:
                if replica.process is None:
                    if replica.down_for <= 0:
                        self.history.append(f"start manager {replica.name}")
                        replica.start()
                    replica.down_for -= 1
                else:
                    replica.check_alive()
            running = [r for r in self.replicas.members if r.process is not None]
            if running and (step in kill_at or self.rng.random() < 0.01):
                # Mostly one that serves shards: killing a mere standby moves nothing.
                serving = await self.serving(running)
                if serving and self.rng.random() < 0.75:
                    running = serving
                replica = self.rng.choice(running)
                # At a random moment: while it starts, lists, or works through a backlog.
                await trio.sleep(self.rng.choice((0.0, 0.2, 0.5, 1.0, 2.0)))
                self.history.append(
                    f"SIGKILL manager {replica.name}"
                    + (" (serving)" if replica in serving else " (standing by)")
                )
                replica.kill()
                SEEN["kills"] += 1
                SEEN["kills_serving"] += replica in serving
                replica.down_for = self.rng.randrange(0, 4)
            if step in rollout:
                replica = self.replicas.members[rollout[step]]
                self.history.append(f"roll manager {replica.name} to --shards {SHARDS_AFTER}")
                await trio.to_thread.run_sync(replica.stop)
                replica.shards = SHARDS_AFTER
                replica.down_for = 0
                replica.start()
                SEEN["count_changes"] += rollout[step]  # counted once both have rolled
            if step == restart_at:
                self.history.append("restart hub kube-apiserver")
                # On this (the main) thread, blocking the loop for the few seconds it takes:
                # a server started from a worker thread would not die with the test process.
                self.hub.restart()
                SEEN["hub_restarts"] += 1
            await getattr(self, self.rng.choices(names, weights)[0])()
            SEEN["operations"] += 1
            await trio.sleep(self.rng.choice((0.0, 0.0, 0.02, 0.05, 0.1, 0.3)))
        for replica in self.replicas.members:
            if replica.process is None:
                self.history.append(f"start manager {replica.name}")
                replica.start()

    async def serving(self, replicas: list[ManagerProcess]) -> list[ManagerProcess]:
        """Those of ``replicas`` that hold a shard Lease now, as the hub has it."""
        listing = await self.retrying(lambda: self.client.list(LEASES, namespace=self.own))
        holders = {
            (lease.get("spec") or {}).get("holderIdentity")
            for lease in (listing or {}).get("items") or []
        }
        return [each for each in replicas if each.identity() in holders - {None, ""}]

    # Reading the outcome.

    async def objects(self) -> prediction.Objects:
        clusters: list[dict[str, Any]] = []
        environments: list[dict[str, Any]] = []
        secrets: dict[tuple[str, str], dict[str, Any]] = {}
        for ns in self.namespaces:
            clusters += (await self.client.list(api.CLUSTERS, namespace=ns))["items"]
            environments += (await self.client.list(api.ENVIRONMENTS, namespace=ns))["items"]
            for secret in (await self.client.list(SECRETS, namespace=ns))["items"]:
                secrets[(ns, secret["metadata"]["name"])] = secret
        found = await self.client.list(SECRETS, namespace=self.argocd)
        return prediction.Objects(clusters, environments, secrets, found["items"], self.argocd)

    async def settled(self) -> prediction.Counts:
        last: AssertionError | None = None
        with trio.move_on_after(SETTLE):
            while True:
                self.replicas.check_alive()
                try:
                    objects = await self.objects()
                    counts = prediction.check_converged(objects, self.servers, self.probe)
                    SEEN["targets"] += prediction.check_environments(objects)
                    return counts
                except AssertionError as exc:
                    last = exc
                except errors.TransportError:
                    pass
                await trio.sleep(0.5)
        raise AssertionError(f"not settled after {SETTLE:.0f} s: {last}")


def replay_hint(seed: int) -> str:
    return (
        f"chaos seed {seed}; replay: CHAOS_SEED={seed} CHAOS_OPS={OPERATIONS} "
        f"CHAOS_KILLS={KILLS} .venv/bin/pytest tests/chaos -x -s"
    )


@pytest.mark.cluster
async def test_chaos_converges_with_nothing_lost_and_nothing_leaked(
    hub: APIServer,
    crds: object,
    spoke: APIServer,
    spoke_kubeconfig: Registration,
    tmp_path: Path,
) -> None:
    seed = SEED
    print(replay_hint(seed))
    # In system:masters, as the spoke's ServiceAccount is cluster-admin: a user bound nothing
    # may not list cluster-wide, and its Clusters would be NamespacesRequired, not Ready.
    identity = spoke.identity(f"kokumi-chaos-{uuid.uuid4().hex[:6]}", ["system:masters"])
    canaries = [canary.CANARY, *canary.key_fragments(identity[1])]
    started = time.monotonic()
    async with hub_client(hub) as client, trio.open_nursery() as nursery:
        own = await make_namespace(client, "kokumi")
        argo = await make_namespace(client, "argocd")
        namespaces = [await make_namespace(client, "chaos") for _ in range(2)]
        spoke_port = int(spoke_kubeconfig.server.rsplit(":", 1)[1])
        forwarders = [Forwarder(nursery, spoke_port), Forwarder(nursery, spoke_port)]
        for each in forwarders:
            await each.up()
        servers = [
            spoke_kubeconfig.server,
            f"https://localhost:{spoke_port}/",
            *(each.url for each in forwarders),
            closed_port_server(),
        ]
        recreations = Recreations(touched=[])
        await nursery.start(follow_argocd, client, argo, recreations)
        managed = Replicas([ManagerProcess(name, hub, own, argo, tmp_path) for name in "ab"])
        chaos = Chaos(
            random.Random(seed),
            client,
            hub,
            managed,
            spoke_kubeconfig,
            servers,
            namespaces,
            argo,
            own,
            identity,
            recreations,
            forwarders,
        )
        try:
            await chaos.run(OPERATIONS, KILLS)
            sequence = time.monotonic() - started
            counts = await chaos.settled()
            settling = time.monotonic() - started - sequence
            SEEN["holders"] += counts.holders
            SEEN["waiters"] += counts.waiters
            SEEN["blocked"] += counts.blocked
            assert recreations.violations == [], "\n".join(recreations.violations)
            seen = await scan_for_canary(client, [own, *namespaces], tmp_path, canaries)
            assert seen == [], f"a canary leaked into {seen}"
            for name, version in chaos.foreign.items():
                secret = await client.get(SECRETS, name, namespace=argo)
                assert secret["metadata"]["resourceVersion"] == version, f"{name} was changed"
            # Every Cluster deleted while the manager runs: no Secret, no finalizer left.
            for ns in namespaces:
                await client.delete_collection(api.CLUSTERS, namespace=ns)

            async def leftovers() -> list[str]:
                left = [
                    f"Cluster {c['metadata']['namespace']}/{c['metadata']['name']}"
                    for ns in namespaces
                    for c in (await client.list(api.CLUSTERS, namespace=ns))["items"]
                ]
                ours = await client.list(
                    SECRETS,
                    namespace=argo,
                    label_selector=f"{argocd.LABEL_MANAGED_BY}={argocd.MANAGED_BY}",
                )
                return left + [f"Secret {s['metadata']['name']}" for s in ours["items"]]

            left: list[str] = []
            with trio.move_on_after(60):
                while left := await leftovers():  # noqa: ASYNC110 - polling the hub
                    await trio.sleep(0.5)
            assert left == [], f"left behind: {left}"
            managed.check_alive()
            # No canary anywhere a user or a log collector sees.
            seen = await scan_for_canary(client, [own, *namespaces], tmp_path, canaries)
            assert seen == [], f"a canary leaked into {seen}"
        except Exception as exc:
            tail = "\n".join(chaos.history[-40:])
            raise AssertionError(f"{replay_hint(seed)}\nlast operations:\n{tail}\n{exc}") from exc
        finally:
            managed.stop()
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                for ns in (own, argo, *namespaces):
                    await delete_namespace(client, ns)
    took = time.monotonic() - started
    kills = ", ".join(f"{each.kills} of {each.name}" for each in managed.members)
    print(
        f"chaos seed {seed}: {SEEN['operations']} operations, {SEEN['kills']} SIGKILLs"
        f" ({kills}; {SEEN['kills_serving']} of a replica serving shards),"
        f" {SEEN['hub_restarts']} hub restart(s), {SEEN['count_changes']} change(s) of"
        f" --shards {SHARDS_BEFORE} -> {SHARDS_AFTER}, {managed.starts} manager starts, "
        f"{recreations.writes} Argo CD Secret writes seen ({recreations.creations} creations), "
        f"{recreations.deletions} deletions, "
        f"settled with {SEEN['holders']} holders, {SEEN['waiters']} waiting, "
        f"{SEEN['blocked']} blocked, {SEEN['targets']} Environment targets, in {took:.0f} s"
        f" (sequence {sequence:.0f} s, settling {settling:.0f} s)"
    )
    assert SEEN["operations"] >= OPERATIONS
    assert SEEN["kills"] >= KILLS
    assert SEEN["hub_restarts"] == 1
    assert SEEN["count_changes"] == 1
    assert all(each.shards == SHARDS_AFTER for each in managed.members)


async def delete_namespace(client: Client, name: str) -> None:
    """Let the Clusters go first: with no manager running, a finalizer would hold them."""
    try:
        await drop_finalizers(client, name)
        await client.delete(NAMESPACES, name)
    except errors.KubeError:
        pass


def canary_in_files(root: Path, canaries: list[str]) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and canary.found(path.read_text(errors="replace"), canaries)
    ]


async def scan_for_canary(
    client: Client, namespaces: list[str], root: Path, canaries: list[str]
) -> list[str]:
    """Every place a secret must never reach: manager logs and any other file under the temp
    dir, Events, and the Clusters' statuses."""
    found = await trio.to_thread.run_sync(canary_in_files, root, canaries)
    for ns in namespaces:
        for event in (await client.list(EVENTS, namespace=ns))["items"]:
            if canary.found(event, canaries):
                found.append(f"Event {ns}/{event['metadata']['name']}")
        for resource in (api.CLUSTERS, api.ENVIRONMENTS):
            for obj in (await client.list(resource, namespace=ns))["items"]:
                if canary.found(obj.get("status") or {}, canaries):
                    found.append(f"status of {obj['kind']} {ns}/{obj['metadata']['name']}")
    return found


def test_the_recreation_check_tells_a_needless_recreation_from_a_caused_one() -> None:
    """The watch-side check is not vacuous: a Secret deleted and created again for one holder
    counts as a violation exactly when nothing touched that holder or server in between."""
    holder = ClusterRef("ws", "a")
    server = "https://spoke.example:6443"
    secret = argocd.cluster_secret(Connection(server=server, token="t"), holder, "argocd")
    name = secret["metadata"]["name"]

    quiet = Recreations(touched=[(0.0, "ws", None)])
    quiet.seen(secret, 10.0)
    quiet.deleted(name)
    quiet.seen(secret, 20.0)
    assert len(quiet.violations) == 1
    assert (quiet.creations, quiet.deletions) == (2, 1)

    for touch in ((15.0, "ws", None), (15.0, None, server), (9.0, "ws", None)):
        caused = Recreations(touched=[touch])
        caused.seen(secret, 10.0)
        caused.deleted(name)
        caused.seen(secret, 20.0)
        assert caused.violations == [], touch

    elsewhere = Recreations(touched=[(15.0, "other", "https://other.example")])
    elsewhere.resync((secret,), 10.0)
    elsewhere.resync((), 12.0)  # a relist after the hub restarted: the Secret is gone
    elsewhere.resync((secret,), 20.0)
    assert len(elsewhere.violations) == 1
