"""The cluster ``add`` registers, reached from the user's own kubeconfig.

Either one context of it, files read and inlined, or the spec's "Register a cluster" steps run on
that cluster: a ServiceAccount of Kokumi's with a token, whose kubeconfig is stored instead. The
second is the way out for a context that signs in with something only a person can run.
"""

from __future__ import annotations

from typing import Any, Final

import trio
import yaml

from kokumi.cmd.cluster.errors import CliError, api_error
from kokumi.core.kubeconfig.connection import Code, KubeconfigRefused
from kokumi.kube.client import Client
from kokumi.kube.config import Config, flatten_context
from kokumi.kube.errors import AlreadyExists, KubeError
from kokumi.kube.resources import SECRETS, SERVICE_ACCOUNTS
from kokumi.objects import Resource, secret_data
from kokumi.workspace.newcluster import (
    FIELD_MANAGER,
    SERVICE_ACCOUNT,
    Source,
    check_kubeconfig,
    kubeconfig_of_token,
    write,
)

__all__ = ["kubeconfig_of_context", "service_account_kubeconfig", "service_account_objects"]


SERVICE_ACCOUNT_NAMESPACE: Final = "kube-system"


def token_secret(account: str) -> str:
    """The service-account-token Secret of ``account``: kokumi-token, as in the spec's steps."""
    return f"{account}-token"


CLUSTER_ROLE_BINDINGS: Final = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)

_SERVICE_ACCOUNT_HINT: Final = (
    "; or let kokumi create a ServiceAccount with a token on that cluster and store its "
    "kubeconfig instead: add --create-service-account"
)

_NEED_SERVICE_ACCOUNT: Final = frozenset({Code.EXEC_PLUGIN, Code.AUTH_PROVIDER, Code.BASIC_AUTH})


def kubeconfig_of_context(path: str | None, context: str | None) -> Source:
    """The self-contained kubeconfig of one context and its server, files read and inlined.

    Checked by the manager's own reader, so a refusal is the manager's own reason; where the
    context signs in with something only a person can run, the fix is a ServiceAccount of Kokumi's.
    """
    try:
        name, document = flatten_context(path, context)
    except KubeError as exc:
        raise CliError(str(exc)) from None
    text = yaml.safe_dump(document, sort_keys=False)
    try:
        minimal, server = check_kubeconfig(text)
    except KubeconfigRefused as refused:
        hint = _SERVICE_ACCOUNT_HINT if refused.refusal.code in _NEED_SERVICE_ACCOUNT else ""
        raise CliError(
            f"context {name!r} cannot be stored: {refused.refusal.message}{hint}"
        ) from None
    return Source(server, minimal, f"context {name}, server {server}")


async def service_account_kubeconfig(
    config: Config,
    *,
    name: str,
    account: str = SERVICE_ACCOUNT,
    cluster_role: str,
    server: str | None,
    token_wait: float,
    poll: float = 0.5,
) -> Source:
    """The spec's "Register a cluster" steps on the spoke, then the kubeconfig they lead to.

    ServiceAccount kokumi in kube-system, a ClusterRoleBinding to ``cluster_role``, and a
    service-account-token Secret, whose token the spoke's token controller fills in (polled, as
    ``argocd cluster add`` polls). Running it again reuses what is there.
    """
    account_body, binding, token_body = service_account_objects(account, cluster_role)
    subject = binding["subjects"][0]
    async with Client(config, field_manager=FIELD_MANAGER) as spoke:
        found = await _create_or_keep(spoke, SERVICE_ACCOUNTS, account_body)
        if found is None:
            try:
                found = await spoke.get(
                    SERVICE_ACCOUNTS, account, namespace=SERVICE_ACCOUNT_NAMESPACE
                )
            except KubeError as exc:
                raise api_error(f"cannot read ServiceAccount kube-system/{account}", exc) from None
        uid = str((found.get("metadata") or {}).get("uid") or "")
        existing = await _create_or_keep(spoke, CLUSTER_ROLE_BINDINGS, binding)
        if existing is not None:
            bound = (existing.get("roleRef") or {}).get("name")
            if bound != cluster_role:
                raise CliError(
                    f"ClusterRoleBinding {account} on the cluster binds ClusterRole "
                    f"{bound}, not {cluster_role}: pass --cluster-role {bound}, or delete the "
                    "binding to bind another role"
                )
            if subject not in (existing.get("subjects") or []):
                existing["subjects"] = [*(existing.get("subjects") or []), subject]
                await write(spoke, "update", CLUSTER_ROLE_BINDINGS, existing, spoke.replace)
        await _create_or_keep(spoke, SECRETS, token_body)
        token, ca = await _wait_for_token(
            spoke, token_secret(account), token_wait, poll, account=account, uid=uid
        )
    address = server or config.server
    text = kubeconfig_of_token(name, address, ca, token, user=account)
    return Source(address, text, f"token of ServiceAccount kube-system/{account}, server {address}")


async def _create_or_keep(
    client: Client, resource: Resource, body: dict[str, Any]
) -> dict[str, Any] | None:
    """Create ``body``; None when created, the object already there when it exists."""
    meta = body["metadata"]
    namespace = meta.get("namespace")
    try:
        await client.create(resource, body, namespace=namespace)
    except AlreadyExists:
        try:
            return await client.get(resource, meta["name"], namespace=namespace)
        except KubeError as exc:
            raise api_error(f"cannot read {resource.kind} {meta['name']}", exc) from None
    except KubeError as exc:
        raise api_error(
            f"cannot create {resource.kind} {meta['name']} on the cluster", exc
        ) from None
    return None


_TOKEN_TYPE: Final = "kubernetes.io/service-account-token"  # noqa: S105 - a type, not a token
_ACCOUNT_NAME: Final = "kubernetes.io/service-account.name"
_ACCOUNT_UID: Final = "kubernetes.io/service-account.uid"


def _not_the_accounts(secret: dict[str, Any], account: str, uid: str) -> str | None:
    """Why a token Secret is not this ServiceAccount's token, or None when it is.

    A Secret of that name may have been there before: written for another, more powerful account,
    or for an earlier ServiceAccount of the same name. Only the token controller's marks say
    whose token it holds: the type, the account's name and its uid.
    """
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    if secret.get("type") != _TOKEN_TYPE:
        return f"it is not of type {_TOKEN_TYPE}"
    if annotations.get(_ACCOUNT_NAME) != account:
        return f"its annotation {_ACCOUNT_NAME} names another ServiceAccount"
    if annotations.get(_ACCOUNT_UID) not in (None, uid):
        return (
            f"its annotation {_ACCOUNT_UID} is not the uid of ServiceAccount kube-system/{account}"
        )
    return None


async def _wait_for_token(
    client: Client,
    token_secret_name: str,
    wait: float,
    poll: float,
    *,
    account: str,
    uid: str,
) -> tuple[str, bytes | None]:
    with trio.move_on_after(wait):
        while True:
            try:
                secret = await client.get(
                    SECRETS, token_secret_name, namespace=SERVICE_ACCOUNT_NAMESPACE
                )
            except KubeError as exc:
                raise api_error(
                    f"cannot read Secret kube-system/{token_secret_name}", exc
                ) from None
            wrong = _not_the_accounts(secret, account, uid)
            if wrong is not None:
                raise CliError(
                    f"Secret kube-system/{token_secret_name} is not the token of ServiceAccount "
                    f"kube-system/{account} ({wrong}), so its token was not used: delete the "
                    "Secret and run again, or choose another --service-account"
                )
            annotations = (secret.get("metadata") or {}).get("annotations") or {}
            token = secret_data(secret, "token")
            if token and annotations.get(_ACCOUNT_UID) == uid:
                return token.decode("utf-8"), secret_data(secret, "ca.crt")
            await trio.sleep(poll)
    raise CliError(
        f"the cluster did not put a token into Secret kube-system/{token_secret_name} within "
        f"{wait:g} s: is its token controller (kube-controller-manager) running?"
    )


def service_account_objects(
    account: str, cluster_role: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What the spec's steps create on the cluster: the account, its binding, its token Secret."""
    meta = {"name": account, "namespace": SERVICE_ACCOUNT_NAMESPACE}
    return (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": account},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", **meta}],
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                **meta,
                "name": token_secret(account),
                "annotations": {"kubernetes.io/service-account.name": account},
            },
            "type": "kubernetes.io/service-account-token",
        },
    )
