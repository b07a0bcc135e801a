"""A fake fleet: one process serving many Kubernetes API servers, as far as a check sees them.

Spoke ``i`` listens on its own loopback address (``127.a.b.c:6443``, see :func:`address`) and
answers what Kokumi's check asks: ``GET /version``, ``POST .../selfsubjectreviews`` and (for a
Cluster without ``spec.scope.namespaces``) ``POST .../selfsubjectaccessreviews``, allowed. Every
spoke presents one certificate, for the name ``fleet.kokumi.test`` only, so a kubeconfig reaches
it with ``tls-server-name: fleet.kokumi.test`` and the check verifies the server as for a real
cluster. The token is checked too: a wrong one is a 401.

A spoke behaves as its kind says (chosen by the runner, by index):

- ``ok``: answers at once;
- ``slow``: waits ``--slow-seconds`` before each answer (within the check's 10 s);
- ``refusing``: nothing listens, so connections are refused;
- ``hanging``: accepts the connection and reads what comes, but never answers, so the TLS
  handshake never ends and the check times out (the time of each connection is recorded, as
  ``/version`` is for the others, so the silent spokes' gaps can be measured too);
- ``unauthorized``: answers 401, as for a revoked token.

The process records when each spoke was asked ``/version`` (the first question of every check;
for a hanging spoke, when it was connected to),
and serves those times as JSON on a plain control port: ``GET /stats?since=<unix time>``, with
the source address of each ask beside it (``by``). That is how the runner measures the gap
between two checks of one Cluster, and which replica made each, from outside the manager.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import ssl
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import trio

from kokumi.testing.controlplane import CertificateAuthority

SERVER_NAME = "fleet.kokumi.test"
PORT = 6443
TOKEN = "fleet-token-not-a-secret"  # noqa: S105 - the fake fleet's own, shared by every spoke
KINDS = ("ok", "slow", "refusing", "hanging", "unauthorized")


NET = int(os.environ.get("KOKUMI_FLEET_NET", "20"))
"""The second octet of the first spoke's address (``KOKUMI_FLEET_NET``, default 20): two runs on
one machine, each with its own, do not take each other's addresses."""


def address(index: int) -> str:
    """Spoke ``index``'s loopback address: 250 to a /24, 62,500 to a /16, from 127.20.1.1
    (127.NET.1.1)."""
    return f"127.{NET + index // 62_500}.{(index // 250) % 250 + 1}.{index % 250 + 1}"


def make_pki(directory: Path) -> tuple[Path, Path]:
    """A CA and one server certificate for SERVER_NAME; returns (ca.pem, server chain+key)."""
    authority = CertificateAuthority.create("fleet-ca")
    cert, key = authority.issue(SERVER_NAME, server_names=[SERVER_NAME])
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(authority.pem)
    chain = directory / "server.pem"
    chain.write_bytes(cert + key)
    chain.chmod(0o600)
    return ca_path, chain


def kind_of(index: int, shares: dict[str, float]) -> str:
    """Deterministic kinds spread over the fleet: every k-th spoke, not a block at the end."""
    # Each kind takes the indices where a low-discrepancy sequence falls in its share's interval.
    position = (index * 0.6180339887498949) % 1.0
    start = 0.0
    for kind in KINDS[1:]:
        share = shares.get(kind, 0.0)
        if start <= position < start + share:
            return kind
        start += share
    return "ok"


class Fleet:
    def __init__(self, kinds: list[str], slow_seconds: float) -> None:
        self.kinds = kinds
        self.slow_seconds = slow_seconds
        self.asked: dict[int, list[float]] = defaultdict(list)
        #: Who asked, beside each time in ``asked``: the client's source address (each replica
        #: the runner starts binds its checks to its own, so the runner can tell them apart).
        self.by: dict[int, list[str]] = defaultdict(list)
        self.requests = 0

    def record(self, index: int, stream: trio.abc.Stream) -> None:
        """One ask of spoke ``index``: when, and from which source address."""
        raw = getattr(stream, "transport_stream", stream)
        try:
            source = raw.socket.getpeername()[0]
        except (AttributeError, OSError):
            source = "?"
        self.asked[index].append(time.time())
        self.by[index].append(source)

    async def hang(self, index: int, stream: trio.SocketStream) -> None:
        """Take the connection and whatever the client sends, answer nothing, until it gives up."""
        self.record(index, stream)
        try:
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def serve(self, index: int, stream: trio.abc.Stream) -> None:
        kind = self.kinds[index]
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                buffer = buffer[length:]
                self.requests += 1
                if path == "/version":
                    self.record(index, stream)
                if kind == "slow":
                    await trio.sleep(self.slow_seconds)
                status, body = self.answer(kind, method, path, headers)
                payload = json.dumps(body).encode()
                await stream.send_all(
                    f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
            return
        finally:
            await trio.aclose_forcefully(stream)

    @staticmethod
    def answer(kind: str, method: str, path: str, headers: dict[str, str]) -> tuple[str, object]:
        refused = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401}
        if kind == "unauthorized" or headers.get("authorization") != f"Bearer {TOKEN}":
            return "401 Unauthorized", {**refused, "message": "Unauthorized"}
        if method == "GET" and path == "/version":
            return "200 OK", {"major": "1", "minor": "36", "gitVersion": "v1.36.3-fleet"}
        if method == "POST" and path == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
            review = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
                "status": {"userInfo": {"username": "fleet-admin", "groups": ["system:masters"]}},
            }
            return "201 Created", review
        if method == "POST" and path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            # fleet-admin is in system:masters: it may list everything cluster-wide.
            access = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "status": {"allowed": True},
            }
            return "201 Created", access
        return "404 Not Found", {"kind": "Status", "code": 404, "message": "not found"}

    async def control(self, stream: trio.SocketStream) -> None:
        """``GET /stats?since=T``: the times each spoke was asked /version since T."""
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            target = data.split(b" ", 2)[1].decode()
            since = float(target.partition("since=")[2] or 0)
            recent = {
                i: [k for k, t in enumerate(times) if t >= since]
                for i, times in self.asked.items()
                if times and times[-1] >= since
            }
            body = json.dumps(
                {
                    "requests": self.requests,
                    "asked": {str(i): [self.asked[i][k] for k in ks] for i, ks in recent.items()},
                    "by": {str(i): [self.by[i][k] for k in ks] for i, ks in recent.items()},
                }
            ).encode()
            # Keep memory flat over long runs: times older than an hour are of no use.
            horizon = time.time() - 3600
            for i, times in self.asked.items():
                while times and times[0] < horizon:
                    times.pop(0)
                    self.by[i].pop(0)
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()


async def main_async(args: argparse.Namespace) -> None:
    shares = {
        "slow": args.slow,
        "refusing": args.refusing,
        "hanging": args.hanging,
        "unauthorized": args.unauthorized,
    }
    kinds = [kind_of(i, shares) for i in range(args.spokes)]
    kinds += ["hanging"] * args.extra_hanging  # the runner's silent batch, after the rest
    fleet = Fleet(kinds, args.slow_seconds)
    directory = Path(args.dir)
    ca_path, chain = make_pki(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    async with trio.open_nursery() as nursery:
        for index, kind in enumerate(kinds):
            if kind == "refusing":
                continue
            sock = trio.socket.socket()
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            await sock.bind((address(index), args.port))
            sock.listen(128)
            listener = trio.SocketListener(sock)
            if kind == "hanging":
                handler = functools.partial(fleet.hang, index)
                nursery.start_soon(trio.serve_listeners, handler, [listener])
                continue
            tls = trio.SSLListener(listener, context, https_compatible=True)
            nursery.start_soon(trio.serve_listeners, lambda s, i=index: fleet.serve(i, s), [tls])
        control = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        port = control.socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, fleet.control, [control])
        counts = {kind: kinds.count(kind) for kind in KINDS}
        print(
            json.dumps({"control": port, "ca": str(ca_path), "kinds": kinds, "counts": counts}),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spokes", type=int, required=True)
    parser.add_argument("--dir", default=None, help="where the CA goes (default: a temp dir)")
    for kind in KINDS[1:]:
        parser.add_argument(f"--{kind}", type=float, default=0.0, help=f"share of {kind} spokes")
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    parser.add_argument(
        "--port", type=int, default=PORT, help="the spokes' port (another fleet may hold 6443)"
    )
    parser.add_argument(
        "--extra-hanging", type=int, default=0, help="hanging spokes after the --spokes ones"
    )
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.dir is None:
        args.dir = tempfile.mkdtemp(prefix="kokumi-fleet-")
    try:
        trio.run(main_async, args)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
