"""Argo CD health for Kokumi's kinds, checked with Argo CD's own Lua health code.

The scripts under deploy/argocd/resource_customizations run through argo-cd v3.6.1's ``util/lua``
(kokumi/testing/go/argocd), given as ``argocd-cm`` entries with standard libraries off, as a user
who pastes docs/argocd.md's snippet runs them. The snippets (argocd-cm.yaml, argo-helm's values,
the Operator's ArgoCD) and the docs' blocks are held equal to the .lua files, and each, read back
into Argo CD's layout as its installer writes argocd-cm from it, passes the same cases.
"""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kokumi.core.reasons import Reason

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
CUSTOMIZATIONS = ARGOCD / "resource_customizations"
GROUP = "delivery.kokumi.dev"
KINDS = ("Cluster", "ClusterSource", "Environment")
DOC = ARGOCD.parents[1] / "docs" / "argocd.md"
PREFIX = "resource.customizations.health."
# argocd-operator's ResourceHealthCheck (api/v1beta1/argocd_types.go; in its CRD, config/crd/bases/
# argoproj.io_argocds.yaml, the items of spec.resourceHealthChecks: three strings).
OPERATOR_CHECK_FIELDS = {"group", "kind", "check"}


def run_health(binary: Path, root: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(binary), str(root)], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    cases: list[dict[str, Any]] = json.loads(result.stdout)
    return cases


def failures(cases: list[dict[str, Any]]) -> list[str]:
    return [
        f"{case['key']} {case['inputPath']}: expected {case['expected']}, "
        f"got {case['actual']} {case.get('error', '')}"
        for case in cases
        if case.get("error") or case["actual"] != case["expected"]
    ]


def test_every_case_passes_through_argo_cds_own_lua(argocd_lua_health: Path) -> None:
    cases = run_health(argocd_lua_health, CUSTOMIZATIONS)
    assert failures(cases) == []
    for kind in KINDS:
        statuses = {c["actual"]["status"] for c in cases if c["key"] == f"{GROUP}/{kind}"}
        assert statuses == {"Healthy", "Progressing", "Degraded"}, kind
    # Every case file of the layout is run: none sits unread in testdata/.
    on_disk = {
        (f"{GROUP}/{path.parents[1].name}", f"testdata/{path.name}")
        for path in CUSTOMIZATIONS.glob(f"{GROUP}/*/testdata/*.yaml")
    }
    assert {(c["key"], c["inputPath"]) for c in cases} == on_disk


def _cluster(status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "spoke", "namespace": "team-a", "generation": 2},
        "spec": {"connection": "InCluster"},
        "status": {
            "observedGeneration": 2,
            "conditions": [
                {"type": "Ready", "status": status, "reason": reason, "message": message}
            ],
        },
    }


def test_every_cluster_reason_has_its_health(argocd_lua_health: Path, tmp_path: Path) -> None:
    """Each Reason a Cluster's Ready condition can carry, as Argo CD shows it."""
    folder = tmp_path / GROUP / "Cluster"
    (folder / "testdata").mkdir(parents=True)
    shutil.copy(CUSTOMIZATIONS / GROUP / "Cluster" / "health.lua", folder)
    tests = []
    for reason in map(str, Reason):
        message = f"what is wrong with {reason} and how to fix it"
        if reason == Reason.READY:
            obj, expected = _cluster("True", reason, message), {"status": "Healthy"}
        elif reason == Reason.REGISTRATION_PENDING:
            obj, expected = _cluster("False", reason, message), {"status": "Progressing"}
        else:
            obj, expected = _cluster("False", reason, message), {"status": "Degraded"}
        expected["message"] = message if reason == Reason.READY else f"{reason}: {message}"
        (folder / "testdata" / f"{reason}.yaml").write_text(yaml.safe_dump(obj))
        tests.append({"inputPath": f"testdata/{reason}.yaml", "healthStatus": expected})
    unknown = _cluster("Unknown", "Checking", "the first check is under way")
    (folder / "testdata" / "unknown.yaml").write_text(yaml.safe_dump(unknown))
    tests.append(
        {
            "inputPath": "testdata/unknown.yaml",
            "healthStatus": {
                "status": "Progressing",
                "message": "Checking: the first check is under way",
            },
        }
    )
    (folder / "health_test.yaml").write_text(yaml.safe_dump({"tests": tests}))
    cases = run_health(argocd_lua_health, tmp_path)
    assert len(cases) == len(Reason) + 1
    assert failures(cases) == []


def _copy_layout(tmp_path: Path) -> Path:
    root = tmp_path / "resource_customizations"
    shutil.copytree(CUSTOMIZATIONS, root)
    return root


def test_a_wrong_expectation_is_reported(argocd_lua_health: Path, tmp_path: Path) -> None:
    root = _copy_layout(tmp_path)
    test_file = root / GROUP / "Cluster" / "health_test.yaml"
    tests = yaml.safe_load(test_file.read_text())
    tests["tests"][0]["healthStatus"]["status"] = "Suspended"
    test_file.write_text(yaml.safe_dump(tests))
    found = failures(run_health(argocd_lua_health, root))
    assert len(found) == 1
    assert "'Suspended'" in found[0]
    assert "'Healthy'" in found[0]


def test_standard_libraries_are_off_as_in_argocd_cm(
    argocd_lua_health: Path, tmp_path: Path
) -> None:
    """string.* works in a plain Lua but not in argocd-cm's default: the runner fails it too."""
    root = _copy_layout(tmp_path)
    script = root / GROUP / "Environment" / "health.lua"
    script.write_text(
        'local hs = {}\nhs.status = "Healthy"\nhs.message = string.format("%d", 1)\nreturn hs\n'
    )
    cases = [c for c in run_health(argocd_lua_health, root) if c["key"] == f"{GROUP}/Environment"]
    assert cases
    assert all("string" in c["error"] and c["actual"] is None for c in cases)


def test_a_script_that_does_not_compile_is_an_error(
    argocd_lua_health: Path, tmp_path: Path
) -> None:
    root = _copy_layout(tmp_path)
    (root / GROUP / "ClusterSource" / "health.lua").write_text("local hs = {\nreturn hs\n")
    cases = [c for c in run_health(argocd_lua_health, root) if c["key"] == f"{GROUP}/ClusterSource"]
    assert cases
    assert all(c["error"] and c["actual"] is None for c in cases)


def _doc_configmap() -> dict[str, Any]:
    text = DOC.read_text()
    build = runpy.run_path(str(ARGOCD / "build-argocd-cm.py"))
    block = text[text.index(build["BEGIN"]) : text.index(build["END"])]
    snippet = block.split("```yaml\n", 1)[1].split("```", 1)[0]
    loaded: dict[str, Any] = yaml.safe_load(snippet)
    return loaded


def test_the_snippet_and_configmap_are_the_scripts() -> None:
    result = subprocess.run(
        [sys.executable, str(ARGOCD / "build-argocd-cm.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    configmap = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert _doc_configmap() == configmap
    assert configmap["metadata"] == {"name": "argocd-cm", "namespace": "argocd"}
    assert configmap["data"] == {
        f"resource.customizations.health.{GROUP}_{kind}": (
            CUSTOMIZATIONS / GROUP / kind / "health.lua"
        ).read_text()
        for kind in KINDS
    }


def test_a_stale_snippet_is_regenerated_and_missing_markers_refused(tmp_path: Path) -> None:
    build = runpy.run_path(str(ARGOCD / "build-argocd-cm.py"))
    stale = DOC.read_text().replace("hs.status = ", "hs.status =  ", 1)
    assert build["doc"](stale) == DOC.read_text()
    doc = tmp_path / "argocd.md"
    doc.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="markers"):
        build["doc"](doc.read_text())


def test_the_snippet_passes_as_argo_cd_reads_it(argocd_lua_health: Path, tmp_path: Path) -> None:
    """The docs' argocd-cm entries, written back into Argo CD's layout, pass the same cases."""
    root = _copy_layout(tmp_path)
    for key, script in _doc_configmap()["data"].items():
        group, kind = key.removeprefix("resource.customizations.health.").rsplit("_", 1)
        (root / group / kind / "health.lua").write_text(script)
    cases = run_health(argocd_lua_health, root)
    assert len(cases) == len(run_health(argocd_lua_health, CUSTOMIZATIONS))
    assert failures(cases) == []


def _scripts() -> dict[str, str]:
    return {
        f"{PREFIX}{GROUP}_{kind}": (CUSTOMIZATIONS / GROUP / kind / "health.lua").read_text()
        for kind in KINDS
    }


def _helm_entries(values: dict[str, Any]) -> dict[str, str]:
    """argocd-cm's entries as argo-helm's argo-cd chart writes them: configs.cm's keys, as they are.

    The chart's ``argo-cd.config.cm`` helper (templates/_helpers.tpl) writes every key of
    ``configs.cm`` but ``create`` and ``annotations`` into argocd-cm's data.
    """
    assert list(values) == ["configs"]
    assert list(values["configs"]) == ["cm"]
    entries: dict[str, str] = {
        key: value
        for key, value in values["configs"]["cm"].items()
        if key not in {"create", "annotations"}
    }
    return entries


def _operator_entries(argocd: dict[str, Any]) -> dict[str, str]:
    """argocd-cm's entries as the Argo CD Operator writes them from spec.resourceHealthChecks.

    Its getResourceHealthChecks (controllers/argocd/configmap.go) keys each check
    ``resource.customizations.health.<group>_<kind>`` (no ``_`` when the group is empty).
    """
    assert argocd["apiVersion"] == "argoproj.io/v1beta1"
    assert argocd["kind"] == "ArgoCD"
    assert set(argocd["metadata"]) == {"name", "namespace"}
    assert list(argocd["spec"]) == ["resourceHealthChecks"]
    entries: dict[str, str] = {}
    for check in argocd["spec"]["resourceHealthChecks"]:
        assert set(check) == OPERATOR_CHECK_FIELDS
        assert all(isinstance(value, str) for value in check.values())
        group = f"{check['group']}_" if check["group"] else ""
        entries[f"{PREFIX}{group}{check['kind']}"] = check["check"]
    return entries


SNIPPETS = {
    "argocd-cm.yaml": lambda configmap: configmap["data"],
    "argo-helm-values.yaml": _helm_entries,
    "argocd-operator-health.yaml": _operator_entries,
}


def _doc_block(name: str) -> dict[str, Any]:
    build = runpy.run_path(str(ARGOCD / "build-argocd-cm.py"))
    begin, end = (
        (build["BEGIN"], build["END"]) if name == "argocd-cm.yaml" else build["BLOCKS"][name]
    )
    text = DOC.read_text()
    snippet = text[text.index(begin) : text.index(end)].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert snippet == (ARGOCD / name).read_text()
    loaded: dict[str, Any] = yaml.safe_load(snippet)
    return loaded


@pytest.mark.parametrize("name", SNIPPETS)
def test_each_snippet_and_its_doc_block_are_the_scripts(name: str) -> None:
    """Byte for byte: what argocd-cm gets from each snippet, and the docs' copy of it."""
    snippet = yaml.safe_load((ARGOCD / name).read_text())
    assert SNIPPETS[name](snippet) == _scripts()
    assert _doc_block(name) == snippet


@pytest.mark.parametrize("name", SNIPPETS)
def test_each_snippet_passes_as_argo_cd_reads_it(
    name: str, argocd_lua_health: Path, tmp_path: Path
) -> None:
    """Each snippet's argocd-cm entries, in Argo CD's layout, pass the same cases as the scripts."""
    root = _copy_layout(tmp_path)
    entries = SNIPPETS[name](yaml.safe_load((ARGOCD / name).read_text()))
    for key, script in entries.items():
        group, kind = key.removeprefix(PREFIX).rsplit("_", 1)
        (root / group / kind / "health.lua").write_text(script)
    cases = run_health(argocd_lua_health, root)
    assert len(cases) == len(run_health(argocd_lua_health, CUSTOMIZATIONS))
    assert failures(cases) == []


def test_a_stale_snippet_fails_the_check(tmp_path: Path) -> None:
    """--check names each snippet that differs from the scripts."""
    argocd = tmp_path / "deploy" / "argocd"
    shutil.copytree(ARGOCD, argocd)
    (tmp_path / "docs").mkdir()
    shutil.copy(DOC, tmp_path / "docs" / "argocd.md")
    build = [sys.executable, str(argocd / "build-argocd-cm.py"), "--check"]
    assert subprocess.run(build, capture_output=True, check=False).returncode == 0
    script = argocd / "resource_customizations" / GROUP / "Environment" / "health.lua"
    script.write_text(script.read_text().replace("Healthy", "Healthy ", 1))
    result = subprocess.run(build, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    stale = {line.split(" is stale")[0].rsplit("/", 1)[1] for line in result.stderr.splitlines()}
    assert stale == {*SNIPPETS, "argocd.md"}
