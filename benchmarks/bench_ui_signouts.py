"""What sign-outs cost the session key's Secret, and whether a victim's sign-out survives them.

Two UI replicas (in a cluster: sealed cookies, sign-outs shared through the Secret) on an
in-process hub (``tests/support/fakeapi.py``, not the real API server). Alice signs out at the
first; then another user signs in and out 4,000 times there, a second apart on the replicas'
clock (so their cookies expire later than hers, as over the 74 s it took on a real hub). Printed:
the bytes each sign-out wrote (the Secret's whole body, as sent with each ``PUT``), the Secret's
``data`` afterwards, and whether the second replica still refuses Alice's cookie.

Run from the repository root, for the tree on ``PYTHONPATH`` first (to compare an older tree,
export it with ``git archive`` and put it first)::

    PYTHONPATH=$PWD python3 benchmarks/bench_ui_signouts.py [--cycles 4000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx
import trio
import trio.testing
from starlette.requests import Request

import kokumi
from kokumi.core.sessioncookie import Keys
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from kokumi.ui.incluster import KEY_NAMESPACE, KEY_SECRET, SignOuts, session_key
from kokumi.ui.pages import UI, end_session, still_signed_in
from kokumi.ui.security import COOKIE, SealedSessions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.fakeapi import FakeApi


class Counted(httpx.AsyncBaseTransport):
    """The hub, counting the bytes of every PUT sent to it."""

    def __init__(self, inner: FakeApi) -> None:
        self.inner = inner
        self.puts: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            self.puts.append(len(await request.aread()))
        return await self.inner.handle_async_request(request)


def _request(cookie: str) -> Request:
    return Request({"type": "http", "headers": [(b"cookie", f"{COOKIE}={cookie}".encode())]})


async def measure(cycles: int) -> None:
    hub = Counted(FakeApi(namespaces=("default", KEY_NAMESPACE)))
    async with Client(Config(server="https://hub.invalid"), transport=hub) as account:
        keys = Keys(await session_key(account))
        now = [time.time()]

        def clock() -> float:
            return now[0]

        first = UI(
            account, SealedSessions(keys, clock=clock), sign_outs=SignOuts(account, clock=clock)
        )
        second = UI(
            account, SealedSessions(keys, clock=clock), sign_outs=SignOuts(account, clock=clock)
        )
        assert isinstance(first.sessions, SealedSessions)
        victim, _ = first.sessions.start("system:serviceaccount:team:alice", token="alice")  # noqa: S106 - a stand-in
        await end_session(first, _request(victim))
        started = time.perf_counter()
        for _ in range(cycles):
            now[0] += 1.0
            cookie, _ = first.sessions.start("system:serviceaccount:team:mallory", token="m")  # noqa: S106 - a stand-in
            await end_session(first, _request(cookie))
        took = time.perf_counter() - started
        await trio.sleep(5)  # the second replica reads the Secret again
        refused = not await still_signed_in(second, _request(victim))
        secret = await account.get(SECRETS, KEY_SECRET, namespace=KEY_NAMESPACE)
    data = len(json.dumps(secret["data"], separators=(",", ":")))
    puts = hub.puts  # the key's own Secret is made by a POST: every PUT is a sign-out
    print(f"tree: {kokumi.__file__}")
    print(f"{cycles:,} sign-outs after the victim's, in {took:.1f} s")
    print(f"bytes written per sign-out: first {puts[0]:,}, last {puts[-1]:,}, "
          f"mean {sum(puts) / len(puts):,.0f}")  # fmt: skip
    print(f"{len(puts):,} writes, {sum(puts) / 2**20:.1f} MiB in all")
    print(f"the Secret's data afterwards: {data:,} bytes")
    said = "refused" if refused else "ACCEPTED"
    print(f"the victim's signed-out cookie at the other replica: {said}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cycles", type=int, default=4000)
    args = parser.parse_args()
    trio.run(measure, args.cycles, clock=trio.testing.MockClock(autojump_threshold=0))


if __name__ == "__main__":
    main()
