"""`kokumi demo --once`, the README's main-job command, end to end on its own hub and spoke."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

# The demo starts its own control plane: it needs the built binaries, not the session's fixture.
pytestmark = pytest.mark.cluster


def test_demo_once_registers_the_spoke_and_exits() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kokumi", "demo", "--once", "--ui", "--timeout", "150"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, f"{out[-3000:]}\n{result.stderr[-3000:]}"
    assert "$ kubectl --context spoke create serviceaccount kokumi -n kube-system" in out
    # The demo prints the view each time it changes; the last one is where it settled.
    rows = [line.split() for line in reversed(out.splitlines())]
    spoke = next(r for r in rows if r[:2] == ["cluster.delivery.kokumi.dev/spoke", "Kubeconfig"])
    assert spoke[4:6] == ["True", "Ready"]
    in_cluster = next(
        r for r in rows if r[:2] == ["cluster.delivery.kokumi.dev/in-cluster", "InCluster"]
    )
    assert in_cluster[2] == "https://kubernetes.default.svc"
    env = next(r for r in rows if r[:1] == ["environment.delivery.kokumi.dev/edge"])
    assert env[1:6] == ["ArgoCD", "1", "1", "True", "Ready"]
    secret = next(r for r in rows if r and r[0].startswith("kokumi-") and len(r) >= 4)
    assert secret[1].startswith("kokumi-platform-spoke-")
    assert "Everything is Ready" in out
    # --ui serves the UI beside the manager and prints its one-time sign-in link.
    assert re.search(
        r"# The UI, as the hub's admin: open http://127\.0\.0\.1:\d+/signin\?token=\S+ ", out
    )
    # The Argo CD Secrets table lines up: each header starts where its column's values do.
    lines = out.splitlines()
    header = next(i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("NAME   "))
    value = lines[header + 1]
    for column in ("ARGO CD NAME", "SERVER", "LABELS"):
        start = lines[header].index(column)
        assert value[start - 1] == " " and value[start] != " ", (lines[header], value)
    # The demo shows the registration's name, server and labels, never its credentials.
    assert "bearerToken" not in out
    assert "eyJ" not in out  # no JWT (the ServiceAccount token) anywhere


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def _kubectl_running_under(pid: int) -> bool:
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for child in children.read_text().split():
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                if Path(cmdline[0].decode()).name == "kubectl":
                    return True
    return False


@pytest.mark.parametrize("to", ["process", "group"])
def test_demo_stops_cleanly_on_sigint(to: str) -> None:
    """SIGINT to the Python process alone, or to its whole group as Ctrl-C and `timeout -s INT`
    do: the manager stops, the control plane is taken down, no traceback."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "kokumi", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, so that killpg reaches no test process
    )
    assert demo.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(demo.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    deadline = time.monotonic() + 240
    try:
        # The first view is printed once the manager runs; from then on kubectl polls in a thread.
        while not any(line.startswith("$ kubectl get secrets -n argocd") for line in seen):
            seen.append(lines.get(timeout=max(deadline - time.monotonic(), 0.1)))
        # Signalled while a kubectl poll runs: the moment a stop used to fail in.
        while not _kubectl_running_under(demo.pid):
            assert time.monotonic() < deadline, "the demo stopped polling"
            time.sleep(0.005)
        if to == "process":
            os.kill(demo.pid, signal.SIGINT)
        else:
            os.killpg(demo.pid, signal.SIGINT)
        returncode = demo.wait(60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    reader.join(10)
    assert demo.stderr is not None
    with demo.stdout, demo.stderr:
        stderr = demo.stderr.read()
    assert returncode == 0, stderr[-3000:]
    assert "SIGINT received: stopping" in stderr
    assert "Traceback" not in stderr, stderr[-3000:]
    # The control plane's folder is gone, and no server started from it still runs.
    workdir = next(
        line.split()[3].removesuffix("/hub/admin.kubeconfig")
        for line in seen
        if line.startswith("# kubectl --kubeconfig ")
    )
    assert not Path(workdir).exists()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            assert workdir.encode() not in cmdline.read_bytes()
