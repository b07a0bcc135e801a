"""``spec.scope`` from the command line, and what ``import --from argocd`` says it carries over.

As the other command-line tests: ``kokumi`` as a process, the hub as the current kubeconfig, the
objects read back with kubectl. A bad scope is refused in one line before anything is written; an
import withholds "delete the old Secret" while a label an ApplicationSet could select on would
not be carried by the manager's allow-list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.cli import kokumi, one_error_line


def by_token(tmp_path: Path, spoke: Registration) -> tuple[str, ...]:
    """``add``'s flags for the spoke by server, CA and token file: no request to the spoke."""
    (tmp_path / "ca.crt").write_bytes(spoke.ca_pem)
    (tmp_path / "token").write_text(spoke.token)
    return (
        "--server", spoke.server, "--certificate-authority", str(tmp_path / "ca.crt"),
        "--token-file", str(tmp_path / "token"),
    )  # fmt: skip


def get_cluster(kubectl: Kubectl, hub: APIServer, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        kubectl(hub, "get", "kcl", name, "-n", namespace, "-o", "json").stdout
    )
    return found


def test_add_with_a_scope_writes_spec_scope_and_every_view_shows_it(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
    tmp_path: Path,
) -> None:
    flags = by_token(tmp_path, spoke_kubeconfig)
    scope = ("--scope-namespace", "team-a", "--scope-namespace", "team-b, team-c")
    dry = kokumi("cluster", "add", "spoke", "-n", namespace, *flags, *scope,
                 "--cluster-resources", "--dry-run", hub=hub.admin_kubeconfig)  # fmt: skip
    assert dry.code == 0, dry.err
    shown = next(yaml.safe_load_all(dry.out))
    wanted = {"namespaces": ["team-a", "team-b", "team-c"], "clusterResources": True}
    assert shown["spec"]["scope"] == wanted
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""

    added = kokumi("cluster", "add", "spoke", "-n", namespace, *flags, *scope,
                   "--cluster-resources", hub=hub.admin_kubeconfig)  # fmt: skip
    assert added.code == 0, added.err
    assert get_cluster(kubectl, hub, namespace, "spoke")["spec"]["scope"] == wanted

    described = kokumi("cluster", "describe", "spoke", "-n", namespace, hub=hub.admin_kubeconfig)
    assert described.code == 0, described.err
    assert (
        "Scope:        namespaces team-a, team-b, team-c, and cluster-scoped resources"
        in described.out.splitlines()
    ), described.out
    wide = kokumi("cluster", "list", "-n", namespace, "-o", "wide", hub=hub.admin_kubeconfig)
    header, row = wide.out.splitlines()
    at = header.index("SCOPE")
    assert row[at:].startswith("namespaces team-a, team-b, team-c, and cluster-scoped resources")

    # Run again without the flags: the scope stays, as the description does.
    again = kokumi("cluster", "add", "spoke", "-n", namespace, *flags, hub=hub.admin_kubeconfig)
    assert again.code == 0, again.err
    assert get_cluster(kubectl, hub, namespace, "spoke")["spec"]["scope"] == wanted
    # Run again with one namespace and no cluster-scoped resources: exactly that.
    narrower = kokumi("cluster", "add", "spoke", "-n", namespace, *flags,
                      "--scope-namespace", "team-a", hub=hub.admin_kubeconfig)  # fmt: skip
    assert narrower.code == 0, narrower.err
    assert get_cluster(kubectl, hub, namespace, "spoke")["spec"]["scope"] == {
        "namespaces": ["team-a"]
    }

    # Without a scope the views say where Argo CD works: cluster-wide.
    plain = kokumi("cluster", "add", "plain", "-n", namespace, *flags, hub=hub.admin_kubeconfig)
    assert plain.code == 0, plain.err
    assert "scope" not in get_cluster(kubectl, hub, namespace, "plain")["spec"]
    described = kokumi("cluster", "describe", "plain", "-n", namespace, hub=hub.admin_kubeconfig)
    assert "Scope:        cluster-wide" in described.out.splitlines(), described.out


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--scope-namespace", "Team-A"),
         "kokumi: --scope-namespace has 'Team-A', not a namespace name: use lower-case letters, "
         "digits and '-', at most 63"),
        (("--scope-namespace", "a,a"), "kokumi: --scope-namespace names a namespace twice"),
        (("--cluster-resources",),
         "kokumi: --cluster-resources needs --scope-namespace: name the namespaces or remove "
         "clusterResources"),
        (("--scope-namespace", ","), "kokumi: --scope-namespace is empty: name a namespace"),
        (("--scope-namespace", ",".join(f"n{i}" for i in range(65))),
         "kokumi: --scope-namespace lists 65 namespaces, over 64"),
    ],
    ids=["not-a-name", "twice", "cluster-resources-alone", "empty", "too-many"],
)  # fmt: skip
def test_a_bad_scope_is_one_line_and_nothing_is_created(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
    tmp_path: Path,
    flags: tuple[str, ...],
    said: str,
) -> None:
    flags = (*by_token(tmp_path, spoke_kubeconfig), *flags)
    refused = kokumi("cluster", "add", "spoke", "-n", namespace, *flags, hub=hub.admin_kubeconfig)
    assert refused.code == 2
    assert one_error_line(refused).startswith(said), refused.err
    assert kubectl(hub, "get", "kcl,secrets", "-n", namespace, "-o", "name").stdout.split() == []


def test_an_in_cluster_cluster_takes_no_scope() -> None:
    refused = kokumi(
        "cluster", "add", "here", "-n", "platform", "--in-cluster", "--scope-namespace", "a"
    )
    assert refused.code == 2
    assert one_error_line(refused) == (
        "kokumi: --scope-namespace is set on an InCluster Cluster: Kokumi registers nothing for "
        "the cluster it runs in; leave out --scope-namespace and --cluster-resources"
    )


# --- import --from argocd -----------------------------------------------------------------------


def argocd_secret(
    kubectl: Kubectl,
    hub: APIServer,
    argo: str,
    name: str,
    spoke: Registration,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> None:
    """An Argo CD cluster Secret as ``argocd cluster add`` writes one, with a bearer token."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": argo,
            "labels": {"argocd.argoproj.io/secret-type": "cluster", **(labels or {})},
            "annotations": {"managed-by": "argocd.argoproj.io", **(annotations or {})},
        },
        "stringData": {
            "name": name,
            "server": spoke.server,
            "config": json.dumps({"bearerToken": spoke.token}),
            **(extra or {}),
        },
    }
    kubectl(hub, "create", "-f", "-", input=json.dumps(body))


@pytest.fixture
def argo(hub: APIServer, namespace: str, kubectl: Kubectl) -> Any:
    name = f"{namespace}-argocd"
    kubectl(hub, "create", "namespace", name)
    yield name
    kubectl(hub, "delete", "namespace", name, "--wait=false", check=False)


def test_import_says_what_is_carried_and_keeps_the_old_secret_while_a_label_is_lost(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
    argo: str,
) -> None:
    argocd_secret(
        kubectl, hub, argo, "edge-1", spoke_kubeconfig,
        labels={"env": "prod", "example.com/tier": "gold", "team": "a"},
        annotations={"example.com/owner": "ops", "notes": "x"},
    )  # fmt: skip
    base = ("cluster", "import", "--from", "argocd", "-n", namespace, "--argocd-namespace", argo)
    source = f"{argo}/edge-1"
    head = (
        f"{source}: would be imported as Cluster {namespace}/edge-1: Secret edge-1-kubeconfig, "
        f"server {spoke_kubeconfig.server}"
    )

    # Nothing carried (the manager's default): every label is lost, the deletion is withheld.
    dry = kokumi(*base, "--dry-run", hub=hub.admin_kubeconfig)
    assert dry.code == 1, dry.err
    assert dry.out.splitlines() == [
        head,
        "  labels carried onto its Argo CD Secret: none",
        "  labels not carried: env, example.com/tier, team",
        "  annotations carried: none",
        "  annotations not carried: example.com/owner, notes (a template reading them gets "
        "nothing: add them to the manager's --carry-annotations and here)",
        "  keep it: do not delete the old Argo CD Secret yet: its labels env, example.com/tier, "
        "team would be lost, and an ApplicationSet selecting on them would stop matching the "
        "cluster and delete the Applications it made; add them to the manager's "
        "--carry-labels, then run this import again with --carry-labels "
        "env,example.com/tier,team",
        "(dry run: nothing was written)",
        f"Keep {source}: deleting it now would lose labels an ApplicationSet may select on "
        "(see above)",
    ]
    assert "kubectl delete secret" not in dry.out
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""

    # Some carried, one still lost: the report names the one, and the deletion stays withheld.
    partly = kokumi(*base, "--carry-labels", "env", "--carry-labels", "example.com/*",
                    "--carry-annotations", "example.com/*", hub=hub.admin_kubeconfig)  # fmt: skip
    assert partly.code == 1, partly.err
    lines = partly.out.splitlines()
    assert lines[1:5] == [
        "  labels carried onto its Argo CD Secret: env, example.com/tier",
        "  labels not carried: team",
        "  annotations carried: example.com/owner",
        "  annotations not carried: notes (a template reading them gets nothing: add them to "
        "the manager's --carry-annotations and here)",
    ]
    assert lines[5].endswith("run this import again with --carry-labels env,example.com/*,team")
    cluster = get_cluster(kubectl, hub, namespace, "edge-1")
    assert cluster["metadata"]["labels"] == {
        "env": "prod", "example.com/tier": "gold", "team": "a"
    }  # fmt: skip
    # The annotations the manager carries go onto the Cluster, whose Secret then has them.
    assert cluster["metadata"]["annotations"] == {"example.com/owner": "ops"}

    # Everything carried: the deletion is suggested, and the import exits 0.
    carry_all = (
        "--carry-labels",
        "env,example.com/*,team",
        "--carry-annotations",
        "example.com/*,notes",
    )
    whole = kokumi(*base, *carry_all, hub=hub.admin_kubeconfig)
    assert whole.code == 0, whole.err
    assert whole.out.splitlines()[1:] == [
        "  labels carried onto its Argo CD Secret: env, example.com/tier, team",
        "  annotations carried: example.com/owner, notes",
        "  next: delete the old Argo CD Secret so Kokumi can take the server over: "
        f"kubectl delete secret edge-1 -n {argo}",
    ]
    assert spoke_kubeconfig.token not in dry.out + partly.out + whole.out + whole.err


def test_import_keeps_argocds_namespaces_as_the_clusters_scope(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
    argo: str,
) -> None:
    scoped = {"namespaces": "team-a, team-a-jobs", "clusterResources": "true"}
    argocd_secret(kubectl, hub, argo, "team-a", spoke_kubeconfig, extra=scoped)
    argocd_secret(kubectl, hub, argo, "wide", spoke_kubeconfig, extra={"clusterResources": "true"})
    argocd_secret(kubectl, hub, argo, "bad", spoke_kubeconfig, extra={"namespaces": "Team_A"})
    base = ("cluster", "import", "--from", "argocd", "-n", namespace, "--argocd-namespace", argo)
    imported = kokumi(*base, hub=hub.admin_kubeconfig)
    assert imported.code == 0, imported.err
    lines = imported.out.splitlines()
    assert lines[0] == (
        f"{argo}/bad: not importable: its namespaces has 'Team_A', not a namespace name: use "
        "lower-case letters, digits and '-', at most 63"
    )
    at = lines.index(
        f"{argo}/team-a: imported as Cluster {namespace}/team-a: Secret team-a-kubeconfig, "
        f"server {spoke_kubeconfig.server}"
    )
    assert lines[at + 2] == (
        "  namespaces team-a,team-a-jobs and cluster-scoped resources: kept as the Cluster's "
        "spec.scope"
    )
    assert get_cluster(kubectl, hub, namespace, "team-a")["spec"]["scope"] == {
        "namespaces": ["team-a", "team-a-jobs"],
        "clusterResources": True,
    }
    # clusterResources without namespaces: Argo CD works cluster-wide, and so does the Cluster.
    assert "scope" not in get_cluster(kubectl, hub, namespace, "wide")["spec"]
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout.split() == [
        "cluster.delivery.kokumi.dev/team-a",
        "cluster.delivery.kokumi.dev/wide",
    ]


def test_a_carry_pattern_the_manager_would_refuse_is_refused_here_too() -> None:
    refused = kokumi(
        "cluster", "import", "--from", "argocd", "--carry-labels", "argocd.argoproj.io/*"
    )
    assert refused.code == 2
    assert one_error_line(refused) == (
        "kokumi: --carry-labels: 'argocd.argoproj.io/*' is Kokumi's or Argo CD's own: they say "
        "what the Secret is and who holds it, and are never carried"
    )
    elsewhere = kokumi("cluster", "import", "--from", "cluster-api", "--carry-labels", "env")
    assert elsewhere.code == 2
    assert "are for --from argocd" in one_error_line(elsewhere)
