"""docs/rbac.md, written from what the real hub answers to ``kubectl auth can-i --list``.

Each role is bound, exactly as install.yaml or deploy/README.md binds it, to an identity minted for
it alone (a client certificate of a fresh user), and ``kubectl auth can-i --list`` runs as that
identity in each namespace that matters. What every authenticated user may do anyway (discovery,
self reviews) is subtracted, so each table shows what the role adds. A fresh identity rather
than the real ServiceAccount kokumi:kokumi: on a shared hub, other tests bind that one too.

    python -m tests.support.rbac_docs        # start a control plane, write docs/rbac.md

tests/deploy/test_rbac_docs.py renders the same text against the session's hub and fails while
docs/rbac.md differs from it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from pathlib import Path

import attrs

from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, ensure_namespace, run, wait_until

__all__ = ["DOC", "Binding", "Role", "ROLES", "render"]

DOC = DEPLOY.parent / "docs" / "rbac.md"

# A workspace: a namespace that holds Kubeconfig Clusters. Any other namespace: one that does not.
WORKSPACE = "platform"
OTHER = "team-without-binding"


@attrs.frozen
class Binding:
    """One binding as install.yaml or the README makes it: cluster-wide, or in one namespace."""

    kind: str  # ClusterRole or Role
    name: str
    namespace: str | None  # None: a ClusterRoleBinding
    source: str  # where the binding comes from, for the reader


@attrs.frozen
class Role:
    title: str
    about: str
    bindings: tuple[Binding, ...]
    namespaces: tuple[str, ...]


INSTALL = "install.yaml"
README = "deploy/README.md"

ROLES: tuple[Role, ...] = (
    Role(
        "The manager, kokumi:kokumi",
        "Everything the ServiceAccount of `kokumi manager` holds after `install.yaml`, with"
        f" `kokumi-manager-secrets` bound in the workspace `{WORKSPACE}`.",
        (
            Binding("ClusterRole", "kokumi-manager", None, INSTALL),
            Binding("Role", "kokumi-manager", "kokumi", INSTALL),
            Binding("ClusterRole", "kokumi-manager-secrets", "argocd", INSTALL),
            Binding("ClusterRole", "kokumi-argocd-cluster-registrar", "argocd", INSTALL),
            Binding("ClusterRole", "kokumi-manager-secrets", WORKSPACE, README),
        ),
        ("kokumi", "argocd", WORKSPACE, OTHER),
    ),
    Role(
        "kokumi-manager-secrets",
        "The manager's Secret access, bound per namespace that holds Kubeconfig Clusters.",
        (Binding("ClusterRole", "kokumi-manager-secrets", WORKSPACE, README),),
        (WORKSPACE, OTHER),
    ),
    Role(
        "kokumi-argocd-cluster-registrar",
        "How the manager writes cluster Secrets in Argo CD's namespace: write only, no read.",
        (Binding("ClusterRole", "kokumi-argocd-cluster-registrar", "argocd", INSTALL),),
        ("argocd",),
    ),
    Role(
        "kokumi-cluster-credentials",
        "The Secret access Kokumi's admin needs in a namespace with Kubeconfig Clusters.",
        (Binding("ClusterRole", "kokumi-cluster-credentials", WORKSPACE, README),),
        (WORKSPACE,),
    ),
    Role(
        "kokumi-delivery-view",
        "Aggregated into the built-in view, edit and admin; shown here bound on its own.",
        (Binding("ClusterRole", "kokumi-delivery-view", WORKSPACE, "for this page only"),),
        (WORKSPACE,),
    ),
    Role(
        "kokumi-delivery-edit",
        "Aggregated into the built-in edit and admin; shown here bound on its own.",
        (Binding("ClusterRole", "kokumi-delivery-edit", WORKSPACE, "for this page only"),),
        (WORKSPACE,),
    ),
)

Row = tuple[str, str, str, str]  # resource, non-resource URLs, resource names, verbs

_ROW = re.compile(r"^(\S*)\s+(\[[^\]]*\])\s+(\[[^\]]*\])\s+(\[[^\]]*\])\s*$")


def can_i_list(kubeconfig: Path, namespace: str) -> set[Row]:
    """The rows of ``kubectl auth can-i --list`` in ``namespace``, as the kubeconfig's user."""
    output = run(kubeconfig, "auth", "can-i", "--list", "-n", namespace).stdout
    rows: set[Row] = set()
    for line in output.splitlines()[1:]:  # the header
        match = _ROW.match(line)
        if match is None:
            raise AssertionError(f"kubectl auth can-i --list printed an unknown line: {line!r}")
        resource, urls, names, verbs = (_sorted(field) for field in match.groups())
        rows.add((resource, urls, names, verbs))
    return rows


def _sorted(field: str) -> str:
    """``[b a]`` as ``[a b]``: the order the server merges rules in is not part of the answer."""
    if field.startswith("[") and field.endswith("]"):
        return "[" + " ".join(sorted(field[1:-1].split())) + "]"
    return field


def _settled(kubeconfig: Path, baseline_kubeconfig: Path, namespace: str) -> set[Row]:
    """The rows once two reads a second apart agree: bindings reach the authorizer in a moment."""
    last: set[Row] | None = None

    def stable() -> set[Row] | None:
        nonlocal last
        rows = can_i_list(kubeconfig, namespace) - can_i_list(baseline_kubeconfig, namespace)
        agreed = rows if rows == last else None
        last = rows
        return agreed

    return wait_until(stable, f"RBAC settles in {namespace}", interval=1.0)


def _bind(hub: APIServer, user: str, binding: Binding, made: list[tuple[str, ...]]) -> None:
    name = f"rbac-docs-{user}"
    args: tuple[str, ...]
    if binding.namespace is None:
        args = ("create", "clusterrolebinding", name, f"--clusterrole={binding.name}")
        made.append(("delete", "clusterrolebinding", name))
    else:
        role = "--clusterrole" if binding.kind == "ClusterRole" else "--role"
        name = f"{name}-{binding.name}"
        args = ("-n", binding.namespace, "create", "rolebinding", name, f"{role}={binding.name}")
        made.append(("-n", binding.namespace, "delete", "rolebinding", name))
    run(hub.admin_kubeconfig, *args, f"--user={user}")


def _table(rows: Iterable[Row]) -> list[str]:
    lines = ["| Resource | Non-resource URLs | Resource names | Verbs |", "|---|---|---|---|"]
    for resource, urls, names, verbs in sorted(rows):
        lines.append(f"| `{resource}` | {urls} | {names} | {verbs} |".replace("| `` |", "|  |"))
    return lines


def render(hub: APIServer) -> str:
    """docs/rbac.md as the hub answers now; install.yaml's roles must be applied."""
    for namespace in ("kokumi", "argocd", WORKSPACE, OTHER):
        ensure_namespace(hub, namespace)
    baseline_user = f"nobody-{uuid.uuid4().hex[:6]}"
    baseline_kubeconfig = hub.kubeconfig_for(baseline_user)
    out = [
        "# RBAC: what each of Kokumi's roles allows",
        "",
        "Generated by `python -m tests.support.rbac_docs` from `kubectl auth can-i --list`",
        "on a real API server with `install.yaml` applied; `tests/deploy/test_rbac_docs.py`",
        "fails while this file differs from what the server answers. Each role is bound as shown",
        "to an identity of its own; what every authenticated user may do anyway (discovery, self",
        "reviews) is left out.",
        f"`{WORKSPACE}` stands for a namespace that holds Kubeconfig Clusters, `{OTHER}` for one",
        "that holds none, or whose RoleBinding is missing.",
        "",
        "The manager never holds a Secret verb cluster-wide, nor any verb in `kokumi-signing`.",
        "`deploy/optional/manager-secrets-cluster-wide.yaml` changes that for teams that opt in.",
    ]
    made: list[tuple[str, ...]] = []
    try:
        for role in ROLES:
            user = f"rbac-{uuid.uuid4().hex[:8]}"
            for binding in role.bindings:
                _bind(hub, user, binding, made)
            kubeconfig = hub.kubeconfig_for(user)
            out += ["", f"## {role.title}", "", role.about, ""]
            for binding in role.bindings:
                where = (
                    "ClusterRoleBinding"
                    if binding.namespace is None
                    else f"RoleBinding in `{binding.namespace}`"
                )
                out.append(f"- {binding.kind} `{binding.name}`: {where} ({binding.source})")
            for namespace in role.namespaces:
                rows = _settled(kubeconfig, baseline_kubeconfig, namespace)
                out += ["", f"### In `{namespace}`", ""]
                out += _table(rows) if rows else ["Nothing beyond what every user may do."]
    finally:
        for args in made:
            run(hub.admin_kubeconfig, *args, check=False)
    return "\n".join(out) + "\n"


def main() -> int:
    from kokumi.testing.controlplane import ControlPlane  # only the script starts one

    plane = ControlPlane.start()
    try:
        hub = plane.hub
        ensure_namespace(hub, "argocd")
        run(hub.admin_kubeconfig, "apply", "--server-side", "-f", str(DEPLOY / "install.yaml"))
        DOC.write_text(render(hub))
    finally:
        plane.stop()
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
