"""The test control plane itself: real apiservers, RBAC on, two clusters that are really two."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer, ControlPlane

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.kokumi.dev
spec:
  group: test.kokumi.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
"""


def admin_client(server: APIServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, verify=server.ssl_context("admin", ["system:masters"]))


def test_crd_installed_with_kubectl_is_served(
    hub: APIServer, namespace: str, kubectl: Kubectl
) -> None:
    kubectl(hub, "apply", "-f", "-", input=CRD)
    kubectl(hub, "wait", "--for=condition=Established", "crd/widgets.test.kokumi.dev")
    with admin_client(hub) as client:
        path = f"/apis/test.kokumi.dev/v1/namespaces/{namespace}/widgets"
        body = {"apiVersion": "test.kokumi.dev/v1", "kind": "Widget", "metadata": {"name": "w"}}
        body["spec"] = {"size": 3}
        # A freshly Established CRD can take a moment to be routed by every handler.
        deadline = time.monotonic() + 30
        while True:
            created = client.post(path, json=body)
            if created.status_code != 404 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert created.status_code == 201, created.text
        read = client.get(f"{path}/w").json()
    assert read["spec"] == {"size": 3}
    assert read["metadata"]["uid"] == created.json()["metadata"]["uid"]


def test_hub_and_spoke_are_two_apiservers(control_plane: ControlPlane, kubectl: Kubectl) -> None:
    hub, spoke = control_plane.hub, control_plane.spoke
    assert hub.url != spoke.url
    for server in (hub, spoke):
        with admin_client(server) as client:
            version = client.get("/version").json()
        assert version["gitVersion"] == server.version
        assert version["gitVersion"].startswith("v1.")
    # Each has its own CA: the spoke's CA does not vouch for the hub's serving certificate.
    with (
        httpx.Client(verify=ssl.create_default_context(cadata=spoke.ca_pem.decode())) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.get(f"{hub.url}/version")
    # And their own storage: a namespace made on the hub does not exist on the spoke.
    kubectl(hub, "create", "namespace", "only-on-hub", check=False)
    assert kubectl(spoke, "get", "namespace", "only-on-hub", check=False).returncode != 0
    assert kubectl(hub, "get", "namespace", "only-on-hub").returncode == 0


def test_minted_identity_is_subject_to_rbac(
    hub: APIServer, namespace: str, kubectl: Kubectl
) -> None:
    user = f"alice-{namespace}"
    context = hub.ssl_context(user, ["kokumi:testers"])
    with httpx.Client(base_url=hub.url, verify=context) as client:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        denied = client.get(path)
        assert denied.status_code == 403, denied.text
        assert user in denied.json()["message"]
        kubectl(
            hub,
            "-n",
            namespace,
            "create",
            "role",
            "read-cm",
            "--verb=get,list",
            "--resource=configmaps",
        )
        kubectl(
            hub,
            "-n",
            namespace,
            "create",
            "rolebinding",
            "read-cm",
            "--role=read-cm",
            f"--user={user}",
        )
        deadline = time.monotonic() + 10
        allowed = client.get(path)
        while allowed.status_code == 403 and time.monotonic() < deadline:
            time.sleep(0.1)  # the RBAC authorizer's informer catches up within moments
            allowed = client.get(path)
        assert allowed.status_code == 200, allowed.text
        # Only what the role grants: writing is still refused.
        write = client.post(path, json={"metadata": {"name": "x"}})
        assert write.status_code == 403


def test_kubeconfig_for_identity_works_with_kubectl(
    hub: APIServer, namespace: str, kubectl: Kubectl
) -> None:
    kubeconfig = hub.kubeconfig_for(f"bob-{namespace}")
    result = kubectl(kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert result.stdout == f"bob-{namespace}"
