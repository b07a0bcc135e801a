"""The test control plane's binaries: kube-apiserver, kube-controller-manager and etcd, built from
Go modules and cached outside the repository, keyed by version, so that a second run builds nothing.

Apart from :mod:`kokumi.testing.controlplane`, which runs them, because building is its own
concern with its own failure (:class:`BuildError`: no Go, a broken module) and its own users:
:mod:`kokumi.testing.tools` builds the other tools the tests run the same way, into the same
cache, under the same lock, and ``python -m kokumi.testing build`` builds everything ahead of a
test run. Synchronous, like the control plane: a build outlives any Trio run.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

__all__ = ["GO_MODULES", "Binaries", "BuildError", "cache_root", "ensure_binaries", "go_build"]

# Package data of kokumi.testing: found the same way in a checkout and in an installed wheel.
GO_MODULES = Path(__file__).resolve().parent / "go"


class BuildError(RuntimeError):
    """The control plane's binaries could not be built; the message says what to install or fix."""


@attrs.frozen
class Binaries:
    kube_apiserver: Path
    kube_controller_manager: Path
    etcd: Path
    kubernetes_version: str
    etcd_version: str


def _required_version(go_mod: Path, module: str) -> str:
    match = re.search(rf"^require {re.escape(module)} (v\S+)$", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise BuildError(f"{go_mod} does not require {module} on a line of its own")
    return match.group(1)


def cache_root() -> Path:
    """Where built binaries live: outside the repository so a fresh clone reuses them."""
    env = os.environ.get("KOKUMI_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kokumi"


def _cached_build(out: Path, names: Sequence[str], build: Callable[[Path], None]) -> None:
    """Make ``out`` hold the files ``names``, calling ``build(folder)`` only if they are missing.

    Two processes may need the binaries at once (a test run and a demo started together). A lock
    file beside ``out`` lets one build at a time, and the one that waited finds the other's result
    instead of building again. Each build writes into a folder of its own, renamed into place only
    once complete: a reader never sees half a cache, and no builder can delete another's result.
    """

    def complete() -> bool:
        return all((out / name).exists() for name in names)

    if complete():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / f"{out.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even on a crash
        if complete():
            return
        tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.partial-", dir=out.parent))
        try:
            tmp.chmod(0o755)
            build(tmp)
            if out.exists():
                # Incomplete, so nobody runs from it: a folder left by hand or by an older layout.
                # Moved aside first, so that the rename below is one step.
                aside = Path(tempfile.mkdtemp(prefix=f"{out.name}.stale-", dir=out.parent))
                out.rename(aside / out.name)
                shutil.rmtree(aside, ignore_errors=True)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def go_build(
    module_dir: Path,
    out: Path,
    binaries: Sequence[tuple[str, str]],
    ldflags: str,
    env: dict[str, str] | None = None,
) -> None:
    """Build each (package, name) into ``out`` unless there: a broken build leaves no cache.

    ``env`` adds to the build's environment: a module that needs a newer Go than the machine's
    names its toolchain there (``GOTOOLCHAIN``), so no shell has to export it. Shared with
    :mod:`kokumi.testing.tools`, which builds the other tools the tests run the same way.
    """
    go = shutil.which("go")

    def build(tmp: Path) -> None:
        if go is None:
            raise BuildError(
                "the test control plane is built from Go modules: install Go 1.26 or newer "
                "(https://go.dev/doc/install) and put `go` on PATH"
            )
        build_env = {**os.environ, "CGO_ENABLED": "0", **(env or {})}
        started = time.monotonic()
        for package, name in binaries:
            print(f"kokumi: building {package} (once; cached in {out})", file=sys.stderr)
            # No VCS stamping: the wrapper module sits inside the project's own git checkout.
            cmd = [go, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags]
            cmd += ["-o", str(tmp / name), package]
            result = subprocess.run(
                cmd, cwd=module_dir, env=build_env, capture_output=True, text=True, check=False
            )
            if result.returncode != 0:
                raise BuildError(f"go build in {module_dir} failed:\n{result.stderr[-4000:]}")
        print(f"kokumi: built in {time.monotonic() - started:.0f} s", file=sys.stderr)

    _cached_build(out, [name for _, name in binaries], build)


def ensure_binaries() -> Binaries:
    """Build kube-apiserver, kube-controller-manager and etcd unless the cache has them."""
    kube_version = _required_version(GO_MODULES / "kube" / "go.mod", "k8s.io/kubernetes")
    etcd_version = _required_version(GO_MODULES / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3")
    kube_dir = cache_root() / f"kubernetes-{kube_version}"
    etcd_dir = cache_root() / f"etcd-{etcd_version}"
    minor = kube_version.split(".")[1]
    pkg = "k8s.io/component-base/version"
    ldflags = (
        f"-s -w -X {pkg}.gitVersion={kube_version} -X {pkg}.gitMajor=1 -X {pkg}.gitMinor={minor}"
    )
    go_build(
        GO_MODULES / "kube",
        kube_dir,
        [
            ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
            ("k8s.io/kubernetes/cmd/kube-controller-manager", "kube-controller-manager"),
        ],
        ldflags,
    )
    go_build(GO_MODULES / "etcd", etcd_dir, [("go.etcd.io/etcd/server/v3", "etcd")], "-s -w")
    return Binaries(
        kube_apiserver=kube_dir / "kube-apiserver",
        kube_controller_manager=kube_dir / "kube-controller-manager",
        etcd=etcd_dir / "etcd",
        kubernetes_version=kube_version,
        etcd_version=etcd_version,
    )
