"""Argo CD health for Kokumi's kinds, checked with Argo CD's own Lua health code.

The scripts under deploy/argocd/resource_customizations run through argo-cd v3.6.1's ``util/lua``
(kokumi/testing/go/argocd), given as ``argocd-cm`` entries with standard libraries off, as a user
who pastes docs/argocd.md's snippet runs them. The snippet and argocd-cm.yaml are held equal to
the .lua files, and read back into Argo CD's layout, they pass the same cases.
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
