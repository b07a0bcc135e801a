"""Uninstall: Clusters whose manager is gone can still be deleted.

With the manager gone, a Cluster that carries Kokumi's finalizer waits forever once deleted. Here
no manager runs at all: the finalizer is put on as the manager would, the Cluster is deleted and
stays Terminating, and then ``kokumi uninstall --release-finalizers`` (and, in another test, the
kubectl line deploy/README.md documents) lets it go, leaving other finalizers alone.
"""

from __future__ import annotations

import json
import re
import shlex
import time
import uuid

import pytest

from kokumi.cmd import root as cli
from kokumi.core import api
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, run, wait_until

FINALIZER = "delivery.kokumi.dev/argocd-registration"
OTHER = "example.com/keep-me"


def held_cluster(hub: APIServer, namespace: str, name: str, finalizers: list[str]) -> None:
    """A deleted Cluster that waits for its finalizers, as one the manager held does."""
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {"connection": "InCluster"},
    }
    run(hub.admin_kubeconfig, "-n", namespace, "create", "-f", "-", input=json.dumps(body))
    run(hub.admin_kubeconfig, "-n", namespace, "delete", "kcl", name, "--wait=false")
    time.sleep(0.5)  # a finalizer holds it: nothing deletes it, however long one waits
    got = json.loads(
        run(hub.admin_kubeconfig, "-n", namespace, "get", "kcl", name, "-o", "json").stdout
    )
    assert got["metadata"]["deletionTimestamp"]


def gone(hub: APIServer, namespace: str, name: str) -> bool | None:
    got = run(hub.admin_kubeconfig, "-n", namespace, "get", "kcl", name, check=False)
    return True if "NotFound" in got.stderr else None


def finalizers(hub: APIServer, namespace: str, name: str) -> list[str]:
    got = run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "get",
        "kcl",
        name,
        "-o",
        "jsonpath={.metadata.finalizers}",
    ).stdout
    return list(json.loads(got or "[]"))


def test_release_finalizers_lets_clusters_go_and_keeps_other_finalizers(
    hub: APIServer, crds: object, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    held_cluster(hub, namespace, "alone", [FINALIZER])
    held_cluster(hub, namespace, "shared", [OTHER, FINALIZER])
    code = cli.main(
        [
            "uninstall",
            "--release-finalizers",
            "--kubeconfig",
            str(hub.admin_kubeconfig),
            "--argocd-namespace",
            f"argocd-{uuid.uuid4().hex[:6]}",  # none there: nothing left to list
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"released Cluster {namespace}/alone" in out
    assert f"released Cluster {namespace}/shared" in out
    wait_until(lambda: gone(hub, namespace, "alone"), "the released Cluster is deleted")
    assert finalizers(hub, namespace, "shared") == [OTHER]  # someone else's, still waited for
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "patch",
        "kcl",
        "shared",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    wait_until(lambda: gone(hub, namespace, "shared"), "the other Cluster is deleted")


def test_release_finalizers_names_the_registrations_left(
    hub: APIServer, crds: object, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The registrations Kokumi wrote stay (Argo CD deploys there); the output says how to go."""
    labels = "app.kubernetes.io/managed-by=kokumi,argocd.argoproj.io/secret-type=cluster"
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "create",
        "secret",
        "generic",
        "kokumi-0123456789abcdef",
    )
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "label",
        "secret",
        "kokumi-0123456789abcdef",
        *labels.split(","),
    )
    code = cli.main(
        [
            "uninstall",
            "--release-finalizers",
            "--kubeconfig",
            str(hub.admin_kubeconfig),
            "--argocd-namespace",
            namespace,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"1 registration(s) Kokumi wrote remain in {namespace} (kokumi-0123456789abcdef)" in out
    command = out.rsplit("To remove them: ", 1)[1].strip()
    assert command == f"kubectl -n {namespace} delete secret -l {labels}"
    run(hub.admin_kubeconfig, *shlex.split(command)[1:])
    left = run(
        hub.admin_kubeconfig, "-n", namespace, "get", "secret", "-l", labels, "-o", "name"
    ).stdout
    assert left.strip() == ""


def test_uninstall_without_the_flag_does_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["uninstall"]) == 2
    assert "--release-finalizers" in capsys.readouterr().err


def test_the_documented_kubectl_line_releases_one_cluster(
    hub: APIServer, crds: object, namespace: str
) -> None:
    readme = (DEPLOY / "README.md").read_text()
    match = re.search(
        r"kubectl -n platform patch clusters\.delivery\.kokumi\.dev spoke .*?\n(.*?)\n", readme
    )
    assert match is not None, "the README's kubectl line"
    line = (match.group(0).replace("\\\n", " ")).strip()
    args = shlex.split(line)
    assert args[:7] == [
        "kubectl",
        "-n",
        "platform",
        "patch",
        "clusters.delivery.kokumi.dev",
        "spoke",
        "--type=json",
    ]
    held_cluster(hub, namespace, "spoke", [FINALIZER])
    run(hub.admin_kubeconfig, "-n", namespace, *args[3:])
    wait_until(lambda: gone(hub, namespace, "spoke"), "the Cluster is deleted")
    # The test guard: at index 0 another finalizer is not removed by mistake.
    held_cluster(hub, namespace, "other", [OTHER, FINALIZER])
    refused = run(
        hub.admin_kubeconfig, "-n", namespace, *args[3:5], "other", *args[6:], check=False
    )
    assert refused.returncode != 0 and "The request is invalid" in refused.stderr
    assert finalizers(hub, namespace, "other") == [OTHER, FINALIZER]
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "patch",
        "kcl",
        "other",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
