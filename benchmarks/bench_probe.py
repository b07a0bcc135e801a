"""The CPU of one check: ``probe.check`` against a bare httpx check and the bare OpenSSL floor.

Run: ``.venv/bin/python benchmarks/bench_probe.py [--checks 400] [--rounds 5]``. It starts one
spoke of the fake fleet (``fleet/fleet.py``, its own process, so that the server's CPU is not
counted) and measures, side by side in one run, round after round in turn:

- ``probe.check``: the manager's check of a Cluster (lean path: no proxy-url), eight at a time,
  as the manager's eight check slots run them: three requests, as for a Cluster without
  ``spec.scope.namespaces`` whose credential's yes to the third question (may it list
  cluster-wide?) is not kept yet (its first check, one every ten minutes after, and every check
  of a Cluster that is told no);
- ``probe.check, the yes kept``: the same check while the credential's yes is kept, two
  requests (a steady Ready Cluster's check);
- ``probe.check, scope.namespaces set``: the same check of a Cluster that names its namespaces,
  two requests (what every check asked before the third question);
- ``probe.check via httpx``: the same two checks forced through the httpx path (what every check
  took before the lean path; checks with a proxy-url still take it);
- bare httpx: ``httpx.AsyncClient`` per check, one TLS context for all, ``GET /version`` and the
  ``POST`` of a SelfSubjectReview, eight at a time (the fleet benchmark's baseline);
- bare OpenSSL floor: Python's ``ssl`` on a blocking socket, one check at a time, no event loop:
  the verified handshake and the two requests, nothing else; and ``, three requests``: with the
  SelfSubjectAccessReview as well.

Each figure is the process's CPU time (every thread) over the checks of a round, divided by their
number; the table gives the minimum and the median over the rounds, and each row's ratio to the
bare httpx check and to the floor (by medians). Each row of the three checks on Trio has a second,
": the event loop's thread": that thread's own CPU time per check, the part of a check that
holds up every other task of the manager (the rest is the check threads').
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "fleet"))

from fleet import PORT, SERVER_NAME, TOKEN, address  # noqa: E402

from kokumi.core.kubeconfig.connection import Connection  # noqa: E402
from kokumi.runtime.probe import checks as probe  # noqa: E402

SPOKE_PORT = PORT  # --port
SERVER = f"https://{address(0)}:{SPOKE_PORT}"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
ACCESS_REVIEW = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SelfSubjectAccessReview",
    "spec": {"resourceAttributes": {"verb": "list", "group": "*", "resource": "*"}},
}


async def eight_at_a_time(
    count: int, one: Callable[[], Awaitable[bool]]
) -> tuple[float, float, int]:
    limiter = trio.CapacityLimiter(8)
    failures = 0

    async def run() -> None:
        nonlocal failures
        async with limiter:
            if not await one():
                failures += 1

    cpu, loop = time.process_time(), time.thread_time()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(run)
    loop = time.thread_time() - loop  # the event loop's thread alone
    return (time.process_time() - cpu) / count * 1000, loop / count * 1000, failures


def checks(
    ca_pem: bytes, *, lean: bool, cluster_wide: bool, kept: bool = False
) -> Callable[[], Awaitable[bool]]:
    """``kept``: the credential's yes to the third question is kept between checks; else
    forgotten before each, so that each asks it."""
    connection = Connection(
        server=SERVER, token=TOKEN, certificate_authority=ca_pem, tls_server_name=SERVER_NAME
    )

    async def one() -> bool:
        probe._LEAN = lean
        if not kept:
            probe._answers_of_run().clear()
        try:
            finding = await probe.check(connection, cluster_wide=cluster_wide)
        finally:
            probe._LEAN = True
        return finding.ok

    return one


def bare_httpx(ca_pem: bytes) -> Callable[[], Awaitable[bool]]:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    ext = {"sni_hostname": SERVER_NAME}

    async def one() -> bool:
        async with httpx.AsyncClient(verify=context, trust_env=False, timeout=10) as client:
            a = await client.get(f"{SERVER}/version", headers=headers, extensions=ext)
            b = await client.post(
                f"{SERVER}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                headers=headers,
                json=REVIEW,
                extensions=ext,
            )
        return a.status_code == 200 and b.status_code == 201

    return one


def bare_openssl(ca_pem: bytes, count: int, *, third: bool = False) -> tuple[float, int]:
    """As the fleet benchmark's floor: one thread, one check at a time, nothing between;
    ``third``: the SelfSubjectAccessReview asked as well."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    review = json.dumps(REVIEW).encode()
    access = json.dumps(ACCESS_REVIEW).encode()
    head = f"Host: {SERVER_NAME}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: application/json\r\n"
    requests: tuple[bytes, ...] = (
        f"GET /version HTTP/1.1\r\n{head}\r\n".encode(),
        (
            f"POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1\r\n{head}"
            f"Content-Type: application/json\r\nContent-Length: {len(review)}\r\n\r\n"
        ).encode()
        + review,
    )
    if third:
        requests += (
            (
                f"POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews HTTP/1.1\r\n{head}"
                f"Content-Type: application/json\r\nContent-Length: {len(access)}\r\n\r\n"
            ).encode()
            + access,
        )

    def answer(tls: ssl.SSLSocket) -> int:
        data = b""
        while b"\r\n\r\n" not in data:
            data += tls.recv(65536)
        top, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", top).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += tls.recv(65536)
        return int(top.split(b" ", 2)[1])

    failures = 0
    cpu = time.process_time()
    for _ in range(count):
        with (
            socket.create_connection((address(0), SPOKE_PORT), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls,
        ):
            codes = []
            for request in requests:
                tls.sendall(request)
                codes.append(answer(tls))
            if codes != [200, 201, 201][: len(requests)]:
                failures += 1
    return (time.process_time() - cpu) / count * 1000, failures


async def measure(ca_pem: bytes, count: int, rounds: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    kinds: dict[str, Callable[[], Awaitable[tuple[float, float, int]]]] = {
        "probe.check": lambda: eight_at_a_time(count, checks(ca_pem, lean=True, cluster_wide=True)),
        "probe.check, the yes kept": lambda: eight_at_a_time(
            count, checks(ca_pem, lean=True, cluster_wide=True, kept=True)
        ),
        "probe.check, scope.namespaces set": lambda: eight_at_a_time(
            count, checks(ca_pem, lean=True, cluster_wide=False)
        ),
        "probe.check via httpx": lambda: eight_at_a_time(
            count, checks(ca_pem, lean=False, cluster_wide=True)
        ),
        "probe.check via httpx, scope.namespaces set": lambda: eight_at_a_time(
            count, checks(ca_pem, lean=False, cluster_wide=False)
        ),
        "bare httpx check": lambda: eight_at_a_time(count, bare_httpx(ca_pem)),
    }
    # One warm-up round of each: the context cache, the thread cache, imports.
    for run in kinds.values():
        await run()
    bare_openssl(ca_pem, 20)
    for _ in range(rounds):
        for name, run in kinds.items():
            ms, loop_ms, failures = await run()
            assert failures == 0, f"{name}: {failures} checks failed"
            figures.setdefault(name, []).append(ms)
            figures.setdefault(f"{name}: the event loop's thread", []).append(loop_ms)
        ms, failures = bare_openssl(ca_pem, count)
        assert failures == 0, f"the floor: {failures} checks failed"
        figures.setdefault("bare OpenSSL floor", []).append(ms)
        ms, failures = bare_openssl(ca_pem, count, third=True)
        assert failures == 0, f"the floor of three: {failures} checks failed"
        figures.setdefault("bare OpenSSL floor, three requests", []).append(ms)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=400, help="checks per round and kind")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--port", type=int, default=PORT, help="the spoke's port (another fleet may hold 6443)"
    )
    args = parser.parse_args()
    global SPOKE_PORT, SERVER  # one spoke a run, chosen at the start
    SPOKE_PORT, SERVER = args.port, f"https://{address(0)}:{args.port}"
    with tempfile.TemporaryDirectory(prefix="kokumi-bench-probe-") as directory:
        fleet = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "benchmarks/fleet/fleet.py"),
                "--spokes=1",
                f"--dir={directory}",
                f"--port={args.port}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert fleet.stdout is not None
            hello = json.loads(fleet.stdout.readline())
            ca_pem = Path(hello["ca"]).read_bytes()
            figures = trio.run(measure, ca_pem, args.checks, args.rounds)
        finally:
            fleet.terminate()
            fleet.wait()
    median = {name: statistics.median(values) for name, values in figures.items()}
    httpx_ms, floor_ms = median["bare httpx check"], median["bare OpenSSL floor"]
    print(f"{args.rounds} rounds of {args.checks} checks each, CPU ms per check\n")
    print("| | min | median | vs bare httpx | vs OpenSSL floor |")
    print("|---|---:|---:|---:|---:|")
    for name, values in figures.items():
        print(
            f"| {name} | {min(values):.2f} | {median[name]:.2f} |"
            f" {median[name] / httpx_ms:.2f}x | {median[name] / floor_ms:.2f}x |"
        )


if __name__ == "__main__":
    main()
