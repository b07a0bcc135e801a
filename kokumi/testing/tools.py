"""Tools the tests check Kokumi's deliverables with, built from Go modules beside the control plane.

Argo CD reads a custom kind's health from a Lua script and selects clusters for ApplicationSets
from their Secrets, users install Kokumi with Helm, and Prometheus reads its alerts; the tests check
each with the real code (Argo CD's ``util/lua`` and its ApplicationSet cluster generator, the
``helm`` CLI of each major the chart claims, Prometheus' ``promtool``) rather than an imitation.
Each is built once, like the control plane's binaries, into a folder of the same cache keyed by
its version, so that a second run builds nothing.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from kokumi.testing.build import GO_MODULES, BuildError, cache_root, ensure_binaries, go_build

__all__ = [
    "ARGOCD_TOOLCHAIN",
    "HELM_VERSIONS",
    "ensure_argocd_appset_clusters",
    "ensure_argocd_lua_health",
    "ensure_helm",
    "ensure_promtool",
    "main",
]

# Argo CD v3.6 declares go 1.27; the machines start on Go 1.26, and this is the toolchain the Go
# module proxy serves for it. Set only for that build, so nothing else changes Go.
ARGOCD_TOOLCHAIN = "go1.27.3"

# The Helm releases the chart is tested with, one per major it claims.
HELM_VERSIONS = ("v3.22.0", "v4.3.1")


def _module_version(folder: str, module: str) -> str:
    go_mod = (GO_MODULES / folder / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require )?{re.escape(module)} (v\S+)$", go_mod, re.MULTILINE)
    if match is None:
        raise BuildError(f"kokumi/testing/go/{folder}/go.mod does not require {module}")
    return match.group(1)


def ensure_argocd_lua_health() -> Path:
    """The program that runs ``health_test.yaml`` cases through Argo CD's own Lua health code."""
    version = _module_version("argocd", "github.com/argoproj/argo-cd/v3")
    out = cache_root() / f"argocd-lua-health-{version}"
    go_build(
        GO_MODULES / "argocd",
        out,
        [(".", "argocd-lua-health")],
        "-s -w",
        env={"GOTOOLCHAIN": ARGOCD_TOOLCHAIN},
    )
    return out / "argocd-lua-health"


def ensure_argocd_appset_clusters() -> Path:
    """The program that runs an ApplicationSet through Argo CD's own cluster generator and
    renderer against an API server's cluster Secrets, and prints the params and Applications.

    From the same module as the Lua health program, so it shares its dependencies and, built
    after it, most of its compiled packages: what it adds is the ApplicationSet code and the
    clients the generators package links (SCM providers), not a second Argo CD.
    """
    version = _module_version("argocd", "github.com/argoproj/argo-cd/v3")
    # Keyed on the program's source too: it is ours and changes between Argo CD versions, and a
    # cache keyed on the version alone would keep running the old program.
    source = GO_MODULES / "argocd" / "appset" / "main.go"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    out = cache_root() / f"argocd-appset-clusters-{version}-{digest}"
    go_build(
        GO_MODULES / "argocd",
        out,
        [("./appset", "argocd-appset-clusters")],
        "-s -w",
        env={"GOTOOLCHAIN": ARGOCD_TOOLCHAIN},
    )
    return out / "argocd-appset-clusters"


def ensure_helm(version: str) -> Path:
    """The ``helm`` CLI at ``version`` (a module version: ``helm version`` prints no patch)."""
    if version not in HELM_VERSIONS:
        raise ValueError(f"helm {version} is not one of {', '.join(HELM_VERSIONS)}")
    major = version.split(".", maxsplit=1)[0]
    out = cache_root() / f"helm-{version}"
    module = GO_MODULES / f"helm{major.removeprefix('v')}"
    go_build(module, out, [(f"helm.sh/helm/{major}/cmd/helm", "helm")], "-s -w")
    return out / "helm"


def ensure_promtool() -> Path:
    """Prometheus' ``promtool``, which checks the PrometheusRule's rules as Prometheus reads them.

    The largest of the tools (about 6 minutes of one core to build): the price of having the
    alerts' and panels' PromQL parsed by Prometheus itself rather than by a pattern of ours.
    """
    version = _module_version("promtool", "github.com/prometheus/prometheus")
    out = cache_root() / f"promtool-{version}"
    go_build(
        GO_MODULES / "promtool",
        out,
        [("github.com/prometheus/prometheus/cmd/promtool", "promtool")],
        "-s -w",
    )
    return out / "promtool"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kokumi.testing build``: build or find everything the suite runs, say where.

    Each build prints how long it took (kokumi: built in N s), so CI's log shows what a cold
    machine pays for each.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["build"]:
        print("usage: python -m kokumi.testing build", file=sys.stderr)
        return 2
    try:
        binaries = ensure_binaries()
        paths = [binaries.kube_apiserver, binaries.kube_controller_manager, binaries.etcd]
        paths.append(ensure_argocd_lua_health())
        paths.append(ensure_argocd_appset_clusters())
        paths += [ensure_helm(version) for version in HELM_VERSIONS]
        paths.append(ensure_promtool())
    except BuildError as exc:
        print(f"kokumi: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(f"{path} ({path.stat().st_size / 1e6:.0f} MB)")
    return 0
