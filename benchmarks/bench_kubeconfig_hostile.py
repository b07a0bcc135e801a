"""What a hostile kubeconfig costs to refuse: the slowest documents a Secret's author can write.

A kubeconfig Secret is written by whoever may edit it, and the manager parses it whenever it
changes. YAML's extras (sexagesimal integers, merge keys, aliases) can make a small document cost
seconds of CPU or gigabytes; the reader refuses them while it walks the events, and a parse has a
CPU budget besides. Run from the repository root:

    .venv/bin/python benchmarks/bench_kubeconfig_hostile.py

Each figure is the slowest of three parses, with the refusal's code.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

import yaml

from kokumi.core.kubeconfig.connection import Refusal
from kokumi.core.kubeconfig.reader import parse


def sexagesimal(size: int) -> str:
    """A YAML 1.1 base-60 integer (1:1:1:...): PyYAML's resolver converts it in quadratic time."""
    return "current-context: " + ":".join(["1"] * (size // 2))


def merge_bomb(levels: int = 9, width: int = 9) -> str:
    """Each level merges the one before ``width`` times: merge keys copy, so the cost multiplies."""
    lines = ["l0: &l0 {k0: v}"]
    for i in range(1, levels):
        merged = ", ".join(f"*l{i - 1}" for _ in range(width))
        lines.append(f"l{i}: &l{i} {{<<: [{merged}], k{i}: v}}")
    return "\n".join(lines) + "\ncurrent-context: x\n"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs: each level lists the one before ``width`` times."""
    lines = ['l0: &l0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join(f"*l{i - 1}" for _ in range(width)) + "]")
    return "\n".join(lines) + "\ncurrent-context: x\n"


def huge_scalar(size: int) -> str:
    """One scalar as large as a Secret allows: linear work, the baseline of the rest."""
    return "current-context: " + "x" * (size - 40) + "\nclusters: []\n"


def many_scalars(size: int) -> str:
    """As many tiny plain scalars as fit: the most events per byte."""
    return "clusters: [" + ",".join(["1"] * (size // 2 - 8)) + "]\n"


CASES: list[tuple[str, Callable[[], str]]] = [
    ("sexagesimal integer, 62 KB", lambda: sexagesimal(62_000)),
    ("sexagesimal integer, 250 KB", lambda: sexagesimal(250_000)),
    ("sexagesimal integer, 980 KB", lambda: sexagesimal(980_000)),
    ("merge-key bomb, 9 x 9", merge_bomb),
    ("alias bomb (billion laughs), 9 x 9", alias_bomb),
    ("one huge scalar, 1 MB", lambda: huge_scalar(1_000_000)),
    ("tiny scalars, 1 MB", lambda: many_scalars(1_000_000)),
]


def main(skip: frozenset[str] = frozenset()) -> None:
    print(f"Python {platform.python_version()}, PyYAML {yaml.__version__}")
    for name, make in CASES:
        if name in skip:
            print(f"| {name} | skipped |")
            continue
        text = make()
        slowest, result = 0.0, None
        for _ in range(3):
            started = time.perf_counter()
            result = parse(text)
            slowest = max(slowest, time.perf_counter() - started)
        code = result.code if isinstance(result, Refusal) else "accepted"
        print(f"| {name} | {len(text.encode()):,} bytes | {slowest * 1000:,.1f} ms | {code} |")


if __name__ == "__main__":
    import sys

    main(frozenset(sys.argv[1:]))
