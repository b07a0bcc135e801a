"""deploy/ui/: valid for the API server, outside install.yaml, and exactly as narrow as it says.

The Deployment and Service are checked by a server-side dry run; the ServiceAccount, Role and
admission policy are applied for real (tests/support/ui.py), and what the account may do is
asked of the hub's authorizer with ``kubectl auth can-i``, as the account.
"""

from __future__ import annotations

import pytest
import yaml

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, apply, run, wait_until
from tests.support.podtoken import assert_only_the_ui_holds_the_token
from tests.support.ui import UI_ACCOUNT, UI_FILES, install_ui_account

FILES = sorted(UI_FILES.glob("*.yaml")) + sorted((UI_FILES / "optional").glob("*.yaml"))


def _documents() -> list[dict[str, object]]:
    return [d for path in FILES for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_ui_is_not_in_install_yamls_default_set() -> None:
    assert "kokumi-clusters-ui" not in (DEPLOY / "install.yaml").read_text()
    assert {d["kind"] for d in _documents()} == {
        "ServiceAccount", "Role", "RoleBinding", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "Deployment", "Service", "ClusterRole",
        "ClusterRoleBinding",
    }  # fmt: skip
    # No Namespace: deleting deploy/ui/ must never delete kokumi-signing and the keys in it.
    assert "Namespace" not in {d["kind"] for d in _documents()}


def test_every_file_is_valid_for_the_api_server(hub: APIServer) -> None:
    install_ui_account(hub)
    for path in FILES:
        applied = hub_apply_dry_run(hub, str(path))
        assert applied.count("(server dry run)") == len(
            [d for d in yaml.safe_load_all(path.read_text()) if d]
        ), applied


def hub_apply_dry_run(hub: APIServer, path: str) -> str:
    # As the session's own applies do (support.deploy.apply): the dry run takes over the fields.
    return run(hub.admin_kubeconfig, "apply", "--server-side", "--dry-run=server",
               "--force-conflicts", "--field-manager=kokumi-tests", "-f", path).stdout  # fmt: skip


def test_the_session_key_role_is_one_secret_by_name_plus_create() -> None:
    (role, binding) = yaml.safe_load_all((UI_FILES / "session-key.yaml").read_text())
    assert role["metadata"]["namespace"] == "kokumi-signing"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"],
         "resourceNames": ["kokumi-clusters-ui-session"], "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kokumi-clusters-ui", "namespace": "kokumi"}
    ]
    (impersonate, _) = yaml.safe_load_all((UI_FILES / "optional" / "impersonate.yaml").read_text())
    resources = {r["resources"][0]: r for r in impersonate["rules"]}
    assert set(resources) == {"users", "groups"}  # never serviceaccounts, uids or userextras
    assert resources["groups"]["resourceNames"] == ["kokumi-clusters-users"]


@pytest.mark.parametrize(
    ("verb", "what", "namespace", "allowed"),
    [
        ("get", "secret/kokumi-clusters-ui-session", "kokumi-signing", True),
        ("update", "secret/kokumi-clusters-ui-session", "kokumi-signing", True),
        ("create", "secrets", "kokumi-signing", True),
        ("get", "secret/kokumi-signing-key", "kokumi-signing", False),
        ("list", "secrets", "kokumi-signing", False),
        ("watch", "secrets", "kokumi-signing", False),
        ("delete", "secret/kokumi-clusters-ui-session", "kokumi-signing", False),
        ("get", "secrets", "kokumi", False),
        ("list", "clusters.delivery.kokumi.dev", "kokumi", False),
    ],
)
def test_what_the_uis_account_may_do(
    hub: APIServer, kubectl: Kubectl, verb: str, what: str, namespace: str, allowed: bool
) -> None:
    install_ui_account(hub)
    where = ["-n", namespace] if namespace else []
    args = ["auth", "can-i", verb, what, *where, f"--as={UI_ACCOUNT}"]

    def settled() -> bool | None:
        answer = kubectl(hub, *args, check=False).stdout.strip()
        return True if answer == ("yes" if allowed else "no") else None

    if allowed:
        wait_until(settled, f"{UI_ACCOUNT} may {verb} {what}")
    else:
        assert settled(), f"{UI_ACCOUNT} may {verb} {what} in {namespace or 'the cluster'}"


def test_proxy_mode_impersonates_users_and_the_named_groups_only(
    hub: APIServer, kubectl: Kubectl
) -> None:
    install_ui_account(hub)

    def can(what: str) -> str:
        return kubectl(hub, "auth", "can-i", "impersonate", what, f"--as={UI_ACCOUNT}",
                       check=False).stdout.strip()  # fmt: skip

    # Without the optional file (another test of the session may have applied it) no
    # impersonation at all: bearer sign-in needs none.
    kubectl(hub, "delete", "clusterrolebinding", "kokumi-clusters-ui-impersonate",
            "--ignore-not-found")  # fmt: skip
    wait_until(lambda: True if can("users/alice") == "no" else None, "no impersonation")
    apply(hub, UI_FILES / "optional" / "impersonate.yaml")
    wait_until(lambda: True if can("users/alice") == "yes" else None, "impersonation granted")
    assert can("groups/kokumi-clusters-users") == "yes"
    assert can("groups/system:masters") == "no"
    assert can("groups/other-team") == "no"
    assert can("serviceaccounts/kokumi") == "no"
    assert kubectl(hub, "auth", "can-i", "impersonate", "serviceaccounts", "-n", "kokumi",
                   f"--as={UI_ACCOUNT}", check=False).stdout.strip() == "no"  # fmt: skip


def test_the_oauth2_proxy_example_is_deploy_uis_pod_with_the_sidecar_in_front() -> None:
    (plain,) = yaml.safe_load_all((UI_FILES / "deployment.yaml").read_text())
    (service,) = yaml.safe_load_all((UI_FILES / "service.yaml").read_text())
    example, fronted = yaml.safe_load_all((UI_FILES / "optional" / "oauth2-proxy.yaml").read_text())
    pod = example["spec"]["template"]["spec"]
    ui, proxy = pod["containers"]
    # The UI listens where only the sidecar reaches it, and believes only the sidecar.
    assert ui["args"] == ["--in-cluster", "--listen=127.0.0.1:8080", "--trusted-proxy=127.0.0.1"]
    assert "--upstream=http://127.0.0.1:8080/" in proxy["args"]
    for flag in ("--pass-user-headers=true", "--skip-auth-strip-headers=true",
                 "--pass-access-token=false", "--skip-auth-route=GET=^/healthz$"):  # fmt: skip
        assert flag in proxy["args"]
    assert "ports" not in ui and proxy["ports"][0]["name"] == "proxy"
    for probe in ("livenessProbe", "readinessProbe"):
        assert ui[probe]["httpGet"] == {"path": "/healthz", "port": "proxy"}
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in proxy["env"]} == {
        "kokumi-clusters-ui-oauth2-proxy"
    }
    # Otherwise deploy/ui/'s own objects, so that it replaces them and drifts from nothing.
    changed = ("args", "ports", "livenessProbe", "readinessProbe")
    mine = plain["spec"]["template"]["spec"]["containers"][0]
    assert {k: v for k, v in ui.items() if k not in changed} == {
        k: v for k, v in mine.items() if k not in changed
    }
    pod_rest = {k: v for k, v in pod.items() if k != "containers"}
    assert pod_rest == {k: v for k, v in plain["spec"]["template"]["spec"].items()
                        if k != "containers"}  # fmt: skip
    assert {k: v for k, v in example.items() if k != "spec"} == {
        k: v for k, v in plain.items() if k != "spec"
    }
    assert fronted["spec"]["ports"] == [{**service["spec"]["ports"][0], "targetPort": "proxy"}]
    assert {k: v for k, v in fronted.items() if k != "spec"} == {
        k: v for k, v in service.items() if k != "spec"
    }


@pytest.mark.parametrize("path", ["deployment.yaml", "optional/oauth2-proxy.yaml"])
def test_only_the_ui_container_holds_the_service_accounts_token(path: str) -> None:
    """In proxy mode the sidecar faces the internet: it must not hold the UI's account."""
    deployment = next(d for d in yaml.safe_load_all((UI_FILES / path).read_text()) if d)
    assert_only_the_ui_holds_the_token(deployment["spec"]["template"]["spec"])
