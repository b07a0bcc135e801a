"""The admission policies and the registrar role, enforced by the real API server.

kokumi-cluster-secret-access: a Cluster may only name a Secret its author may read. The author is
a minted client-certificate identity with RBAC on Clusters and get on one Secret by name, or none.

kokumi-cluster-source-access: a ClusterSource's author must be allowed to list and get Secrets
in its namespace, since the source lends every Cluster API kubeconfig there to its Environments.

kokumi-argocd-secret-integrity: in argocd, the manager (the real ServiceAccount kokumi:kokumi with
a token from the TokenRequest API) may only write Secrets that carry Kokumi's two labels, before and
after. Its role kokumi-argocd-cluster-registrar grants create, update and delete of every Secret
there; the policy is what keeps it to Kokumi's own.
"""

from __future__ import annotations

import functools
import json
import ssl
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.carry import Extras
from kokumi.core.registry.ownership import ClusterRef
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import (
    DEPLOY,
    POLICIES,
    apply,
    ensure_namespace,
    install_admission_policies,
    kubectl_as,
    run,
    wait_secret_integrity_enforced,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("admission_policies")

MANAGER = "system:serviceaccount:kokumi:kokumi"
LABELS = {"app.kubernetes.io/managed-by": "kokumi", "argocd.argoproj.io/secret-type": "cluster"}

Kubectl = Callable[..., Any]


# kokumi-cluster-secret-access


def kubeconfig_cluster(name: str, secret: str, key: str | None = None) -> str:
    secret_ref = {"name": secret} if key is None else {"name": secret, "key": key}
    return json.dumps(
        {
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": secret_ref}},
        }
    )


@pytest.fixture
def author(hub: APIServer, namespace: str) -> Kubectl:
    """kubectl as a user who may create and change Clusters in ``namespace``, and read no Secret."""
    user = f"author-{uuid.uuid4().hex[:8]}"
    admin = hub.admin_kubeconfig
    run(
        admin,
        "-n",
        namespace,
        "create",
        "role",
        "cluster-author",
        "--verb=get,list,create,update,patch",
        "--resource=clusters.delivery.kokumi.dev",
    )
    run(
        admin,
        "-n",
        namespace,
        "create",
        "rolebinding",
        "cluster-author",
        "--role=cluster-author",
        f"--user={user}",
    )
    as_author = kubectl_as(hub.kubeconfig_for(user))
    wait_until(lambda: may(as_author, namespace, "create", "clusters.delivery.kokumi.dev"), "RBAC")
    return as_author


def may(kubectl: Kubectl, namespace: str, verb: str, resource: str) -> bool | None:
    """True once ``kubectl auth can-i`` says yes: RBAC takes a moment to reach the authorizer."""
    answer = kubectl("-n", namespace, "auth", "can-i", verb, resource, check=False)
    return True if answer.stdout.strip() == "yes" else None


def may_not(kubectl: Kubectl, namespace: str, verb: str, resource: str) -> bool | None:
    answer = kubectl("-n", namespace, "auth", "can-i", verb, resource, check=False)
    return True if answer.stdout.strip() == "no" else None


def grant_secret(hub: APIServer, author: Kubectl, namespace: str, secret: str) -> None:
    """Give the author get on one Secret, by name, and wait until RBAC says so."""
    user_line = author("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    admin = hub.admin_kubeconfig
    run(
        admin,
        "-n",
        namespace,
        "create",
        "role",
        f"read-{secret}",
        "--verb=get",
        "--resource=secrets",
        f"--resource-name={secret}",
    )
    run(
        admin,
        "-n",
        namespace,
        "create",
        "rolebinding",
        f"read-{secret}",
        f"--role=read-{secret}",
        f"--user={user_line}",
    )
    wait_until(lambda: may(author, namespace, "get", f"secret/{secret}"), f"get on {secret}")


def revoke_secret(hub: APIServer, author: Kubectl, namespace: str, secret: str) -> None:
    run(hub.admin_kubeconfig, "-n", namespace, "delete", "rolebinding", f"read-{secret}")
    wait_until(lambda: may_not(author, namespace, "get", f"secret/{secret}"), f"no get on {secret}")


def patch(author: Kubectl, namespace: str, name: str, body: object) -> Any:
    return author(
        "-n", namespace, "patch", f"kcl/{name}", "--type=merge", "-p", json.dumps(body), check=False
    )


def denied_reading(result: Any, secret: str, namespace: str) -> bool:
    return (
        result.returncode != 0
        and "ValidatingAdmissionPolicy 'kokumi-cluster-secret-access'" in result.stderr
        and f"you may not read Secret {secret} in namespace {namespace}" in result.stderr
        and "a Cluster lends its credential to every Order of its Environments" in result.stderr
        and "ask for get on that Secret or name one you may read" in result.stderr
    )


def test_cluster_naming_a_secret_its_author_may_not_read_is_refused(
    hub: APIServer, namespace: str, author: Kubectl
) -> None:
    created = author(
        "-n",
        namespace,
        "create",
        "-f",
        "-",
        input=kubeconfig_cluster("spoke", "spoke-kubeconfig"),
        check=False,
    )
    assert created.returncode != 0
    assert denied_reading(created, "spoke-kubeconfig", namespace), created.stderr
    gone = run(hub.admin_kubeconfig, "-n", namespace, "get", "kcl", "spoke", check=False)
    assert "NotFound" in gone.stderr


def test_get_on_that_secret_by_name_is_enough_and_only_for_it(
    hub: APIServer, namespace: str, author: Kubectl
) -> None:
    grant_secret(hub, author, namespace, "spoke-kubeconfig")
    author(
        "-n", namespace, "create", "-f", "-", input=kubeconfig_cluster("spoke", "spoke-kubeconfig")
    )
    other = author(
        "-n",
        namespace,
        "create",
        "-f",
        "-",
        input=kubeconfig_cluster("edge", "edge-kubeconfig"),
        check=False,
    )
    assert denied_reading(other, "edge-kubeconfig", namespace), other.stderr


def test_in_cluster_clusters_need_no_secret_access(namespace: str, author: Kubectl) -> None:
    cluster = {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "in-cluster"},
        "spec": {"connection": "InCluster"},
    }
    created = author("-n", namespace, "create", "-f", "-", input=json.dumps(cluster))
    assert "created" in created.stdout


# kokumi-cluster-source-access


def cluster_source(name: str, labels: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": "ClusterSource",
            "metadata": {"name": name},
            "spec": {"from": "ClusterAPI", "labels": labels or {}},
        }
    )


@pytest.fixture
def source_author(hub: APIServer, namespace: str) -> Kubectl:
    """kubectl as a user who may create and change ClusterSources in ``namespace``, no Secret."""
    user = f"source-author-{uuid.uuid4().hex[:8]}"
    admin = hub.admin_kubeconfig
    resource = "clustersources.delivery.kokumi.dev"
    run(admin, "-n", namespace, "create", "role", "source-author",
        "--verb=get,list,create,update,patch", f"--resource={resource}")  # fmt: skip
    run(admin, "-n", namespace, "create", "rolebinding", "source-author", "--role=source-author",
        f"--user={user}")  # fmt: skip
    as_author = kubectl_as(hub.kubeconfig_for(user))
    wait_until(lambda: may(as_author, namespace, "create", resource), "RBAC")
    return as_author


def grant_secrets(hub: APIServer, author: Kubectl, namespace: str, verbs: str) -> None:
    user = author("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    admin = hub.admin_kubeconfig
    run(admin, "-n", namespace, "create", "role", "secrets", f"--verb={verbs}",
        "--resource=secrets")  # fmt: skip
    run(admin, "-n", namespace, "create", "rolebinding", "secrets", "--role=secrets",
        f"--user={user}")  # fmt: skip
    for verb in verbs.split(","):
        wait_until(functools.partial(may, author, namespace, verb, "secrets"), f"{verb} on Secrets")


def source_refused(result: Any, namespace: str) -> bool:
    return (
        result.returncode != 0
        and "ValidatingAdmissionPolicy 'kokumi-cluster-source-access'" in result.stderr
        and f"you may not list and get Secrets in namespace {namespace}: a ClusterSource lends"
        in result.stderr
        and "ask for list and get on Secrets there" in result.stderr
        and result.stderr.count("\n") <= 1
    )


def test_a_source_by_a_user_who_may_not_read_secrets_is_refused(
    hub: APIServer, namespace: str, source_author: Kubectl
) -> None:
    created = source_author("-n", namespace, "create", "-f", "-", input=cluster_source("capi"),
                            check=False)  # fmt: skip
    assert source_refused(created, namespace), created.stderr
    gone = run(hub.admin_kubeconfig, "-n", namespace, "get", "kcs", "capi", check=False)
    assert "NotFound" in gone.stderr


def test_get_on_secrets_is_not_enough_list_and_get_are(
    hub: APIServer, namespace: str, source_author: Kubectl
) -> None:
    grant_secrets(hub, source_author, namespace, "get")
    created = source_author("-n", namespace, "create", "-f", "-", input=cluster_source("capi"),
                            check=False)  # fmt: skip
    assert source_refused(created, namespace), created.stderr
    run(hub.admin_kubeconfig, "-n", namespace, "delete", "role,rolebinding", "secrets")
    grant_secrets(hub, source_author, namespace, "get,list")
    source_author("-n", namespace, "create", "-f", "-", input=cluster_source("capi"))


def test_a_source_may_be_relabelled_without_secrets_but_not_respecified(
    hub: APIServer, namespace: str, source_author: Kubectl
) -> None:
    run(hub.admin_kubeconfig, "-n", namespace, "create", "-f", "-", input=cluster_source("capi"))
    source_author("-n", namespace, "label", "kcs/capi", "team=a")
    body = json.dumps({"spec": {"labels": {"fleet": "edge"}}})
    changed = source_author("-n", namespace, "patch", "kcs/capi", "--type=merge", "-p", body,
                            check=False)  # fmt: skip
    assert source_refused(changed, namespace), changed.stderr


def test_updates_that_keep_secret_and_key_need_no_access_and_changes_do(
    hub: APIServer, namespace: str, author: Kubectl
) -> None:
    grant_secret(hub, author, namespace, "spoke-kubeconfig")
    author(
        "-n", namespace, "create", "-f", "-", input=kubeconfig_cluster("spoke", "spoke-kubeconfig")
    )
    revoke_secret(hub, author, namespace, "spoke-kubeconfig")

    # Keeping the Secret and its key: labels, description, or the default key written out.
    labeled = author("-n", namespace, "label", "kcl/spoke", "fleet=edge", check=False)
    assert labeled.returncode == 0, labeled.stderr
    described = patch(author, namespace, "spoke", {"spec": {"description": "Spoke cluster"}})
    assert described.returncode == 0, described.stderr
    default_key = {"spec": {"kubeconfig": {"secretRef": {"key": "value"}}}}
    assert patch(author, namespace, "spoke", default_key).returncode == 0

    # Another key could hold another credential; another Secret certainly does.
    other_key = {"spec": {"kubeconfig": {"secretRef": {"key": "admin.kubeconfig"}}}}
    result = patch(author, namespace, "spoke", other_key)
    assert denied_reading(result, "spoke-kubeconfig", namespace), result.stderr
    assert "another key or context could hold another credential" in result.stderr
    other_secret = {"spec": {"kubeconfig": {"secretRef": {"name": "admin-kubeconfig"}}}}
    result = patch(author, namespace, "spoke", other_secret)
    assert denied_reading(result, "admin-kubeconfig", namespace), result.stderr

    secret_ref = run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "get",
        "kcl/spoke",
        "-o",
        "jsonpath={.spec.kubeconfig.secretRef}",
    ).stdout
    assert json.loads(secret_ref) == {"name": "spoke-kubeconfig", "key": "value"}


def test_turning_an_in_cluster_cluster_into_a_kubeconfig_one_needs_access(
    namespace: str, author: Kubectl
) -> None:
    cluster = {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "c"},
        "spec": {"connection": "InCluster"},
    }
    author("-n", namespace, "create", "-f", "-", input=json.dumps(cluster))
    body = {"spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "s"}}}}
    result = patch(author, namespace, "c", body)
    assert denied_reading(result, "s", namespace), result.stderr


# kokumi-argocd-secret-integrity and kokumi-argocd-cluster-registrar


def tls(hub: APIServer) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=hub.ca_pem.decode())


@pytest.fixture
def admin(hub: APIServer) -> Iterator[httpx.Client]:
    context = hub.ssl_context("kokumi-admin", ["system:masters"])
    with httpx.Client(base_url=hub.url, verify=context, timeout=30) as client:
        yield client


@pytest.fixture
def manager(hub: APIServer, admin: httpx.Client) -> Iterator[httpx.Client]:
    """The API as the manager's ServiceAccount, with a token from the TokenRequest API."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    response = admin.post("/api/v1/namespaces/kokumi/serviceaccounts/kokumi/token", json=request)
    assert response.status_code == 201, response.text
    token = response.json()["status"]["token"]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=hub.url, verify=tls(hub), headers=headers, timeout=30) as client:
        review = client.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review.json()["status"]["userInfo"]["username"] == MANAGER
        yield client


SECRETS = "/api/v1/namespaces/argocd/secrets"


def secret(name: str, labels: dict[str, str], server: str = "https://spoke.example:6443") -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "stringData": {"name": name, "server": server},
    }


def refused_by_integrity(response: httpx.Response) -> str:
    assert response.status_code == 403, response.text
    message: str = response.json()["message"]
    assert "ValidatingAdmissionPolicy 'kokumi-argocd-secret-integrity'" in message
    assert "app.kubernetes.io/managed-by: kokumi" in message
    assert "argocd.argoproj.io/secret-type: cluster" in message
    return message


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_manager_creates_updates_and_deletes_labeled_secrets(
    manager: httpx.Client, admin: httpx.Client
) -> None:
    name = unique("kokumi")
    created = manager.post(SECRETS, json=secret(name, LABELS))
    assert created.status_code == 201, created.text

    updated_body = secret(
        name, {**LABELS, "delivery.kokumi.dev/cluster": "spoke"}, "https://b:6443"
    )
    updated_body["metadata"]["resourceVersion"] = created.json()["metadata"]["resourceVersion"]
    updated = manager.put(f"{SECRETS}/{name}", json=updated_body)
    assert updated.status_code == 200, updated.text

    deleted = manager.delete(f"{SECRETS}/{name}")
    assert deleted.status_code == 200, deleted.text
    assert admin.get(f"{SECRETS}/{name}").status_code == 404


def test_manager_may_not_create_secrets_without_both_labels(manager: httpx.Client) -> None:
    for labels in (
        {},
        {"app.kubernetes.io/managed-by": "kokumi"},
        {"argocd.argoproj.io/secret-type": "cluster"},
    ):
        name = unique("unlabeled")
        message = refused_by_integrity(manager.post(SECRETS, json=secret(name, labels)))
        assert f"Secret {name} would not carry both labels" in message
    wrong_value = {**LABELS, "app.kubernetes.io/managed-by": "argocd"}
    refused_by_integrity(manager.post(SECRETS, json=secret(unique("wrong"), wrong_value)))


def test_manager_may_not_drop_a_label_of_its_secret(
    manager: httpx.Client, admin: httpx.Client
) -> None:
    name = unique("kokumi")
    created = manager.post(SECRETS, json=secret(name, LABELS))
    assert created.status_code == 201, created.text
    for dropped in LABELS:
        body = secret(name, {k: v for k, v in LABELS.items() if k != dropped})
        refused_by_integrity(manager.put(f"{SECRETS}/{name}", json=body))
    assert admin.get(f"{SECRETS}/{name}").json()["metadata"]["labels"] == LABELS
    assert manager.delete(f"{SECRETS}/{name}").status_code == 200


def test_manager_leaves_foreign_secrets_alone(manager: httpx.Client, admin: httpx.Client) -> None:
    """A Secret Kokumi did not write: the manager may neither take it over nor delete it."""
    name = unique("foreign")
    argo = {"argocd.argoproj.io/secret-type": "cluster"}
    created = admin.post(SECRETS, json=secret(name, argo))
    assert created.status_code == 201, created.text

    message = refused_by_integrity(manager.put(f"{SECRETS}/{name}", json=secret(name, LABELS)))
    assert f"Secret {name} does not carry both labels" in message
    refused_by_integrity(manager.delete(f"{SECRETS}/{name}"))
    assert admin.get(f"{SECRETS}/{name}").json()["metadata"]["labels"] == argo
    assert admin.delete(f"{SECRETS}/{name}").status_code == 200


def test_the_policy_binds_only_the_manager_and_only_argocd(
    hub: APIServer, admin: httpx.Client, namespace: str
) -> None:
    """Other identities in argocd, and Secrets elsewhere, are none of this policy's business."""
    name = unique("foreign")
    created = admin.post(SECRETS, json=secret(name, {}))
    assert created.status_code == 201, created.text
    assert admin.delete(f"{SECRETS}/{name}").status_code == 200
    binding = json.loads(
        run(
            hub.admin_kubeconfig,
            "get",
            "validatingadmissionpolicybinding",
            "kokumi-argocd-secret-integrity",
            "-o",
            "json",
        ).stdout
    )
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "argocd"}
    }
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_registrar_role_is_create_update_delete_of_secrets_only(hub: APIServer) -> None:
    role = json.loads(
        run(
            hub.admin_kubeconfig,
            "get",
            "clusterrole",
            "kokumi-argocd-cluster-registrar",
            "-o",
            "json",
        ).stdout
    )
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update", "delete"]}
    ]
    binding = json.loads(
        run(
            hub.admin_kubeconfig,
            "-n",
            "argocd",
            "get",
            "rolebinding",
            "kokumi-argocd-cluster-registrar",
            "-o",
            "json",
        ).stdout
    )
    assert binding["roleRef"]["name"] == "kokumi-argocd-cluster-registrar"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kokumi", "namespace": "kokumi"}
    ]


def test_registrar_role_alone_reads_no_secret(hub: APIServer, tmp_path: Path) -> None:
    """RBAC: who holds only the registrar role in argocd writes Secrets there, never reads one."""
    user = unique("registrar-only")
    run(
        hub.admin_kubeconfig,
        "-n",
        "argocd",
        "create",
        "rolebinding",
        user,
        "--clusterrole=kokumi-argocd-cluster-registrar",
        f"--user={user}",
    )
    try:
        registrar = kubectl_as(hub.kubeconfig_for(user, path=tmp_path / "registrar.kubeconfig"))
        wait_until(lambda: may(registrar, "argocd", "create", "secrets"), "the binding applies")
        for verb in ("update", "delete"):
            assert may(registrar, "argocd", verb, "secrets")
        for verb in ("get", "list", "watch", "patch", "deletecollection"):
            assert may_not(registrar, "argocd", verb, "secrets"), verb
        assert may_not(registrar, "kokumi", "create", "secrets")
        got = registrar("-n", "argocd", "get", "secrets", check=False)
        assert "Forbidden" in got.stderr and "cannot list resource" in got.stderr
    finally:
        run(hub.admin_kubeconfig, "-n", "argocd", "delete", "rolebinding", user, check=False)


# What the manager writes into its Secrets, pinned by kokumi-argocd-secret-integrity


def kokumi_secret(name: str, **changes: Any) -> dict[str, Any]:
    """A Secret shaped as Kokumi writes one; ``changes`` override stringData keys or the type."""
    body: dict[str, Any] = secret(name, LABELS)
    config = changes.pop("config", '{"bearerToken":"t","tlsClientConfig":{"insecure":false}}')
    body["stringData"]["config"] = config
    if "type" in changes:
        body["type"] = changes.pop("type")
    body["stringData"].update(changes)
    return body


def refused_saying(response: httpx.Response, *phrases: str) -> None:
    assert response.status_code == 403, response.text
    message = response.json()["message"]
    assert "ValidatingAdmissionPolicy 'kokumi-argocd-secret-integrity'" in message
    for phrase in phrases:
        assert phrase in message, message


def test_a_kokumi_shaped_secret_is_accepted(manager: httpx.Client) -> None:
    name = unique("kokumi")
    created = manager.post(SECRETS, json=kokumi_secret(name))
    assert created.status_code == 201, created.text
    assert manager.delete(f"{SECRETS}/{name}").status_code == 200


def test_a_secret_with_what_a_registration_carries_is_accepted_and_updated(
    manager: httpx.Client,
) -> None:
    """Carried labels and annotations, Environment labels and Argo CD's namespaces and
    clusterResources: the policy pins none of them, before or after an update in place."""
    server = f"https://{unique('carried')}.example:6443"
    holder = ClusterRef("ws1", "spoke")
    carried = Extras(
        labels=(("fleet", "edge"),),
        annotations=(("example.com/owner", "team-a"),),
        environments=("edge",),
        namespaces=("apps",),
        cluster_resources=True,
    )
    body = argocd.cluster_secret(Connection(server, token="t"), holder, "argocd", carried)
    name = body["metadata"]["name"]
    created = manager.post(SECRETS, json=body)
    assert created.status_code == 201, created.text
    changed = argocd.updated(
        created.json(),
        argocd.cluster_secret(Connection(server, token="t"), holder, "argocd", Extras()),
    )
    replaced = manager.put(f"{SECRETS}/{name}", json=changed)
    assert replaced.status_code == 200, replaced.text
    assert "fleet" not in replaced.json()["metadata"]["labels"]
    assert manager.delete(f"{SECRETS}/{name}").status_code == 200


def test_manager_may_only_write_opaque_secrets(manager: httpx.Client) -> None:
    name = unique("kokumi")
    body = kokumi_secret(name, type="kubernetes.io/basic-auth")
    body["stringData"].update({"username": "u", "password": "p"})
    refused_saying(
        manager.post(SECRETS, json=body),
        "Kokumi writes cluster Secrets of type Opaque only",
        "would be of type kubernetes.io/basic-auth",
    )


def test_manager_may_only_write_secrets_named_kokumi_something(manager: httpx.Client) -> None:
    name = unique("argocd-cluster")
    refused_saying(
        manager.post(SECRETS, json=kokumi_secret(name)),
        f"Secret {name} in argocd does not start with kokumi-",
    )


@pytest.mark.parametrize(
    "config",
    [
        '{"execProviderConfig":{"command":"argocd-k8s-auth","apiVersion":"v1beta1"}}',
        '{"awsAuthConfig":{"clusterName":"prod","roleARN":"arn:aws:iam::1:role/x"}}',
        '{"ExecProviderConfig":{"command":"sh"}}',  # Go's decoder folds the case
        '{"\\u0065xecProviderConfig":{"command":"sh"}}',  # and decodes escapes in keys
        '{"aw\u017fAuthConfig":{"clusterName":"prod"}}',  # long s folds to s in Go
    ],
)
def test_manager_may_not_lend_argocd_its_own_powers(manager: httpx.Client, config: str) -> None:
    refused_saying(
        manager.post(SECRETS, json=kokumi_secret(unique("kokumi"), config=config)),
        "has a config with execProviderConfig or awsAuthConfig",
    )


@pytest.mark.parametrize(
    "server",
    [
        "https://kubernetes.default.svc",
        "https://kubernetes.default.svc/",
        "https://Kubernetes.Default.svc:443",
        "https://kubernetes.default.svc.cluster.local",
        "https://kubernetes.default",
        "HTTP://KUBERNETES.DEFAULT.SVC",
    ],
)
def test_manager_may_not_register_argocd_own_cluster(manager: httpx.Client, server: str) -> None:
    name = unique("kokumi")
    refused_saying(
        manager.post(SECRETS, json=kokumi_secret(name, server=server)),
        f"Kokumi never registers a server on kubernetes.default (Secret {name}): it is Argo CD's"
        " own cluster",
    )


def test_another_server_on_kubernetes_is_not_argocd_own(manager: httpx.Client) -> None:
    name = unique("kokumi")
    body = kokumi_secret(name, server="https://kubernetes.example:6443")
    created = manager.post(SECRETS, json=body)
    assert created.status_code == 201, created.text
    assert manager.delete(f"{SECRETS}/{name}").status_code == 200


INTEGRITY = "kokumi-argocd-secret-integrity"
INTEGRITY_FILE = DEPLOY / "policies" / f"{INTEGRITY}.yaml"


def test_a_non_default_installation_names_its_manager_in_the_policy(
    hub: APIServer, admin: httpx.Client, namespace: str
) -> None:
    """Another ServiceAccount as the manager: the policy's variable names it, and it follows."""
    sa = "kokumi-alt"
    admin_kc = hub.admin_kubeconfig
    run(admin_kc, "-n", namespace, "create", "serviceaccount", sa)
    binding = unique("alt-registrar")
    run(
        admin_kc,
        "-n",
        "argocd",
        "create",
        "rolebinding",
        binding,
        "--clusterrole=kokumi-argocd-cluster-registrar",
        f"--serviceaccount={namespace}:{sa}",
    )
    token = run(admin_kc, "-n", namespace, "create", "token", sa, "--duration=10m").stdout.strip()
    headers = {"Authorization": f"Bearer {token}"}
    policy = json.loads(
        run(admin_kc, "get", "validatingadmissionpolicy", INTEGRITY, "-o", "json").stdout
    )
    variable = policy["spec"]["variables"][0]
    assert variable == {
        "name": "manager",
        "expression": f"request.userInfo.username == '{MANAGER}'",
    }, "the manager is named where deploy/README.md says an installation edits it"
    try:
        with httpx.Client(base_url=hub.url, verify=tls(hub), headers=headers, timeout=30) as alt:
            before = alt.post(SECRETS, json=secret(unique("unlabeled"), {}))
            assert before.status_code == 201, "not the manager yet: RBAC alone decides"
            alt.delete(f"{SECRETS}/{before.json()['metadata']['name']}")
            manager_name = f"system:serviceaccount:{namespace}:{sa}"
            edit = [
                {
                    "op": "replace",
                    "path": "/spec/variables/0/expression",
                    "value": f"request.userInfo.username == '{manager_name}'",
                }
            ]
            run(
                admin_kc, "patch", "validatingadmissionpolicy", INTEGRITY, "--type=json",
                "-p", json.dumps(edit),
            )  # fmt: skip

            def refused() -> bool | None:
                name = unique("unlabeled")
                answer = alt.post(SECRETS, json=secret(name, {}))
                if answer.status_code == 201:
                    alt.delete(f"{SECRETS}/{name}")
                    return None
                refused_by_integrity(answer)
                return True

            wait_until(refused, "the policy applies to the ServiceAccount its variable names")
    finally:
        apply(hub, INTEGRITY_FILE)
        wait_secret_integrity_enforced(hub)
        run(admin_kc, "-n", "argocd", "delete", "rolebinding", binding, check=False)


def test_the_integrity_policy_holds_again_after_an_uninstall_and_a_reinstall(
    hub: APIServer, manager: httpx.Client
) -> None:
    """Every policy deleted and applied again on one API server, as ``helm uninstall`` and
    ``helm install`` do: the manager writes its Secrets again, and only those.

    With the manager named by a ConfigMap parameter (deleted with the rest), the API server
    stopped reading ConfigMaps for the policy once no binding named that kind
    (kubernetes#130887), and every write was refused with "no params found" until the API
    server restarted.
    """
    admin_kc = hub.admin_kubeconfig
    for path in sorted(POLICIES.glob("*.yaml")):
        run(admin_kc, "delete", "-f", str(path), "--wait=true")
    try:

        def unenforced() -> bool | None:
            name = unique("unlabeled")
            answer = manager.post(SECRETS, json=secret(name, {}))
            if answer.status_code != 201:
                return None
            manager.delete(f"{SECRETS}/{name}")
            return True

        wait_until(unenforced, "the API server has dropped the deleted policies")
    finally:
        install_admission_policies(hub)

    def accepted() -> bool | None:
        name = unique("kokumi")
        answer = manager.post(SECRETS, json=kokumi_secret(name))
        if answer.status_code != 201:
            return None
        assert manager.delete(f"{SECRETS}/{name}").status_code == 200
        return True

    wait_until(accepted, "the manager may write its own Secrets again")
    refused_by_integrity(manager.post(SECRETS, json=secret(unique("unlabeled"), {})))


# kokumi-secret-role-bindings: where kokumi-cluster-credentials may never be bound


def binding_refused(result: Any, *phrases: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "ValidatingAdmissionPolicy 'kokumi-secret-role-bindings'" in result.stderr, result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr


def test_cluster_credentials_may_not_be_bound_cluster_wide(hub: APIServer) -> None:
    """Not even by the cluster's own admin (system:masters), the identity that could."""
    name = unique("credentials-everywhere")
    created = run(
        hub.admin_kubeconfig,
        "create",
        "clusterrolebinding",
        name,
        "--clusterrole=kokumi-cluster-credentials",
        "--serviceaccount=kokumi:kokumi-admin",
        check=False,
    )
    try:
        binding_refused(
            created,
            f"never bind kokumi-cluster-credentials with a ClusterRoleBinding ({name})",
            "bind it with a RoleBinding in each namespace that holds Kubeconfig Clusters",
        )
    finally:
        run(hub.admin_kubeconfig, "delete", "clusterrolebinding", name, check=False)


@pytest.mark.parametrize("where", ["kokumi", "kokumi-signing"])
@pytest.mark.parametrize("role", ["kokumi-cluster-credentials", "kokumi-manager-secrets"])
def test_secret_roles_may_not_be_bound_where_the_signing_key_lives(
    hub: APIServer, where: str, role: str
) -> None:
    ensure_namespace(hub, where)
    created = run(
        hub.admin_kubeconfig,
        "-n",
        where,
        "create",
        "rolebinding",
        unique("here"),
        f"--clusterrole={role}",
        "--serviceaccount=kokumi:kokumi-admin",
        check=False,
    )
    binding_refused(
        created,
        f"never bind {role} in {where}: it would grant reading the session signing key",
    )


def test_secret_roles_may_be_bound_in_workspaces_and_manager_secrets_cluster_wide(
    hub: APIServer, namespace: str
) -> None:
    """What the README asks for, and the explicit opt-in, pass the same policy."""
    admin_kc = hub.admin_kubeconfig
    for role in ("kokumi-cluster-credentials", "kokumi-manager-secrets"):
        created = run(
            admin_kc,
            "-n",
            namespace,
            "create",
            "rolebinding",
            role,
            f"--clusterrole={role}",
            "--serviceaccount=kokumi:kokumi-admin",
        )
        assert "created" in created.stdout
    opt_in = run(
        admin_kc,
        "create",
        "clusterrolebinding",
        unique("opt-in"),
        "--clusterrole=kokumi-manager-secrets",
        "--serviceaccount=kokumi:kokumi",
        "--dry-run=server",
    )
    assert "created (server dry run)" in opt_in.stdout


SECRETS_SOURCE = """
apiVersion: delivery.kokumi.dev/v1alpha1
kind: ClusterSource
metadata: {name: team}
spec:
  from: Secrets
  secretSelector: {matchLabels: {kokumi.dev/kubeconfig: "true"}}
  key: kubeconfig
"""

VCLUSTER_SOURCE = """
apiVersion: delivery.kokumi.dev/v1alpha1
kind: ClusterSource
metadata: {name: vclusters}
spec: {from: VCluster}
"""


def test_sources_of_labelled_and_vcluster_secrets_need_list_and_get_too(
    hub: APIServer, namespace: str, source_author: Kubectl
) -> None:
    for body in (SECRETS_SOURCE, VCLUSTER_SOURCE):
        created = source_author("-n", namespace, "create", "-f", "-", input=body, check=False)
        assert source_refused(created, namespace), created.stderr
    grant_secrets(hub, source_author, namespace, "get,list")
    for body in (SECRETS_SOURCE, VCLUSTER_SOURCE):
        source_author("-n", namespace, "create", "-f", "-", input=body)


HEAD = "apiVersion: delivery.kokumi.dev/v1alpha1\nkind: ClusterSource\nmetadata: {name: s}\n"


def test_the_schema_refuses_a_secrets_source_without_a_selector_and_mixed_fields(
    hub: APIServer, namespace: str
) -> None:
    cases = {
        "{from: Secrets}": "from Secrets needs spec.secretSelector",
        "{from: VCluster, selector: {}}": "spec.selector is over Cluster API clusters' labels",
        "{from: ClusterAPI, key: kubeconfig}": "are for from Secrets or VCluster",
        "{from: VCluster, key: kubeconfig}": "are vcluster's own with from VCluster",
        "{from: Secrets, secretSelector: {matchLabels: {a: b}}, naming: {label: x, trimPrefix: v}}"
        "": "set one or the other",
        "{from: Secrets, secretSelector: {matchLabels: {a: b}}, contexts: All, naming: {label: x}}"
        "": "with contexts All each Cluster is named after its context",
        "{from: VCluster, contexts: All}": "are vcluster's own with from VCluster",
    }
    for spec, text in cases.items():
        body = f"{HEAD}spec: {spec}"
        created = run(hub.admin_kubeconfig, "-n", namespace, "create", "-f", "-", input=body,
                      check=False)  # fmt: skip
        assert created.returncode != 0 and text in created.stderr, (spec, created.stderr)
