"""What one hostile kubeconfig Secret costs the manager's event loop: a ClusterSource's read of
it (``contexts: All``) and a Cluster's read of one of its contexts.

Whoever may create a ClusterSource and a Secret chooses the text. The shapes: many contexts of
one cluster and user (the issue's: 2,000 contexts in 93 KiB), as many each with its own cluster
and user, YAML nested as deep as the reader allows, and a flow list of tiny values (the most
YAML events per byte). For each: the CPU of the read, and the longest step of the Trio loop
while it ran (a trio Instrument times every task step; a ticker task keeps the loop busy as the
manager's other actors would). Run from the repository root, against this checkout or another
(the code before the fix read on the loop, once per context):

    .venv/bin/python benchmarks/bench_sources_hostile.py
    PYTHONPATH=/path/to/old/checkout .venv/bin/python benchmarks/bench_sources_hostile.py

``--skip NAME`` leaves a shape out (the old code took a minute for 2,000 contexts).
"""

from __future__ import annotations

import argparse
import base64
import functools
import importlib
import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import yaml

import kokumi
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.sources import secretplan
from kokumi.core.sources.spec import parse_source


def _this_checkout() -> Any:
    """The worker-thread reads of this checkout; None for the code before, which read on the
    loop (the script runs against either)."""
    try:
        return importlib.import_module("kokumi.actors.parsing")
    except ImportError:
        return None


PARSING: Any = _this_checkout()
PLAN: Any = secretplan  # judge_contexts is this checkout's only
LIMIT: int = (
    importlib.import_module("kokumi.core.sources.bounds").MAX_CONTEXTS_PER_SECRET if PARSING else 0
)

SERVER = "https://spoke.example:6443"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJrb2t1bWkifQ.c2lnbmF0dXJlLW9mLWtva3VtaQ"  # noqa: S105


def shared(contexts: int) -> str:
    """Contexts of one cluster and one user: 46 bytes a context."""
    lines = [
        "apiVersion: v1",
        "kind: Config",
        "current-context: ctx-00000",
        "clusters:",
        f"- name: c\n  cluster: {{server: '{SERVER}', insecure-skip-tls-verify: true}}",
        f"users:\n- name: u\n  user: {{token: {TOKEN}}}",
        "contexts:",
    ]
    lines += [f"- context: {{cluster: c, user: u}}\n  name: ctx-{i:05d}" for i in range(contexts)]
    return "\n".join(lines) + "\n"


def distinct(contexts: int) -> str:
    """Each context with its own cluster and user."""
    lines = ["apiVersion: v1", "kind: Config", "current-context: ctx-00000", "clusters:"]
    lines += [
        f"- name: c{i}\n  cluster: {{server: 'https://s{i}.example:6443', "
        "insecure-skip-tls-verify: true}"
        for i in range(contexts)
    ]
    lines.append("users:")
    lines += [f"- name: u{i}\n  user: {{token: {TOKEN}-{i}}}" for i in range(contexts)]
    lines.append("contexts:")
    lines += [
        f"- context: {{cluster: c{i}, user: u{i}}}\n  name: ctx-{i:05d}" for i in range(contexts)
    ]
    return "\n".join(lines) + "\n"


def deep(size: int) -> str:
    """Lists nested 60 deep, side by side, until the text is ``size`` bytes."""
    one = "[" * 60 + "1" + "]" * 60
    return shared(1) + "preferences: {x: [" + ",".join([one] * (size // 122)) + "]}\n"


def wide(size: int) -> str:
    """A flow list of one-character values: the most events a byte."""
    return shared(1) + "preferences: {x: [" + ",".join(["1"] * (size // 2 - 80)) + "]}\n"


SHAPES: list[tuple[str, Callable[[], str]]] = [
    ("250 contexts, one cluster and user", lambda: shared(250)),
    ("1,000 contexts, one cluster and user", lambda: shared(1_000)),
    ("2,000 contexts, one cluster and user", lambda: shared(2_000)),
    ("2,000 contexts, each its cluster and user", lambda: distinct(2_000)),
    ("deep: lists 60 levels deep, 1 MB", lambda: deep(1_000_000)),
    ("wide: 1 MB of one-character values", lambda: wide(1_000_000)),
]

_SOURCE: Any = parse_source(
    {
        "metadata": {"name": "s", "namespace": "n", "uid": "u"},
        "spec": {
            "from": "Secrets",
            "secretSelector": {"matchLabels": {"k": "v"}},
            "key": "kubeconfig",
            "contexts": "All",
        },
    }
)
SHAPE: Any = _SOURCE.shape


class LongestStep(trio.abc.Instrument):
    """The longest step of any task: how long the loop answered nobody else."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._began: float | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._began is not None:  # not the step the instrument was added in
            self.longest = max(self.longest, time.perf_counter() - self._began)
        self._began = None


def source_read(text: str) -> Callable[[], Awaitable[object]]:
    """What the sources actor does with the Secret, as this checkout does it."""
    secret: dict[str, Any] = {"data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}
    if PARSING is None:

        async def before() -> object:
            return secretplan.context_verdicts(secret, SHAPE)

        return before
    judge = functools.partial(PLAN.judge_contexts, secret, SHAPE, LIMIT)
    return lambda: PARSING.off_loop(judge)


def cluster_read(text: str) -> Callable[[], Awaitable[object]]:
    """What a Cluster actor does with the Secret it reads, one context of it."""
    read = functools.partial(parse, text, context="ctx-00000")
    if PARSING is None:

        async def before() -> object:
            if len(text) > 64 * 1024:  # the old INLINE_PARSE_LIMIT
                return await trio.to_thread.run_sync(read)
            return read()

        return before
    return lambda: PARSING.off_loop(read)


async def measure(work: Callable[[], Awaitable[object]]) -> tuple[float, float, float, object]:
    """Process CPU, the loop's longest step and a ticker's longest wait (its 1 ms sleep
    included: what another actor waited, GIL turns with the reading thread included) while
    ``work`` runs."""
    steps = LongestStep()
    done = trio.Event()
    waited = [0.0]

    async def ticker() -> None:
        while not done.is_set():
            began = time.perf_counter()
            await trio.sleep(0.001)
            waited[0] = max(waited[0], time.perf_counter() - began)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.sleep(0.01)
        waited[0] = 0.0
        trio.lowlevel.add_instrument(steps)
        await (
            trio.lowlevel.checkpoint()
        )  # the work in a step of its own, which the instrument times
        started = time.process_time()
        result = await work()
        cpu = time.process_time() - started
        await trio.lowlevel.checkpoint()  # ends the step, which the instrument then times
        trio.lowlevel.remove_instrument(steps)
        done.set()
    return cpu, steps.longest, waited[0], result


def summary(result: object) -> str:
    if isinstance(result, tuple) and len(result) >= 2:
        whole, contexts = result[0], result[1]
        beyond = result[2] if len(result) > 2 else 0
        if whole is not None:
            return f"refused: {str(whole[1])[:60]}…"
        return f"{len(contexts):,} contexts judged" + (
            f", {beyond:,} past the bound" if beyond else ""
        )
    code = getattr(result, "code", None)
    return f"refused ({code})" if code else "accepted"


async def main(skip: set[str]) -> None:
    print(
        f"kokumi {kokumi.__file__}, Python {platform.python_version()}, PyYAML {yaml.__version__}"
        f", {'off the loop' if PARSING else 'on the loop (before)'}"
    )
    print("| shape | bytes | read | CPU | longest loop step | longest 1 ms tick | result |")
    print("|---|---:|---|---:|---:|---:|---|")
    for name, make in SHAPES:
        if any(word in name for word in skip):
            continue
        text = make()
        for read, work in (("source", source_read(text)), ("Cluster", cluster_read(text))):
            cpu, longest, waited, result = await measure(work)
            print(
                f"| {name} | {len(text):,} | {read} | {cpu * 1000:,.0f} ms "
                f"| {longest * 1000:,.1f} ms | {waited * 1000:,.1f} ms | {summary(result)} |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--skip", action="append", default=[], help="leave out shapes naming it")
    trio.run(main, set(parser.parse_args().skip))
