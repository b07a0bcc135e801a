"""``ownership.step`` for a new want and for a Cluster wanting its own server again, no server.

Run as ``.venv/bin/python benchmarks/fleet/bench_want.py <checkout>`` (see bench_pass.py).
"""

import sys
import time

sys.path.insert(0, sys.argv[1])
from kokumi.core.registry import ownership
from kokumi.core.registry.ownership import ClusterRef

for n in (1000, 3000, 10000):
    table = ownership.Table()
    refs = [ClusterRef("fleet", f"c{i}") for i in range(n)]
    servers = [f"https://127.20.{i // 250}.{i % 250}:6443" for i in range(n)]
    t = time.perf_counter()
    for r, s in zip(refs, servers, strict=True):
        table, _ = ownership.step(table, ownership.Want(r, s))
    onboard = time.perf_counter() - t
    t = time.perf_counter()
    for r, s in zip(refs, servers, strict=True):
        table, _ = ownership.step(table, ownership.Want(r, s))
    again = (time.perf_counter() - t) / n
    print(f"N={n}: new want {onboard / n * 1e6:.0f} us, wanting again {again * 1e6:.1f} us")
