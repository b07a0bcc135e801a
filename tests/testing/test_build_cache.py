"""The control plane's build cache when two processes want it at once (no Go, no server).

The build step is a stand-in that writes files slowly and counts its calls: what is under test is
the lock and the rename around it, which are the same whatever the build runs.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kokumi.testing.build import BuildError, _cached_build

NAMES = ("kube-apiserver", "kube-controller-manager")


def slow_build(calls: Path) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        with calls.open("a") as log:
            log.write(f"{folder.name}\n")
        for name in NAMES:
            time.sleep(0.2)  # long enough for the other builder to arrive mid-build
            (folder / name).write_text(f"built in {folder.name}")

    return build


def build_in_process(out: str, calls: str) -> None:
    _cached_build(Path(out), NAMES, slow_build(Path(calls)))


def test_two_processes_building_at_once_build_once_and_both_find_the_result(
    tmp_path: Path,
) -> None:
    out, calls = tmp_path / "kubernetes-v1", tmp_path / "calls"
    context = multiprocessing.get_context("spawn")
    builders = [
        context.Process(target=build_in_process, args=(str(out), str(calls))) for _ in range(2)
    ]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join(60)
        assert builder.exitcode == 0
    assert len(calls.read_text().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == sorted(NAMES)
    # Nothing is left beside the result but the lock file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calls", out.name, f"{out.name}.lock"]


def test_builders_in_threads_each_see_a_complete_cache_when_they_return(tmp_path: Path) -> None:
    out, calls = tmp_path / "etcd-v3", tmp_path / "calls"
    seen: list[list[str]] = []
    start = threading.Barrier(4)

    def builder() -> None:
        start.wait()
        _cached_build(out, NAMES, slow_build(calls))
        seen.append(sorted(p.name for p in out.iterdir()))

    threads = [threading.Thread(target=builder) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == [sorted(NAMES)] * 4
    assert len(calls.read_text().splitlines()) == 1


def test_a_failed_build_leaves_no_cache_and_the_next_builder_builds(tmp_path: Path) -> None:
    out, calls = tmp_path / "etcd-v3", tmp_path / "calls"

    def broken(folder: Path) -> None:
        (folder / NAMES[0]).write_text("half")
        raise BuildError("go build failed")

    with pytest.raises(BuildError, match="go build failed"):
        _cached_build(out, NAMES, broken)
    assert not out.exists()
    assert not list(tmp_path.glob("*.partial-*"))
    _cached_build(out, NAMES, slow_build(calls))
    assert sorted(p.name for p in out.iterdir()) == sorted(NAMES)


def test_an_incomplete_cache_is_replaced_and_a_complete_one_is_never_rebuilt(
    tmp_path: Path,
) -> None:
    out, calls = tmp_path / "kubernetes-v1", tmp_path / "calls"
    out.mkdir()
    (out / NAMES[0]).write_text("left by hand")
    _cached_build(out, NAMES, slow_build(calls))
    assert (out / NAMES[0]).read_text().startswith("built in")
    _cached_build(out, NAMES, slow_build(calls))
    assert len(calls.read_text().splitlines()) == 1
    assert not list(tmp_path.glob("*.stale-*"))
