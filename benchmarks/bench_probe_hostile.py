"""What a check costs against an API server that answers ``GET /version`` in tiny pieces.

Run from the repository root: ``PYTHONPATH=. python3 benchmarks/bench_probe_hostile.py
--before ../before [--after .] [--rounds 3]``, ``--before`` a checkout of the tree to compare
with. It starts a hostile TLS server in a process of its own (so that its
CPU is not counted), then, for each source tree in turn (``PYTHONPATH`` set to it, a process
of its own), each shape of answer and each of the probe's two paths (lean, and through httpx as
behind a proxy-url):

- one check alone: the process's CPU (every thread), its wall time, and the Outcome's message;
- four such checks at once, with a ticker on the event loop: the loop's longest step (how long
  the ticker was kept from running past its 5 ms sleep: wall time, so a busy machine that keeps
  the loop's thread from a core lengthens it), the most CPU of the loop's thread one task step
  took (a Trio instrument: not lengthened so), and the CPU per check.

Each figure is the median of ``--rounds`` (3) rounds.

The shapes, each the answer to ``GET /version`` (a 200 with a JSON body that never ends well):

- ``1-byte chunks, batched``: chunked, a chunk a byte, 64 KiB of them a write (parser events);
- ``1-byte chunks, a write each``: chunked, each 1-byte chunk a TLS record of its own (reads);
- ``1-byte writes of a length``: ``Content-Length: 1048576``, each byte a TLS record of its own;
- ``trickle``: ``Content-Length: 1048576``, a byte every millisecond.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trio

# The tree under test is the one on PYTHONPATH: each child process is given its own.
from kokumi.core.kubeconfig.connection import Connection
from kokumi.runtime.probe import checks
from kokumi.testing.controlplane import CertificateAuthority

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [
    "1-byte chunks, batched",
    "1-byte chunks, a write each",
    "1-byte writes of a length",
    "trickle",
]
PATHS = ["lean", "httpx"]
HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)
HEAD_LENGTH = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
)


# --- the hostile server (its own process) -------------------------------------------------------


def serve(pem: Path, shape: str, port_file: Path) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem)
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    port_file.write_text(str(listener.getsockname()[1]))
    while True:
        raw, _ = listener.accept()
        threading.Thread(target=answer, args=(context, raw, shape), daemon=True).start()


def answer(context: ssl.SSLContext, raw: socket.socket, shape: str) -> None:
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = context.wrap_socket(raw, server_side=True)
        request = b""
        while b"\r\n\r\n" not in request:
            data = sock.recv(65536)
            if not data:
                return
            request += data
        if shape == "1-byte chunks, batched":
            sock.sendall(HEAD_CHUNKED)
            batch = b"1\r\n \r\n" * (65536 // 6)
            while True:
                sock.sendall(batch)
        elif shape == "1-byte chunks, a write each":
            sock.sendall(HEAD_CHUNKED)
            while True:
                sock.send(b"1\r\n \r\n")
        else:
            sock.sendall(HEAD_LENGTH)
            pause = 0.001 if shape == "trickle" else 0.0
            for _ in range(1 << 20):
                sock.send(b" ")
                if pause:
                    time.sleep(pause)
    except OSError:
        pass
    finally:
        raw.close()


# --- the checks (a process per source tree) ------------------------------------------------------


class LongestStep(trio.abc.Instrument):
    """The most CPU of the event loop's thread that one task step took: unlike the ticker's
    wait, not lengthened by the loop's thread waiting for a core on a busy machine."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._began: float | None = None  # the step that adds the instrument has no beginning

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._began is not None:
            self.longest = max(self.longest, time.thread_time() - self._began)


def measure(server: str, ca: bytes, path: str, rounds: int) -> dict[str, Any]:
    """Each figure's median over ``rounds``; the message of the last check alone."""
    checks._LEAN = path == "lean"
    connection = Connection(server=server, token="hostile-bench", certificate_authority=ca)  # noqa: S106

    async def one() -> dict[str, Any]:
        cpu, wall = time.process_time(), time.perf_counter()
        alone = await checks.check(connection)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        stall = 0.0
        done = trio.Event()

        async def ticker() -> None:
            nonlocal stall
            while not done.is_set():
                before = time.perf_counter()
                await trio.sleep(0.005)
                stall = max(stall, time.perf_counter() - before - 0.005)

        four_cpu = time.process_time()
        steps = LongestStep()
        trio.lowlevel.add_instrument(steps)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            async with trio.open_nursery() as four:
                for _ in range(4):
                    four.start_soon(checks.check, connection)
            done.set()
        trio.lowlevel.remove_instrument(steps)
        four_cpu = time.process_time() - four_cpu
        return {
            "cpu": cpu,
            "wall": wall,
            "message": alone.message,
            "stall": stall,
            "step": steps.longest,
            "four_cpu": four_cpu / 4,
        }

    async def main() -> dict[str, Any]:
        runs = [await one() for _ in range(rounds)]
        medians: dict[str, Any] = {
            key: statistics.median(float(run[key]) for run in runs)
            for key in ("cpu", "wall", "stall", "step", "four_cpu")
        }
        return {**medians, "message": runs[-1]["message"]}

    return trio.run(main)


def child(tree: str, server: str, ca: Path, path: str, rounds: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    script = str(Path(__file__).resolve())
    run = subprocess.run(
        [sys.executable, script, "--child", server, str(ca), path, str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(tree).resolve(),
    )
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="a checkout of the tree to compare with")
    parser.add_argument("--after", default=str(ROOT))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), args.serve[1], Path(args.serve[2]))
        return
    if args.child:
        server, ca, path, rounds = args.child
        print(json.dumps(measure(server, Path(ca).read_bytes(), path, int(rounds))))
        return

    authority = CertificateAuthority.create("kokumi-hostile-bench")
    cert, key = authority.issue("hostile", server_names=["127.0.0.1"])
    print(f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores")
    print(
        "| answer | path | tree | CPU, one check | its wall | loop's longest step, four at once "
        "| its longest task step's CPU | CPU per check, four at once | Outcome |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        pem, ca = Path(tmp) / "server.pem", Path(tmp) / "ca.pem"
        pem.write_bytes(cert + key)
        ca.write_bytes(authority.pem)
        for shape in SHAPES:
            port_file = Path(tmp) / "port"
            port_file.unlink(missing_ok=True)
            server = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--serve",
                    str(pem),
                    shape,
                    str(port_file),
                ]
            )
            try:
                while not port_file.exists() or not port_file.read_text():
                    time.sleep(0.05)
                url = f"https://127.0.0.1:{port_file.read_text()}"
                for path in PATHS:
                    for name, tree in (("before", args.before), ("after", args.after)):
                        r = child(tree, url, ca, path, args.rounds)
                        message = str(r["message"])
                        message = message[:70] + "…" if len(message) > 70 else message
                        print(
                            f"| {shape} | {path} | {name} | {r['cpu']:.3f} s | {r['wall']:.2f} s "
                            f"| {float(r['stall']) * 1000:.1f} ms "
                            f"| {float(r['step']) * 1000:.1f} ms | {r['four_cpu']:.3f} s "
                            f"| {message} |",
                            flush=True,
                        )
            finally:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
