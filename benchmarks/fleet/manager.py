"""``kokumi manager`` with a Trio instrument that measures how long the event loop is blocked.

The runner starts the manager through this file instead of ``python -m kokumi``: the same
command line, plus one instrument that times every task step (a step is the code that runs
between two awaits, during which nothing else on the loop can run). Every two seconds the
steps longer than 10 ms are appended to the file named by ``KOKUMI_BENCH_LOOP`` as JSON lines
``[unix time, wall seconds, CPU seconds, task name]``, with ``["steps", count, total seconds]``
for the totals, ``["gc", unix time, seconds, generation, own CPU seconds, objects collected]``
for each full collection of the cyclic garbage collector (generation 2) and each younger one
over 10 ms, and ``["slots", unix
time, [seconds, ...]]`` for the checks that released one of the eight check slots in those two
seconds: the time from acquiring the slot to releasing it, which bounds the checks per second
at 8 / (mean slot time). Wall time is what other tasks waited; on a machine shared by many
processes it also holds the time the OS ran others, which the step's own CPU time (the
thread's) leaves out.

With ``KOKUMI_BENCH_SOURCE`` set to a loopback address, every check's connection to a spoke is
bound to it (see ``_bind_checks``), so the fake fleet can say which replica asked.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from typing import Any

import trio

from kokumi.cmd import root as cli

SLOW_STEP = 0.010


class LoopTimer(trio.abc.Instrument):
    def __init__(self) -> None:
        self._began = 0.0
        self._began_cpu = 0.0
        self.steps = 0
        self.total = 0.0
        self.slow: list[tuple[float, float, float, str]] = []
        self.gc: list[tuple[float, float, int, float, int]] = []
        self._gc_began = 0.0
        self._gc_began_cpu = 0.0
        self.slots: list[float] = []
        self.reads: list[list[Any]] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.perf_counter()
        self._began_cpu = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.perf_counter() - self._began
        self.steps += 1
        self.total += took
        if took > SLOW_STEP:
            self.slow.append(
                (time.time(), took, time.thread_time() - self._began_cpu, task.name[-60:])
            )

    def gc_callback(self, phase: str, info: dict[str, int]) -> None:
        """Full collections of the cyclic GC: they stop the loop for a time that grows with the
        heap."""
        if phase == "start":
            self._gc_began = time.perf_counter()
            self._gc_began_cpu = time.thread_time()
            return
        took, generation = time.perf_counter() - self._gc_began, info.get("generation", 0)
        if generation == 2 or took > SLOW_STEP:  # young collections only when they are slow
            cpu = time.thread_time() - self._gc_began_cpu
            self.gc.append((time.time(), took, generation, cpu, info.get("collected", 0)))


def _dump(timer: LoopTimer, path: str) -> None:
    while True:
        time.sleep(2)
        slow, timer.slow = timer.slow, []
        collections, timer.gc = timer.gc, []
        slots, timer.slots = timer.slots, []
        reads, timer.reads = timer.reads, []
        with open(path, "a") as out:
            for item in slow:
                out.write(json.dumps(item) + "\n")
            for item in reads:
                out.write(json.dumps(item) + "\n")
            for at, took, generation, cpu, collected in collections:
                out.write(json.dumps(["gc", at, took, generation, cpu, collected]) + "\n")
            if slots:
                out.write(json.dumps(["slots", time.time(), [round(x, 4) for x in slots]]) + "\n")
            out.write(json.dumps(["steps", timer.steps, timer.total, time.time()]) + "\n")


def _time_slots(timer: LoopTimer) -> None:
    """Record how long each check holds one of the eight slots of the check limiter."""
    from kokumi.actors.checks import CountingLimiter  # noqa: PLC0415

    held: dict[trio.lowlevel.Task, float] = {}
    if hasattr(CountingLimiter, "acquire"):  # two classes: every slot goes through these
        acquire, release = CountingLimiter.acquire, CountingLimiter.release

        async def timed_acquire(self: CountingLimiter, *args: Any) -> None:
            await acquire(self, *args)
            held[trio.lowlevel.current_task()] = time.perf_counter()

        def timed_release(self: CountingLimiter) -> None:
            began = held.pop(trio.lowlevel.current_task(), None)
            release(self)
            if began is not None:
                timer.slots.append(time.perf_counter() - began)

        CountingLimiter.acquire = timed_acquire  # type: ignore[method-assign]
        CountingLimiter.release = timed_release  # type: ignore[method-assign]
        return
    enter, leave = CountingLimiter.__aenter__, CountingLimiter.__aexit__

    async def aenter(self: CountingLimiter) -> None:
        await enter(self)
        held[trio.lowlevel.current_task()] = time.perf_counter()

    async def aexit(self: CountingLimiter, *exc: object) -> None:
        began = held.pop(trio.lowlevel.current_task(), None)
        await leave(self, *exc)
        if began is not None:
            timer.slots.append(time.perf_counter() - began)

    CountingLimiter.__aenter__ = aenter  # type: ignore[method-assign]
    CountingLimiter.__aexit__ = aexit  # type: ignore[method-assign]


def _time_reads(timer: LoopTimer) -> None:
    """Record each list of Secrets (when it began and ended, the reads it served, those left
    for the next list) and each first list of a Secret watch: ``["list", ...]``,
    ``["watch-listed", unix time, namespace]``."""
    from kokumi.actors import secretreads, secretwatch  # noqa: PLC0415

    listing = secretreads.SecretReads._list

    async def timed_list(self: Any, namespace: str, pending: Any) -> None:
        began, served = time.time(), self.listed
        waiting = sum(len(w) for w in pending.waiters.values())
        try:
            await listing(self, namespace, pending)
        finally:
            left = self._next.get(namespace)
            timer.reads.append(
                [
                    "list",
                    began,
                    time.time(),
                    namespace,
                    waiting,
                    self.listed - served,
                    sum(len(w) for w in left.waiters.values()) if left else 0,
                ]
            )

    secretreads.SecretReads._list = timed_list  # type: ignore[method-assign]
    listed = secretwatch.SecretWatches._listing

    def timed_listing(self: Any, namespace: str | None, listable: bool) -> None:
        timer.reads.append(["watch-listed", time.time(), namespace, listable])
        listed(self, namespace, listable)

    secretwatch.SecretWatches._listing = timed_listing  # type: ignore[method-assign]


def _deep_size(obj: Any) -> int:
    """Bytes of a JSON value: its containers and their strings, ints and floats."""
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        for key, value in obj.items():
            size += sys.getsizeof(key) + _deep_size(value)
    elif isinstance(obj, list):
        for value in obj:
            size += _deep_size(value)
    return size


def _api_objects(everything: list[Any]) -> dict[str, list[Any]]:
    """The API objects alive as JSON dicts, by kind: how many, of how many distinct objects
    (namespace/name), and their bytes; and what holds a few of them (the referrers' types)."""
    import collections  # noqa: PLC0415
    import types  # noqa: PLC0415

    by_kind: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for obj in everything:
        if type(obj) is dict and type(obj.get("metadata")) is dict and "name" in obj["metadata"]:
            kind = obj.get("kind") or ("Secret" if "data" in obj else "?")
            by_kind[kind].append(obj)
    out: dict[str, list[Any]] = {}
    for kind, objects in by_kind.items():
        names = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}
        holders: collections.Counter[str] = collections.Counter()
        for obj in objects[:: max(1, len(objects) // 20)]:
            for ref in gc.get_referrers(obj):
                if ref is objects or ref is everything:
                    continue
                name = type(ref).__qualname__
                if isinstance(ref, (dict, list, tuple)):
                    # A container: named by what holds it in turn.
                    outer = [
                        type(r).__qualname__
                        for r in gc.get_referrers(ref)
                        if r is not everything and not isinstance(r, types.FrameType)
                    ]
                    name += "<" + ",".join(sorted(set(outer))[:3]) + ">"
                holders[name] += 1
        out[kind] = [
            len(objects),
            len(names),
            sum(_deep_size(o) for o in objects),
            holders.most_common(6),
        ]
    return out


def _census(path: str) -> None:
    """On SIGUSR1, a census of the heap appended to ``path`` as ``["heap", unix time, RSS MB,
    malloc's (arena, mmapped, in use, free) bytes, the gc-tracked objects by type (the 40
    most), the frozen count, the API objects kept as JSON (see ``_api_objects``)]``, and
    pymalloc's own statistics on stderr (the manager's log); a ``tracemalloc`` snapshot too
    when ``KOKUMI_BENCH_TRACEMALLOC`` asks for tracing. Diagnostic: it takes the loop for a
    second or more, so no figure comes from such a run."""
    import collections  # noqa: PLC0415
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost",
            )
        ]  # fmt: skip

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def take(_signum: int, _frame: Any) -> None:
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        everything = gc.get_objects()
        counts = collections.Counter(type(o).__qualname__ for o in everything)
        kept = _api_objects(everything)
        del everything
        gc.freeze()
        info = libc.mallinfo2()
        rss = 0.0
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
        record = [
            "heap",
            time.time(),
            rss,
            [info.arena, info.hblkhd, info.uordblks, info.fordblks],
            counts.most_common(40),
            frozen,
            kept,
        ]
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")
        sys._debugmallocstats()
        if tracemalloc.is_tracing():
            taken[0] += 1
            tracemalloc.take_snapshot().dump(f"{path}.{os.getpid()}.{taken[0]}.tracemalloc")

    # KOKUMI_BENCH_TRACEMALLOC=N: trace every allocation with N frames from the start, and
    # dump a snapshot with each census (tracemalloc doubles the CPU: diagnostic only).
    frames = int(os.environ.get("KOKUMI_BENCH_TRACEMALLOC") or 0)
    taken = [0]
    if frames:
        tracemalloc.start(frames)

    signal.signal(signal.SIGUSR1, take)


def _bind_checks(source: str) -> None:
    """Bind every connection to a spoke (port 6443 on 127.20.0.0 and up) to ``source``: the fake
    fleet records each ask's source address, so the runner tells which replica made each check.
    The hub's connections are left as they are."""
    import socket  # noqa: PLC0415

    connect = socket.socket.connect

    def bound_connect(self: socket.socket, address: Any) -> None:
        if (
            isinstance(address, tuple)
            and len(address) >= 2
            and address[1] == 6443
            and str(address[0]).startswith("127.")
            and not str(address[0]).startswith("127.0.")
        ):
            self.bind((source, 0))
        connect(self, address)

    socket.socket.connect = bound_connect  # type: ignore[method-assign]


def main() -> None:
    source = os.environ.get("KOKUMI_BENCH_SOURCE")
    if source:
        _bind_checks(source)
    timer = LoopTimer()
    _time_slots(timer)
    _time_reads(timer)
    path = os.environ.get("KOKUMI_BENCH_LOOP")
    gc.callbacks.append(timer.gc_callback)
    if path:
        threading.Thread(target=_dump, args=(timer, path), daemon=True).start()
        _census(path)
    original = trio.run

    def run(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("instruments", []).append(timer)
        return original(*args, **kwargs)

    trio.run = run  # type: ignore[assignment]
    raise SystemExit(cli.main())


if __name__ == "__main__":
    main()
