"""`kokumi cluster add | list | describe | import` as a user runs them, on the real hub + spoke.

Every command runs as a process (``python -m kokumi``) with the hub as the current kubeconfig, so
the user's own RBAC and the admission policies apply, exactly as at a shell. The pure pieces (how
an Argo CD Secret is read, what ``describe`` says about a registration) get tests without a server.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from kokumi.cmd.cluster.describe import registration
from kokumi.cmd.cluster.import_ import argocd_connection, cluster_name_for
from kokumi.cmd.cluster.spoke import kubeconfig_of_context
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.config import ExecToken, flatten_context
from kokumi.kube.errors import ConfigError
from kokumi.kube.resources import SECRETS
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer, CertificateAuthority
from kokumi.testing.spoke import Registration
from kokumi.workspace.newcluster import written_here
from tests.support.cli import (
    Run,
    kokumi,
    one_error_line,
    stored_kubeconfig,
    user_with,
    whoami,
)
from tests.support.cli import account as spoke_account
from tests.support.deploy import wait_until
from tests.support.manager import manager, wait_for, wait_reason, workspace


async def kokumi_async(*args: str, hub: Path | None = None) -> Run:
    """The same from a Trio test, where the manager keeps running meanwhile."""
    return await trio.to_thread.run_sync(functools.partial(kokumi, *args, hub=hub))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def users_kubeconfig(tmp_path: Path, hub: APIServer, spoke: Registration) -> Path:
    """A user's kubeconfig: the hub as current context, the spoke beside it, read from files.

    The spoke's CA and token sit in files next to the kubeconfig, named relative to it, as
    kubeadm and cloud CLIs write them: ``add`` must read and inline them.
    """
    (tmp_path / "spoke-ca.crt").write_bytes(spoke.ca_pem)
    (tmp_path / "spoke-token").write_text(spoke.token + "\n")
    cert, key = hub.identity("kokumi-admin", ["system:masters"])
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "hub",
                "cluster": {"server": hub.url, "certificate-authority-data": b64(hub.ca_pem)},
            },
            {
                "name": "spoke",
                "cluster": {"server": spoke.server, "certificate-authority": "spoke-ca.crt"},
            },
        ],
        "users": [
            {
                "name": "admin",
                "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
            },
            {"name": "kokumi", "user": {"tokenFile": "spoke-token"}},
        ],
        "contexts": [
            {"name": "hub", "context": {"cluster": "hub", "user": "admin", "namespace": "default"}},
            {"name": "spoke", "context": {"cluster": "spoke", "user": "kokumi"}},
        ],
        "current-context": "hub",
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


# --- add ----------------------------------------------------------------------------------------


async def test_add_from_a_context_with_files_stores_it_inline_and_the_cluster_deploys(
    hub: APIServer,
    spoke: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    config = users_kubeconfig(tmp_path, hub, spoke_kubeconfig)
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await ws.environment(ns, "edge", {"fleet": "edge"})
        args = ("cluster", "add", "spoke", "-n", ns, "--context", "spoke", "--label", "fleet=edge")
        added = await kokumi_async(*args, "--description", "Spoke cluster", hub=config)
        assert added.code == 0, added.err
        assert added.out.splitlines()[:2] == [
            f"Cluster {ns}/spoke created",
            f"Secret {ns}/spoke-kubeconfig created: the kubeconfig of {spoke.url}, owned by the "
            "Cluster and deleted with it",
        ]

        # Only the one context, the CA and the token read from their files and inlined.
        stored = yaml.safe_load(stored_kubeconfig(kubectl, hub, ns, "spoke-kubeconfig"))
        assert stored["current-context"] == "spoke"
        assert stored["clusters"] == [
            {
                "name": "spoke",
                "cluster": {"server": spoke.url, "certificate-authority-data": b64(spoke.ca_pem)},
            }
        ]
        assert stored["users"] == [{"name": "kokumi", "user": {"token": spoke_kubeconfig.token}}]
        assert [c["name"] for c in stored["contexts"]] == ["spoke"]

        cluster = await ws.get_cluster(ns, "spoke")
        assert cluster["spec"] == {
            "connection": "Kubeconfig",
            "kubeconfig": {"secretRef": {"name": "spoke-kubeconfig", "key": "value"}},
            "description": "Spoke cluster",
        }
        secret = await ws.client.get(SECRETS, "spoke-kubeconfig", namespace=ns)
        assert secret["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "delivery.kokumi.dev/v1alpha1",
                "kind": "Cluster",
                "name": "spoke",
                "uid": cluster["metadata"]["uid"],
            }
        ]
        assert written_here(secret, "spoke")

        await wait_reason(ws, ns, "spoke", "Ready")
        await wait_for(ws.argocd_secrets, lambda found: len(found) == 1, "the registration")

        listed = await kokumi_async("cluster", "list", "-n", ns, hub=config)
        assert listed.code == 0, listed.err
        header, row = listed.out.splitlines()
        assert header.split() == [
            "NAME", "NAMESPACE", "CONNECTION", "SERVER", "VERSION", "READY", "REASON", "LABELS",
        ]  # fmt: skip
        assert row.split() == [
            "spoke", ns, "Kubeconfig", spoke.url, spoke.version, "True", "Ready", "fleet=edge",
        ]  # fmt: skip

        described = await kokumi_async(
            "cluster", "describe", "spoke", "-n", ns, "--argocd-namespace", ws.argocd, hub=config
        )
        assert described.code == 0, described.err
        fields = dict(
            line.split(":", 1) for line in described.out.splitlines() if not line.startswith(" ")
        )
        assert fields["Ready"].strip() == "True (Ready)"
        assert fields["Server"].strip() == spoke.url
        assert fields["Connection"].strip() == "Kubeconfig, Secret spoke-kubeconfig key value"
        shown = argocd.cluster_name(ClusterRef(ns, "spoke"), spoke.url)
        assert fields["Registration"].strip() == (
            f"Secret {ws.argocd}/{argocd.secret_name(spoke.url)} registers this Cluster with "
            f"Argo CD as {shown}"
        )
        environments = described.out.split("Environments:\n", 1)[1].splitlines()
        assert environments[1].split()[:3] == ["edge", "Deploy", "deploys"]

        again = await kokumi_async(*args, hub=config)
        assert again.code == 0, again.err
        assert again.out.splitlines()[0] == f"Cluster {ns}/spoke updated"
        assert f"Secret {ns}/spoke-kubeconfig updated" in again.out
        for run in (added, listed, described, again):
            assert spoke_kubeconfig.token not in run.out + run.err
        await ws.cleanup()


def test_a_secret_kokumi_did_not_write_is_refused_before_anything_is_created(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    kubectl(
        hub, "create", "secret", "generic", "spoke-kubeconfig", "-n", namespace,
        "--from-literal=value=somebody else's kubeconfig",
    )  # fmt: skip
    refused = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke_kubeconfig.path),
        hub=hub.admin_kubeconfig,
    )  # fmt: skip
    line = one_error_line(refused)
    assert f"Secret {namespace}/spoke-kubeconfig exists and kokumi did not write it" in line
    assert "nothing was created" in line
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""
    kept = stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig")
    assert kept == "somebody else's kubeconfig"


def test_deleting_the_cluster_deletes_its_secret(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    added = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke_kubeconfig.path),
        hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert added.code == 0, added.err
    kubectl(hub, "delete", "kcl", "spoke", "-n", namespace)

    def gone() -> bool | None:
        found = kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, check=False)
        return True if "NotFound" in found.stderr else None

    wait_until(gone, "the garbage collector deletes the Secret with its Cluster")


account = spoke_account  # the fixture: a ServiceAccount name of the test's own on the spoke


PLUGIN = """\
import json, os
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
status = {"token": os.environ["PLUGIN_TOKEN"]}
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


def exec_kubeconfig(tmp_path: Path, server: str, ca_pem: bytes, token: str) -> Path:
    """A context that signs in with a credential plugin, as cloud CLIs write them."""
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(f"#!{sys.executable}\n{PLUGIN}")
    plugin.chmod(0o700)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "env": [{"name": "PLUGIN_TOKEN", "value": token}],
            "interactiveMode": "Never",
        }
    }
    document = {
        "clusters": [
            {
                "name": "eks",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [{"name": "sso", "user": user}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "sso"}}],
        "current-context": "eks",
    }
    path = tmp_path / "eks.kubeconfig"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def test_create_service_account_registers_a_cluster_reached_with_a_plugin(
    hub: APIServer,
    spoke: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
    tmp_path: Path,
    account: str,
) -> None:
    plugin_context = (
        "--kubeconfig",
        str(exec_kubeconfig(tmp_path, spoke.url, spoke.ca_pem, spoke_kubeconfig.token)),
    )
    refused = kokumi(
        "cluster", "add", "spoke", "-n", namespace, *plugin_context, hub=hub.admin_kubeconfig
    )  # fmt: skip
    assert one_error_line(refused).endswith("add --create-service-account")
    added = kokumi(
        "cluster", "add", "spoke", "-n", namespace, *plugin_context,
        "--create-service-account", "--service-account", account, hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert added.code == 0, added.err
    warning = added.err.strip()
    assert warning.startswith(f"kokumi: warning: ServiceAccount kube-system/{account} gets")
    assert "cluster-admin" in warning and "--cluster-role" in warning
    binding = json.loads(kubectl(spoke, "get", "clusterrolebinding", account, "-o", "json").stdout)
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}
    ]
    token_secret = kubectl(spoke, "get", "secret", f"{account}-token", "-n", "kube-system",
                           "-o", "jsonpath={.type}").stdout  # fmt: skip
    assert token_secret == "kubernetes.io/service-account-token"
    text = stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig")
    stored = yaml.safe_load(text)
    assert stored["clusters"][0]["cluster"] == {
        "server": spoke.url,
        "certificate-authority-data": b64(spoke.ca_pem),
    }
    assert whoami(kubectl, text, tmp_path / "stored") == (
        f"system:serviceaccount:kube-system:{account}"
    )
    assert spoke_kubeconfig.token not in added.out + added.err

    # Another role for the same account: the binding is not silently changed.
    other = kokumi(
        "cluster", "add", "spoke", "-n", namespace, *plugin_context, "--create-service-account",
        "--service-account", account, "--cluster-role", "view", hub=hub.admin_kubeconfig,
    )  # fmt: skip
    line = one_error_line(other)
    assert "binds ClusterRole cluster-admin, not view: pass --cluster-role cluster-admin" in line


def test_a_lesser_role_gives_no_warning_and_server_overrides_the_address(
    hub: APIServer, spoke: APIServer, crds: object, namespace: str, kubectl: Kubectl, account: str
) -> None:
    address = spoke.url.replace("127.0.0.1", "localhost")
    added = kokumi(
        "cluster", "add", "viewer", "-n", namespace,
        "--kubeconfig", str(spoke.admin_kubeconfig), "--create-service-account",
        "--service-account", account, "--cluster-role", "view",
        "--server", address, hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert added.code == 0, added.err
    assert added.err == ""
    stored = yaml.safe_load(stored_kubeconfig(kubectl, hub, namespace, "viewer-kubeconfig"))
    assert stored["clusters"][0]["cluster"]["server"] == address


def test_add_from_server_ca_and_token_file_and_in_cluster_then_list(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration,
    tmp_path: Path,
) -> None:  # fmt: skip
    (tmp_path / "ca.crt").write_bytes(spoke_kubeconfig.ca_pem)
    (tmp_path / "token").write_text(spoke_kubeconfig.token)
    by_token = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--server", spoke_kubeconfig.server,
        "--certificate-authority", str(tmp_path / "ca.crt"),
        "--token-file", str(tmp_path / "token"),
        "--label", "fleet=edge", "--label", "region=eu", hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert by_token.code == 0, by_token.err
    assert whoami(kubectl, stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig"),
                  tmp_path / "stored") == "system:serviceaccount:kube-system:kokumi"  # fmt: skip
    in_cluster = kokumi(
        "cluster", "add", "in-cluster", "-n", namespace, "--in-cluster",
        "--label", "delivery.kokumi.dev/in-cluster=true", hub=hub.admin_kubeconfig,
    )  # fmt: skip
    assert in_cluster.code == 0, in_cluster.err
    assert in_cluster.out.splitlines()[0] == f"Cluster {namespace}/in-cluster created"
    assert "Secret" not in in_cluster.out

    listed = kokumi("cluster", "list", "-n", namespace, hub=hub.admin_kubeconfig)
    assert listed.code == 0, listed.err
    rows = [line.split() for line in listed.out.splitlines()]
    assert rows[1:] == [
        [
            "in-cluster", namespace, "InCluster", "-", "-", "Unknown", "-",
            "delivery.kokumi.dev/in-cluster=true",
        ],
        ["spoke", namespace, "Kubeconfig", "-", "-", "Unknown", "-", "fleet=edge,region=eu"],
    ]  # fmt: skip
    as_json = json.loads(kokumi("cluster", "list", "-n", namespace, "-o", "json",
                                hub=hub.admin_kubeconfig).out)  # fmt: skip
    assert [item["metadata"]["name"] for item in as_json["items"]] == ["in-cluster", "spoke"]
    assert all("managedFields" not in item["metadata"] for item in as_json["items"])
    as_yaml = yaml.safe_load(kokumi("cluster", "list", "-n", namespace, "-o", "yaml",
                                    hub=hub.admin_kubeconfig).out)  # fmt: skip
    assert as_yaml == as_json
    wide = kokumi("cluster", "list", "-n", namespace, "-o", "wide", hub=hub.admin_kubeconfig)
    assert wide.out.splitlines()[0].split()[-3:] == ["SECRET", "SCOPE", "MESSAGE"]
    assert "spoke-kubeconfig/value" in wide.out
    everywhere = kokumi("cluster", "list", "-A", hub=hub.admin_kubeconfig).out
    assert ["spoke", namespace] in [line.split()[:2] for line in everywhere.splitlines()]

    # Without a manager nothing has checked it yet, and describe says so.
    described = kokumi("cluster", "describe", "spoke", "-n", namespace, hub=hub.admin_kubeconfig)
    assert described.code == 0, described.err
    assert "Ready:        Unknown (not checked yet: is the manager running?)" in described.out
    assert (
        "Registration: none: the Cluster reports no server yet, so it cannot be registered"
        in described.out
    )
    missing = kokumi("cluster", "describe", "nothing", "-n", namespace, hub=hub.admin_kubeconfig)
    assert one_error_line(missing) == (
        f"kokumi: no Cluster nothing in namespace {namespace}: see kokumi cluster list "
        f"-n {namespace}"
    )


def test_add_by_a_user_who_may_not_read_secrets_is_refused_by_the_policy(
    hub: APIServer,
    admission_policies: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
) -> None:
    config = user_with(
        hub, kubectl, namespace, {"clusters.delivery.kokumi.dev": "create,get,list,update"}
    )
    refused = kokumi(
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(spoke_kubeconfig.path),
        hub=config,
    )  # fmt: skip
    line = one_error_line(refused)
    assert line.startswith(f"kokumi: cannot create Cluster {namespace}/spoke: Forbidden: ")
    assert "ValidatingAdmissionPolicy 'kokumi-cluster-secret-access'" in line
    assert f"you may not read Secret spoke-kubeconfig in namespace {namespace}" in line
    assert kubectl(hub, "get", "kcl,secrets", "-n", namespace, "-o", "name").stdout == ""


def test_a_secret_that_cannot_be_written_takes_the_new_cluster_back(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
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
    assert line.endswith(f"the Cluster {namespace}/spoke was deleted again")
    assert kubectl(hub, "get", "kcl,secrets", "-n", namespace, "-o", "name").stdout == ""


LOCAL_TOKEN = "kokumi-local-test-token"


def local_kubeconfig(tmp_path: Path, *, exec_plugin: bool = False) -> Path:
    """A kubeconfig of a cluster that need not exist: for what the CLI decides before any call."""
    user: dict[str, Any] = {"token": LOCAL_TOKEN}
    if exec_plugin:
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}
    ca = CertificateAuthority.create("local-test").pem
    document = {
        "clusters": [
            {
                "name": "spoke",
                "cluster": {
                    "server": "https://spoke.example:6443",
                    "certificate-authority-data": b64(ca),
                },
            }
        ],
        "users": [{"name": "kokumi", "user": user}],
        "contexts": [{"name": "spoke", "context": {"cluster": "spoke", "user": "kokumi"}}],
        "current-context": "spoke",
    }
    path = tmp_path / ("exec.kubeconfig" if exec_plugin else "spoke.kubeconfig")
    path.write_text(yaml.safe_dump(document))
    return path


def test_contexts_that_sign_in_with_a_program_are_refused_with_the_managers_reason(
    tmp_path: Path,
) -> None:
    path = local_kubeconfig(tmp_path, exec_plugin=True)
    refused = kokumi("cluster", "add", "spoke", "-n", "platform", "--kubeconfig", str(path))
    line = one_error_line(refused)
    assert line == (
        "kokumi: context 'spoke' cannot be stored: user \"kokumi\" uses an exec plugin "
        "(users[].user.exec), which Kokumi does not run: use a ServiceAccount token or a client "
        "certificate inline; or let kokumi create a ServiceAccount with a token on that cluster "
        "and store its kubeconfig instead: add --create-service-account"
    )
    missing = kokumi(
        "cluster", "add", "spoke", "-n", "platform", "--server", "https://spoke.example:6443",
        "--token-file", str(tmp_path / "nothing-here"),
    )  # fmt: skip
    assert "cannot read the token file" in one_error_line(missing)
    unnamed = kokumi("cluster", "add", "Spoke", "-n", "platform", "--in-cluster")
    assert "is not a DNS label" in one_error_line(unnamed)


def test_dry_run_prints_the_objects_but_never_the_kubeconfig(tmp_path: Path) -> None:
    path = local_kubeconfig(tmp_path)
    shown = kokumi(
        "cluster", "add", "spoke", "-n", "platform", "--kubeconfig", str(path),
        "--label", "fleet=edge", "--dry-run",
    )  # fmt: skip
    assert shown.code == 0, shown.err
    cluster, secret = list(yaml.safe_load_all(shown.out))
    assert cluster["metadata"] == {
        "name": "spoke",
        "namespace": "platform",
        "labels": {"fleet": "edge"},
    }
    assert secret["metadata"]["name"] == "spoke-kubeconfig"
    assert "data" not in secret
    assert "(context spoke, server https://spoke.example:6443), not shown" in shown.out
    assert LOCAL_TOKEN not in shown.out


# --- import -------------------------------------------------------------------------------------


def capi_cluster(hub: APIServer, kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    """A Cluster API cluster, as far as an import reads it: its name and uid."""
    body = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace}, "spec": {}}  # fmt: skip
    made = kubectl(hub, "create", "-o", "json", "-f", "-", input=json.dumps(body)).stdout
    found: dict[str, Any] = json.loads(made)
    return found


def capi_owner(cluster: dict[str, Any]) -> dict[str, Any]:
    """The controller ownerReference Cluster API puts on the Secrets of its cluster."""
    return {"apiVersion": cluster["apiVersion"], "kind": "Cluster",
            "name": cluster["metadata"]["name"], "uid": cluster["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def capi_secret(
    hub: APIServer,
    kubectl: Kubectl,
    namespace: str,
    name: str,
    cluster: str,
    value: str,
    owners: list[dict[str, Any]],
) -> None:
    """One of Cluster API's Secrets of ``cluster``: labelled with it, owned as ``owners`` say."""
    body = {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                         "ownerReferences": owners},
            "stringData": {"value": value}}  # fmt: skip
    kubectl(hub, "create", "-f", "-", input=json.dumps(body))


def test_import_from_cluster_api_references_its_secrets(
    hub: APIServer,
    crds: object,
    capi_crd: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
) -> None:
    owners = {
        c: [capi_owner(capi_cluster(hub, kubectl, namespace, c))] for c in ("workload", "broken")
    }

    def capi_secret_of(name: str, cluster: str, value: str) -> None:
        capi_secret(hub, kubectl, namespace, name, cluster, value, owners[cluster])

    capi_secret_of("workload-kubeconfig", "workload", spoke_kubeconfig.kubeconfig)
    capi_secret_of("workload-ca", "workload", "not a kubeconfig: Cluster API's CA")
    capi_secret_of("broken-kubeconfig", "broken", spoke_kubeconfig.variant(exec_plugin=True))
    command = ("cluster", "import", "--from", "cluster-api", "-n", namespace)

    dry = kokumi(*command, "--dry-run", hub=hub.admin_kubeconfig)
    assert dry.code == 0, dry.err
    assert (
        f"{namespace}/workload-kubeconfig: would be imported as Cluster {namespace}/workload"
        in dry.out
    )
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""

    imported = kokumi(*command, hub=hub.admin_kubeconfig)
    assert imported.code == 0, imported.err
    assert imported.out.splitlines() == [
        f'{namespace}/broken-kubeconfig: not importable: user "kokumi" uses an exec plugin '
        "(users[].user.exec), which Kokumi does not run: use a ServiceAccount token or a client "
        "certificate inline",
        f"{namespace}/workload-kubeconfig: imported as Cluster {namespace}/workload: it reads "
        "Secret workload-kubeconfig",
    ]
    spec = json.loads(kubectl(hub, "get", "kcl", "workload", "-n", namespace, "-o", "json").stdout)[
        "spec"
    ]
    assert spec["kubeconfig"]["secretRef"] == {"name": "workload-kubeconfig", "key": "value"}
    again = kokumi(*command, hub=hub.admin_kubeconfig)
    assert (
        f"{namespace}/workload-kubeconfig: exists: Cluster {namespace}/workload already reads it"
        in again.out
    )


def test_import_from_cluster_api_takes_only_the_secrets_their_cluster_controls(
    hub: APIServer,
    crds: object,
    capi_crd: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
) -> None:
    """The ClusterSource's rule, through the same code: a Secret named and labelled for a Cluster
    API cluster is anybody's who may create Secrets; only the one its cluster controls is taken."""
    value = spoke_kubeconfig.kubeconfig
    bare = capi_cluster(hub, kubectl, namespace, "bare")
    capi_cluster(hub, kubectl, namespace, "by-kind")
    holder = json.loads(
        kubectl(hub, "create", "configmap", "holder", "-n", namespace, "-o", "json").stdout
    )
    by_kind = {**capi_owner(holder), "apiVersion": "v1", "kind": "ConfigMap"}
    capi_secret(hub, kubectl, namespace, "bare-kubeconfig", "bare", value, [])
    capi_secret(hub, kubectl, namespace, "by-kind-kubeconfig", "by-kind", value, [by_kind])
    capi_secret(hub, kubectl, namespace, "nobody-kubeconfig", "nobody", value, [])
    command = ("cluster", "import", "--from", "cluster-api", "-n", namespace)

    refused = kokumi(*command, hub=hub.admin_kubeconfig)
    assert refused.code == 0, refused.err
    lines = refused.out.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        [f"{namespace}/{name}-kubeconfig", "not importable"]
        for name in ("bare", "by-kind", "nobody")
    ], lines
    assert lines[0].endswith(
        ": not importable: it has no controller ownerReference: a ClusterSource imports only the "
        "kubeconfig Secret Cluster API writes, whose controller is its cluster, since anybody who "
        "may create Secrets can name and label one; if this is cluster bare's, set that "
        "ownerReference (apiVersion cluster.x-k8s.io/v1beta1, kind Cluster, name bare, uid "
        f"{bare['metadata']['uid']}, controller true), else delete it"
    ), lines[0]
    assert 'its controller is "ConfigMap" "holder" of "v1"' in lines[1]
    assert "no Cluster API cluster nobody exists in this namespace" in lines[2]
    assert spoke_kubeconfig.token not in refused.out + refused.err
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""

    # The ownerReference Cluster API writes: the next import takes it.
    patch = json.dumps({"metadata": {"ownerReferences": [capi_owner(bare)]}})
    kubectl(hub, "patch", "secret", "bare-kubeconfig", "-n", namespace, "--type=merge",
            "-p", patch)  # fmt: skip
    imported = kokumi(*command, hub=hub.admin_kubeconfig)
    assert imported.code == 0, imported.err
    assert (
        f"{namespace}/bare-kubeconfig: imported as Cluster {namespace}/bare: it reads Secret "
        "bare-kubeconfig" in imported.out.splitlines()
    ), imported.out
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout.split() == [
        "cluster.delivery.kokumi.dev/bare"
    ]


def test_import_from_argocd_copies_token_clusters_and_lists_the_rest(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
    tmp_path: Path,
) -> None:
    argo = f"{namespace}-argocd"
    kubectl(hub, "create", "namespace", argo)
    try:

        def cluster_secret(
            name: str, config: dict[str, Any], *labels: str, namespaces: str = ""
        ) -> None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": argo,
                    "labels": {
                        "argocd.argoproj.io/secret-type": "cluster",
                        **dict(label.split("=") for label in labels),
                    },
                },
                "stringData": {
                    "name": name.removeprefix("cluster-"),
                    "server": spoke_kubeconfig.server
                    if name != "cluster-eks"
                    else "https://eks.example",
                    "config": json.dumps(config),
                    **({"namespaces": namespaces} if namespaces else {}),
                },
            }
            kubectl(hub, "apply", "-f", "-", input=json.dumps(body))

        cluster_secret(
            "cluster-spoke-prod",
            {"bearerToken": spoke_kubeconfig.token,
             "tlsClientConfig": {"caData": b64(spoke_kubeconfig.ca_pem)}},
            "env=prod",
        )  # fmt: skip
        cluster_secret(
            "cluster-eks",
            {"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["aws"],
                                    "apiVersion": "client.authentication.k8s.io/v1beta1"}},
        )  # fmt: skip
        cluster_secret("cluster-iam", {"awsAuthConfig": {"clusterName": "iam"}})
        cluster_secret(
            "kokumi-0123456789abcdef", {"bearerToken": "x"}, "app.kubernetes.io/managed-by=kokumi"
        )
        command = (
            "cluster",
            "import",
            "--from",
            "argocd",
            "-n",
            namespace,
            "--argocd-namespace",
            argo,
            "--carry-labels",
            "env",
        )

        dry = kokumi(*command, "--dry-run", hub=hub.admin_kubeconfig)
        assert dry.code == 0, dry.err
        assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""

        imported = kokumi(*command, hub=hub.admin_kubeconfig)
        assert imported.code == 0, imported.err
        assert imported.out.splitlines() == [
            f"{argo}/cluster-eks: not importable: it signs in with execProviderConfig (an exec "
            "credential plugin), which Kokumi does not run: use kokumi cluster add "
            "--create-service-account",
            f"{argo}/cluster-iam: not importable: it signs in with awsAuthConfig (AWS IAM), which "
            "runs a program Kokumi does not run: use kokumi cluster add --create-service-account",
            f"{argo}/cluster-spoke-prod: imported as Cluster {namespace}/spoke-prod: Secret "
            f"spoke-prod-kubeconfig, server {spoke_kubeconfig.server}",
            "  labels carried onto its Argo CD Secret: env",
            "  next: delete the old Argo CD Secret so Kokumi can take the server over: "
            f"kubectl delete secret cluster-spoke-prod -n {argo}",
        ]
        assert spoke_kubeconfig.token not in imported.out + imported.err + dry.out
        cluster = json.loads(
            kubectl(hub, "get", "kcl", "spoke-prod", "-n", namespace, "-o", "json").stdout
        )
        assert cluster["metadata"]["labels"] == {"env": "prod"}
        text = stored_kubeconfig(kubectl, hub, namespace, "spoke-prod-kubeconfig")
        assert whoami(kubectl, text, tmp_path / "imported") == (
            "system:serviceaccount:kube-system:kokumi"
        )

        # Again: the Cluster the last import made is updated; one somebody made otherwise is not
        # re-pointed at another credential.
        kubectl(hub, "-n", namespace, "create", "secret", "generic", "theirs",
                f"--from-literal=value={spoke_kubeconfig.kubeconfig}")  # fmt: skip
        kubectl(hub, "-n", namespace, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "delivery.kokumi.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "staging"},
            "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "theirs"}}},
        }))  # fmt: skip
        cluster_secret(
            "cluster-staging", {"bearerToken": spoke_kubeconfig.token}, namespaces="team-a,team-b"
        )
        again = kokumi(*command, hub=hub.admin_kubeconfig)
        assert again.code == 1
        assert again.out.splitlines()[2:] == [
            f"{argo}/cluster-spoke-prod: updated as Cluster {namespace}/spoke-prod: Secret "
            f"spoke-prod-kubeconfig, server {spoke_kubeconfig.server}",
            "  labels carried onto its Argo CD Secret: env",
            "  next: delete the old Argo CD Secret so Kokumi can take the server over: "
            f"kubectl delete secret cluster-spoke-prod -n {argo}",
            f"{argo}/cluster-staging: failed: Cluster {namespace}/staging exists and reads "
            "another Secret: rename or delete it to import this one",
        ]
        staging = kubectl(hub, "get", "kcl", "staging", "-n", namespace, "-o",
                          "jsonpath={.spec.kubeconfig.secretRef.name}").stdout  # fmt: skip
        assert staging == "theirs"
        kubectl(hub, "delete", "kcl", "staging", "-n", namespace)
        scoped = kokumi(*command, "--dry-run", hub=hub.admin_kubeconfig).out.splitlines()
        at = scoped.index(
            f"{argo}/cluster-staging: would be imported as Cluster {namespace}/staging: Secret "
            f"staging-kubeconfig, server {spoke_kubeconfig.server}"
        )
        assert scoped[at + 1 : at + 3] == [
            "  labels carried onto its Argo CD Secret: none",
            "  namespaces team-a,team-b: kept as the Cluster's spec.scope",
        ]
    finally:
        kubectl(hub, "delete", "namespace", argo, "--wait=false", check=False)


# --- help ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["", "add", "list", "describe", "label", "remove", "import"])
def test_every_command_shows_an_example(command: str) -> None:
    shown = kokumi("cluster", *([command] if command else []), "--help")
    assert shown.code == 0, shown.err
    examples = shown.out.split("examples:\n", 1)[1]
    assert f"kokumi cluster {command}".rstrip() in examples


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("add", "spoke"), "the following arguments are required: -n/--namespace"),
        ((), "the following arguments are required: COMMAND"),
        (("list", "-o", "table"), "argument -o/--output: invalid choice: 'table'"),
    ],
)
def test_usage_errors_are_one_line_too(args: tuple[str, ...], said: str) -> None:
    wrong = kokumi("cluster", *args)
    assert wrong.code == 2
    prog = " ".join(("kokumi", "cluster", *args[:1]))
    assert len(wrong.err.splitlines()) == 1, wrong.err
    assert wrong.err.startswith(f"{prog}: {said}")
    assert wrong.err.rstrip().endswith(f"(see {prog} --help)")


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--hub-kubeconfig", "/nonexistent/kubeconfig"),
        ("describe", "spoke", "-n", "platform", "--hub-kubeconfig", "/nonexistent/kubeconfig"),
        ("import", "--from", "argocd", "--hub-kubeconfig", "/nonexistent/kubeconfig"),
        ("add", "spoke", "-n", "platform", "--in-cluster", "--hub-kubeconfig", "/nonexistent/x"),
        ("add", "spoke", "-n", "platform", "--kubeconfig", "/nonexistent/kubeconfig"),
        ("add", "Spoke", "-n", "platform", "--in-cluster"),
        ("add", "spoke", "-n", "platform", "--in-cluster", "--label", "fleet"),
    ],
    ids=["list", "describe", "import", "add-hub", "add-spoke", "add-name", "add-label"],
)
def test_what_must_be_fixed_before_anything_ran_exits_2_as_the_manager_does(
    args: tuple[str, ...],
) -> None:
    """docs/cli.md, Exit status: 2 when nothing ran, 1 when a request failed (see import)."""
    refused = kokumi("cluster", *args)
    assert refused.code == 2, refused.err
    one_error_line(refused)


# --- pure pieces --------------------------------------------------------------------------------


def test_flatten_context_reads_files_relative_to_their_kubeconfig(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("flatten-test")
    cert, key = ca.issue("someone")
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(ca.pem)
    (tmp_path / "certs" / "me.crt").write_bytes(cert)
    (tmp_path / "certs" / "me.key").write_bytes(key)
    (tmp_path / "config").write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://c.example",
                                                       "certificate-authority": "certs/ca.crt"}}],
                "users": [{"name": "u", "user": {"client-certificate": "certs/me.crt",
                                                 "client-key": "certs/me.key"}},
                          {"name": "other", "user": {"token": "not-copied"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )  # fmt: skip
    name, document = flatten_context(tmp_path / "config")
    assert name == "x"
    assert document["clusters"] == [
        {
            "name": "c",
            "cluster": {"server": "https://c.example", "certificate-authority-data": b64(ca.pem)},
        }
    ]
    assert document["users"] == [
        {"name": "u", "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}
    ]
    source = kubeconfig_of_context(str(tmp_path / "config"), None)
    assert source.server == "https://c.example"
    assert source.kubeconfig is not None
    assert "not-copied" not in source.kubeconfig


def _argocd_secret(config: dict[str, Any], server: str = "https://c.example") -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
        "data": {"server": b64(server.encode()), "config": b64(json.dumps(config).encode())},
    }


def test_argocd_entries_kokumi_cannot_carry_over_say_why() -> None:
    why: dict[str, dict[str, object] | str] = {
        "basic": {"username": "admin", "password": "secret"},
        "aws": {"awsAuthConfig": {"clusterName": "x"}, "bearerToken": "t"},
        "exec": {"execProviderConfig": {"command": "x"}},
        "not json": "{",
    }
    found = {
        key: argocd_connection(
            _argocd_secret(value) if isinstance(value, dict) else
            {"data": {"server": b64(b"https://c.example"), "config": b64(value.encode())}}
        )
        for key, value in why.items()
    }  # fmt: skip
    assert "username and password" in str(found["basic"])
    assert "awsAuthConfig" in str(found["aws"])  # Argo CD prefers it over the token
    assert "execProviderConfig" in str(found["exec"])
    assert "cannot read its config" in str(found["not json"])
    in_cluster = argocd_connection(_argocd_secret({}, "https://kubernetes.default.svc"))
    assert "--in-cluster" in str(in_cluster)
    connection = argocd_connection(
        _argocd_secret({"bearerToken": "t", "tlsClientConfig": {"insecure": True}})
    )
    assert connection == Connection(
        server="https://c.example", token="t", insecure_skip_tls_verify=True
    )
    assert cluster_name_for("Prod EU/1") == "prod-eu-1"
    assert len(cluster_name_for("x" * 100)) == 63


def test_registration_says_who_holds_the_server() -> None:
    server = "https://spoke.example:6443"
    cluster = {
        "metadata": {"name": "spoke", "namespace": "platform"},
        "spec": {"connection": "Kubeconfig"},
        "status": {"server": server},
    }
    name = argocd.secret_name(server)

    def secret(labels: dict[str, str], secret_name: str = name) -> dict[str, Any]:
        return {
            "metadata": {"name": secret_name, "labels": labels},
            "data": {"server": b64(server.encode())},
        }

    ours = {"app.kubernetes.io/managed-by": "kokumi", "argocd.argoproj.io/secret-type": "cluster"}
    mine = secret(
        {**ours, argocd.LABEL_CLUSTER: "spoke", argocd.LABEL_CLUSTER_NAMESPACE: "platform"}
    )
    other = secret({**ours, argocd.LABEL_CLUSTER: "edge", argocd.LABEL_CLUSTER_NAMESPACE: "team"})
    foreign = secret({"argocd.argoproj.io/secret-type": "cluster"}, "cluster-spoke")
    said = {
        "mine": registration(cluster, [mine], "argocd"),
        "other": registration(cluster, [other], "argocd"),
        "foreign": registration(cluster, [foreign], "argocd"),
        "unreadable": registration(cluster, None, "argocd"),
        "none": registration(cluster, [], "argocd"),
    }
    assert said["mine"].startswith(f"Secret argocd/{name} registers this Cluster")
    assert said["other"].startswith(f"Cluster team/edge holds server {server}")
    assert said["foreign"] == (
        "Argo CD's Secret argocd/cluster-spoke, which Kokumi did not write, holds server "
        f"{server}: delete it so Kokumi can take the server over"
    )
    # Unread, the Cluster's own status says it: no reason yet, so not checked yet.
    assert said["unreadable"] == "not registered yet: Kokumi has not checked the Cluster yet"
    assert said["none"].startswith("none:")


async def test_an_exec_plugin_runs_once_until_its_token_expires(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin"
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(runs)!r}, 'a').write('x')\n"
        "if os.environ.get('FAIL'):\n"
        "    print('secret-looking output'); sys.exit(3)\n"
        "status = {'token': os.environ['PLUGIN_TOKEN'],"
        " 'expirationTimestamp': '2030-01-01T00:00:00Z'}\n"
        "print(json.dumps({'kind': 'ExecCredential', 'status': status}))\n"
    )
    plugin.chmod(0o700)
    now = [datetime.datetime(2029, 12, 31, tzinfo=datetime.UTC)]
    provider = ExecToken(str(plugin), env=(("PLUGIN_TOKEN", "abc"),), clock=lambda: now[0])
    assert await provider.token() == "abc"
    assert await provider.token() == "abc"
    assert runs.read_text() == "x"
    now[0] = datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)
    assert await provider.token() == "abc"
    assert runs.read_text() == "xx"

    failing = ExecToken(str(plugin), env=(("FAIL", "1"),))
    with pytest.raises(ConfigError) as failed:
        await failing.token()
    assert "failed (exit status 3)" in str(failed.value)
    assert "secret-looking" not in str(failed.value)


def test_no_command_writes_in_argocds_namespace(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Argo CD's namespace is written by the manager alone, under its admission policy. A user
    who may write there anyway (the hub's admin here) and names it as the workspace is refused
    in one line that says where Clusters go, and nothing is made there."""
    (tmp_path / "ca.crt").write_bytes(spoke_kubeconfig.ca_pem)
    (tmp_path / "token").write_text(spoke_kubeconfig.token)
    flags = ("--server", spoke_kubeconfig.server, "--certificate-authority",
             str(tmp_path / "ca.crt"), "--token-file", str(tmp_path / "token"))  # fmt: skip
    said = (
        f"namespace {namespace} is Argo CD's, where only Kokumi's manager writes (the cluster "
        "Secrets Argo CD reads): put Clusters and their kubeconfig Secrets in a workspace namespace"
    )
    # One of Argo CD's own cluster Secrets, which an import would copy as a Cluster here.
    argo_secret = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cluster-spoke", "namespace": namespace,
                     "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
        "stringData": {"name": "spoke", "server": spoke_kubeconfig.server,
                       "config": json.dumps({"bearerToken": spoke_kubeconfig.token,
                                             "tlsClientConfig": {"caData": base64.b64encode(
                                                 spoke_kubeconfig.ca_pem).decode()}})},
    }  # fmt: skip
    kubectl(hub, "apply", "-f", "-", input=json.dumps(argo_secret))
    for args in (
        ("cluster", "add", "spoke", "-n", namespace, "--argocd-namespace", namespace, *flags),
        ("cluster", "add", "here", "-n", namespace, "--argocd-namespace", namespace,
         "--in-cluster"),
        ("cluster", "import", "--from", "argocd", "-n", namespace, "--argocd-namespace",
         namespace),
    ):  # fmt: skip
        refused = kokumi(*args, hub=hub.admin_kubeconfig)
        assert refused.code != 0, (args, refused)
        # add says it as its one error line; import in the row of what it could not import.
        assert said in (one_error_line(refused) if refused.err else refused.out), (args, refused)
    for kind in ("clusters.delivery.kokumi.dev", "secrets"):
        left = kubectl(hub, "-n", namespace, "get", kind, "-o", "name").stdout.split()
        assert [name for name in left if name != "secret/cluster-spoke"] == [], kind
    # The same commands with the default Argo CD namespace write the workspace as ever.
    made = kokumi("cluster", "add", "spoke", "-n", namespace, *flags, hub=hub.admin_kubeconfig)
    assert made.code == 0, made.err


def labelled_secret(
    hub: APIServer, kubectl: Kubectl, namespace: str, name: str, labels: dict[str, str],
    key: str, value: str,
) -> None:  # fmt: skip
    body = {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "stringData": {key: value}}  # fmt: skip
    kubectl(hub, "create", "-f", "-", input=json.dumps(body))


def test_import_from_vcluster_and_from_labelled_secrets_by_the_sources_rules(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    vc = {"app": "vcluster"}
    # vcluster dev runs (its chart's Service dev); nothing runs as evil: vc-evil is planted.
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "dev", "namespace": namespace,
                            "labels": {**vc, "release": "dev"}},
               "spec": {"clusterIP": "None", "ports": [{"port": 443}]}}  # fmt: skip
    kubectl(hub, "create", "-f", "-", input=json.dumps(service))
    for name in ("dev", "evil"):
        labelled_secret(hub, kubectl, namespace, f"vc-{name}", {**vc, "vcluster-name": name},
                        "config", reg.kubeconfig)  # fmt: skip
    labelled_secret(hub, kubectl, namespace, "dev-certs", vc, "ca.crt", "not a kubeconfig")
    imported = kokumi("cluster", "import", "--from", "vcluster", "-n", namespace,
                      hub=hub.admin_kubeconfig)  # fmt: skip
    assert imported.code == 0, imported.err
    lines = imported.out.splitlines()
    assert lines[0] == (
        f"{namespace}/vc-dev: imported as Cluster {namespace}/dev: it reads Secret vc-dev"
        " key config"
    )
    assert lines[1].startswith(
        f"{namespace}/vc-evil: not importable: no vcluster evil runs in this namespace"
    ), lines
    assert len(lines) == 2, lines
    assert kubectl(hub, "get", "kcl", "evil", "-n", namespace, check=False).returncode != 0
    spec = json.loads(kubectl(hub, "get", "kcl", "dev", "-n", namespace, "-o", "json").stdout)
    assert spec["spec"]["kubeconfig"] == {"secretRef": {"name": "vc-dev", "key": "config"}}

    # One Secret, a context per cluster: one Cluster per context; a refused one is listed.
    doc = yaml.safe_load(reg.kubeconfig)
    (context,) = doc["contexts"]
    doc["contexts"] = [{"name": n, "context": dict(context["context"])} for n in ("e-1", "e-2")]
    doc["users"].append({"name": "plugin", "user": {"exec": {"command": "x"}}})
    doc["contexts"][1]["context"]["user"] = "plugin"
    mark = {"kokumi.dev/kubeconfig": "true"}
    labelled_secret(hub, kubectl, namespace, "fleet", mark, "kubeconfig", yaml.safe_dump(doc))
    command = ("cluster", "import", "--from", "secrets", "-l", "kokumi.dev/kubeconfig=true",
               "--key", "kubeconfig", "--contexts", "All", "-n", namespace)  # fmt: skip
    dry = kokumi(*command, "--dry-run", hub=hub.admin_kubeconfig)
    assert dry.code == 0, dry.err
    assert f"{namespace}/fleet: would be imported as Cluster {namespace}/e-1" in dry.out
    imported = kokumi(*command, hub=hub.admin_kubeconfig)
    assert imported.code == 0, imported.err
    lines = imported.out.splitlines()
    assert lines[0] == (
        f"{namespace}/fleet: imported as Cluster {namespace}/e-1: it reads Secret fleet key "
        "kubeconfig context e-1"
    )
    assert lines[1].startswith(f"{namespace}/fleet: not importable: ") and "exec" in lines[1]
    spec = json.loads(kubectl(hub, "get", "kcl", "e-1", "-n", namespace, "-o", "json").stdout)
    assert spec["spec"]["kubeconfig"]["context"] == "e-1"
    again = kokumi(*command, hub=hub.admin_kubeconfig)
    assert f"exists: Cluster {namespace}/e-1 already reads it" in again.out

    # Flags that no source would take are refused with the fix, before anything is read.
    bad = kokumi("cluster", "import", "--from", "secrets", "-n", namespace,
                 hub=hub.admin_kubeconfig)  # fmt: skip
    assert bad.code == 2 and "--selector is required with from: Secrets" in bad.out, bad.out
