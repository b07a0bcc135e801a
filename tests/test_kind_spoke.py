"""`kokumi cluster add --secret-only`: the Secret alone, and the Cluster printed to apply.

It is what the spec's local try (``make kind-spoke``) rests on; the commands run as processes
against the real hub, as at a shell.
"""

from __future__ import annotations

import json

import pytest
import yaml

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.test_cli_cluster import kokumi, one_error_line, stored_kubeconfig

# --- kokumi cluster add --secret-only -----------------------------------------------------------


def spoke_args(registration: Registration, namespace: str) -> tuple[str, ...]:
    return (
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(registration.path),
        "--label", "fleet=edge", "--label", "topology.kubernetes.io/region=eu",
        "--description", "Spoke cluster",
    )  # fmt: skip


def test_secret_only_writes_the_secret_and_a_later_add_takes_it_over(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
) -> None:
    args = spoke_args(spoke_kubeconfig, namespace)
    first = kokumi(*args, "--secret-only", hub=hub.admin_kubeconfig)
    assert first.code == 0, first.err
    assert first.err == ""
    assert first.out.splitlines()[0] == (
        f"# Secret {namespace}/spoke-kubeconfig created: context spoke, server "
        f"{spoke_kubeconfig.server}"
    )
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""
    stored = yaml.safe_load(stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig"))
    assert stored["users"] == [
        {"name": spoke_kubeconfig.service_account, "user": {"token": spoke_kubeconfig.token}}
    ]
    secret = json.loads(
        kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, "-o", "json").stdout
    )
    assert "ownerReferences" not in secret["metadata"]
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kokumi-cli",
        "delivery.kokumi.dev/cluster": "spoke",
    }

    # What it printed is what the user applies; the Cluster then reads the Secret.
    kubectl(hub, "apply", "-f", "-", input=first.out)
    cluster = json.loads(kubectl(hub, "get", "kcl", "spoke", "-n", namespace, "-o", "json").stdout)
    assert cluster["spec"]["kubeconfig"]["secretRef"]["name"] == "spoke-kubeconfig"

    # A later add takes the Secret over: it now belongs to the Cluster...
    adopted = kokumi(*args, hub=hub.admin_kubeconfig)
    assert adopted.code == 0, adopted.err
    assert adopted.out.splitlines()[:2] == [
        f"Cluster {namespace}/spoke updated",
        f"Secret {namespace}/spoke-kubeconfig updated: the kubeconfig of "
        f"{spoke_kubeconfig.server}, owned by the Cluster and deleted with it",
    ]

    # ...and --secret-only again keeps that owner and the labels others added.
    kubectl(hub, "label", "secret", "spoke-kubeconfig", "-n", namespace, "team=edge")
    again = kokumi(*args, "--secret-only", hub=hub.admin_kubeconfig)
    assert again.code == 0, again.err
    assert again.out.startswith(f"# Secret {namespace}/spoke-kubeconfig updated: ")
    secret = json.loads(
        kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, "-o", "json").stdout
    )
    assert [owner["uid"] for owner in secret["metadata"]["ownerReferences"]] == [
        cluster["metadata"]["uid"]
    ]
    assert secret["metadata"]["labels"]["team"] == "edge"
    for run in (first, adopted, again):
        assert spoke_kubeconfig.token not in run.out + run.err


def test_secret_only_refuses_a_secret_kokumi_did_not_write(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    kubectl(
        hub, "create", "secret", "generic", "spoke-kubeconfig", "-n", namespace,
        "--from-literal=value=somebody else's kubeconfig",
    )  # fmt: skip
    refused = kokumi(
        *spoke_args(spoke_kubeconfig, namespace), "--secret-only", hub=hub.admin_kubeconfig
    )
    assert refused.code == 1
    assert one_error_line(refused) == (
        f"kokumi: Secret {namespace}/spoke-kubeconfig exists and kokumi did not write it (it "
        "lacks the labels app.kubernetes.io/managed-by=kokumi-cli and "
        "delivery.kokumi.dev/cluster=spoke), so nothing was written: choose another Cluster "
        "name, or delete that Secret if nothing uses it"
    )
    assert refused.out == ""
    kept = stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig")
    assert kept == "somebody else's kubeconfig"


def test_secret_only_by_a_user_who_may_not_write_secrets_says_so_in_one_line(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    nobody = hub.kubeconfig_for("kokumi-nobody")
    refused = kokumi(*spoke_args(spoke_kubeconfig, namespace), "--secret-only", hub=nobody)
    assert refused.code == 1
    line = one_error_line(refused)
    assert line.startswith(f"kokumi: cannot create Secret {namespace}/spoke-kubeconfig: Forbidden:")
    assert 'User "kokumi-nobody" cannot create resource "secrets"' in line
    assert refused.out == ""
    found = kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, check=False)
    assert "NotFound" in found.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--in-cluster", "--secret-only"),
            "kokumi: --secret-only writes the kubeconfig Secret, and an --in-cluster Cluster has "
            "none: leave --secret-only out",
        ),
        (
            ("--context", "spoke", "--create-service-account", "--server", "", "--secret-only"),
            "kokumi: --server is empty: give the API server's URL as the hub reaches it, such as "
            "https://spoke.example:6443",
        ),
    ],
    ids=["in-cluster", "empty-server"],
)
def test_secret_only_refusals_before_anything_ran_exit_2(args: tuple[str, ...], said: str) -> None:
    refused = kokumi("cluster", "add", "spoke", "-n", "platform", *args)
    assert refused.code == 2, refused.err
    assert one_error_line(refused) == said
