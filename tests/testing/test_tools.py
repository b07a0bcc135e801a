"""kokumi.testing.tools: the build step of the tools the tests check deliverables with."""

from __future__ import annotations

import re

import pytest

from kokumi.testing.build import GO_MODULES
from kokumi.testing.tools import (
    ARGOCD_TOOLCHAIN,
    HELM_VERSIONS,
    _module_version,
    ensure_helm,
    main,
)


def test_the_build_command_refuses_anything_but_build(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["biuld"]) == 2
    assert "usage: python -m kokumi.testing build" in capsys.readouterr().err


def test_the_toolchain_is_new_enough_for_the_argocd_module() -> None:
    """The build sets GOTOOLCHAIN itself: it must satisfy the module's go line, or Go refuses."""
    go_mod = (GO_MODULES / "argocd" / "go.mod").read_text()
    declared = re.search(r"^go (\d+)\.(\d+)(?:\.(\d+))?$", go_mod, re.MULTILINE)
    assert declared is not None
    wanted = tuple(int(part or 0) for part in declared.groups())
    toolchain = tuple(int(part) for part in ARGOCD_TOOLCHAIN.removeprefix("go").split("."))
    assert toolchain >= wanted
    assert _module_version("argocd", "github.com/argoproj/argo-cd/v3") == "v3.6.1"


def test_the_argocd_module_keeps_argo_cds_kubernetes_pins() -> None:
    """Requiring argo-cd ignores its replace lines: the wrapper carries the k8s.io pins itself."""
    go_mod = (GO_MODULES / "argocd" / "go.mod").read_text()
    pins = dict(re.findall(r"^\s*(k8s\.io/[\w-]+) => k8s\.io/[\w-]+ (v\S+)$", go_mod, re.MULTILINE))
    assert {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go"} <= pins.keys()
    assert set(pins.values()) == {"v0.37.0"}


def test_only_the_helm_releases_the_chart_claims_are_built() -> None:
    assert HELM_VERSIONS == ("v3.22.0", "v4.3.1")
    with pytest.raises(ValueError, match=re.escape("helm v3.0.0 is not one of v3.22.0, v4.3.1")):
        ensure_helm("v3.0.0")
    for version in HELM_VERSIONS:
        module = GO_MODULES / f"helm{version[1]}" / "go.mod"
        assert f"require helm.sh/helm/v{version[1]} {version}\n" in module.read_text()
