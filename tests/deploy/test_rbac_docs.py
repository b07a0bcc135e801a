"""docs/rbac.md is what the real hub answers to ``kubectl auth can-i --list`` for each role."""

from __future__ import annotations

import difflib

from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, ensure_namespace, run
from tests.support.rbac_docs import DOC, render


def test_rbac_doc_is_what_the_hub_answers(hub: APIServer) -> None:
    ensure_namespace(hub, "argocd")
    run(
        hub.admin_kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(DEPLOY / "install.yaml"),
    )
    rendered = render(hub)
    committed = DOC.read_text()
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            "docs/rbac.md",
            "what the hub answers",
        )
    )
    assert committed == rendered, (
        f"docs/rbac.md is stale: run python -m tests.support.rbac_docs\n{diff}"
    )
    # What the least-privilege work promises, read from the same answers:
    manager = rendered.split("## The manager, kokumi:kokumi", 1)[1].split("\n## ", 1)[0]
    elsewhere = manager.split("### In `team-without-binding`", 1)[1]
    assert "`secrets`" not in elsewhere
    assert "`events` | [] | [] | [create]" in manager
    assert "update" not in manager.split("### In `argocd`", 1)[0]
