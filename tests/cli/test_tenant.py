"""``kokumi cluster add`` reaches no further than its user: on the real hub and spoke.

A failed add leaves an existing Cluster as it was; the CLI acts as the kubeconfig's user before a
pod's ServiceAccount, as kubectl does, and says which; a token Secret is used only when it is the
ServiceAccount's own; ``--server`` overrides a context's server.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest
import yaml

from kokumi.cmd import root as cli
from kokumi.cmd.cluster import command
from kokumi.kube.config import Config
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.cli import (
    account as spoke_account,
)
from tests.support.cli import (
    kokumi,
    one_error_line,
    stored_kubeconfig,
    user_with,
)


def _cluster(kubectl: Kubectl, hub: APIServer, namespace: str, name: str) -> dict[str, object]:
    got = kubectl(hub, "get", "kcl", name, "-n", namespace, "-o", "json").stdout
    cluster: dict[str, object] = json.loads(got)
    return cluster


def test_a_failed_add_leaves_an_existing_cluster_as_it_was(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    """The Secret is written first: refused, the Cluster is not re-pointed at a missing one."""
    kubectl(hub, "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "delivery.kokumi.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "spoke"},
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "theirs"}}},
    }))  # fmt: skip
    before = _cluster(kubectl, hub, namespace, "spoke")
    config = user_with(
        hub,
        kubectl,
        namespace,
        {"clusters.delivery.kokumi.dev": "create,get,list,update,delete", "secrets": "get"},
    )
    refused = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke_kubeconfig.path),
        hub=config,
    )  # fmt: skip
    line = one_error_line(refused)
    assert line.startswith(f"kokumi: cannot create Secret {namespace}/spoke-kubeconfig: Forbidden")
    assert line.endswith(f"nothing was changed: the Cluster {namespace}/spoke is as it was")
    after = _cluster(kubectl, hub, namespace, "spoke")
    assert after["spec"] == before["spec"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # type: ignore[index]


@pytest.fixture
def pod(
    hub: APIServer,
    namespace: str,
    kubectl: Kubectl,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """The CLI as if run in a pod: the Service's address, a ServiceAccount token mounted (of an
    account that may do nothing), and no ~/.kube/config."""
    kubectl(hub, "create", "serviceaccount", "nobody", "-n", namespace)
    token = kubectl(hub, "create", "token", "nobody", "-n", namespace).stdout.strip()
    root = tmp_path / "serviceaccount"
    root.mkdir()
    (root / "token").write_text(token)
    (root / "ca.crt").write_bytes(hub.ca_pem)
    (root / "namespace").write_text(namespace)
    address = urllib.parse.urlsplit(hub.url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(address.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(address.port))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr(command, "SERVICE_ACCOUNT_ROOT", str(root), raising=False)
    load = Config.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(Config, "load", classmethod(lambda cls, root=root: load(cls, root=root)))
    return root


def test_in_a_pod_with_kubeconfig_set_the_cli_acts_as_the_kubeconfigs_user(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    pod: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(hub.admin_kubeconfig))
    assert cli.main(["cluster", "add", "inside", "-n", namespace, "--in-cluster"]) == 0
    said = capsys.readouterr()
    assert said.err.splitlines()[0] == (
        f"kokumi: acting on the hub {hub.url} as the user of kubeconfig {hub.admin_kubeconfig}"
    )
    assert f"Cluster {namespace}/inside created" in said.out
    # Without a kubeconfig, the pod's ServiceAccount it is, and it says so first.
    monkeypatch.delenv("KUBECONFIG")
    assert cli.main(["cluster", "add", "other", "-n", namespace, "--in-cluster"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        f"kokumi: acting on the hub {hub.url} as this pod's ServiceAccount (namespace {namespace})"
    )
    assert "Forbidden" in lines[1]


account = spoke_account  # the fixture: a ServiceAccount name of the test's own on the spoke


def test_a_token_secret_of_another_account_is_not_used(
    hub: APIServer, spoke: APIServer, crds: object, namespace: str, kubectl: Kubectl, account: str
) -> None:
    """A kube-system/<account>-token Secret written for another account holds that account's
    token: stored as this one's, it would lend the other's powers."""
    kubectl(spoke, "apply", "-n", "kube-system", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": f"{account}-token",
            "annotations": {"kubernetes.io/service-account.name": "default"},
        },
        "type": "kubernetes.io/service-account-token",
    }))  # fmt: skip
    refused = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke.admin_kubeconfig),
        "--create-service-account", "--service-account", account, "--cluster-role", "view",
        hub=hub.admin_kubeconfig,
    )  # fmt: skip
    line = one_error_line(refused)
    assert line == (
        f"kokumi: Secret kube-system/{account}-token is not the token of ServiceAccount "
        f"kube-system/{account} (its annotation kubernetes.io/service-account.name names another "
        "ServiceAccount), so its token was not used: delete the Secret and run again, or choose "
        "another --service-account"
    )
    assert kubectl(hub, "get", "kcl,secrets", "-n", namespace, "-o", "name").stdout == ""
    kubectl(spoke, "delete", "secret", f"{account}-token", "-n", "kube-system")
    kubectl(spoke, "apply", "-n", "kube-system", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{account}-token"},
        "type": "Opaque", "data": {"token": "bm90LWEtdG9rZW4="},
    }))  # fmt: skip
    refused = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke.admin_kubeconfig),
        "--create-service-account", "--service-account", account, "--cluster-role", "view",
        hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert "(it is not of type kubernetes.io/service-account-token)" in one_error_line(refused)


def test_server_with_context_overrides_the_contexts_server(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    address = spoke_kubeconfig.server.replace("127.0.0.1", "localhost")
    added = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke_kubeconfig.path),
        "--server", address, hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert added.code == 0, added.err
    stored = yaml.safe_load(stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig"))
    assert stored["clusters"][0]["cluster"]["server"] == address
    assert stored["users"][0]["user"]["token"] == spoke_kubeconfig.token
    assert f"the kubeconfig of {address}" in added.out
