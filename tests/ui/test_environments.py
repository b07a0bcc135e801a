"""The Environments' list for a user who may not list every namespace, on the real hub.

It looks where the Clusters list looks, as the user: their ServiceAccount's own namespace, the
operator's ``--namespaces``, the ones they showed before; an empty list says where it looked,
never "No Environments" when the truth is "none you may list here", and never an error.
"""

from __future__ import annotations

import re

import httpx

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import ensure_namespace
from tests.support.ui import App, in_cluster_app, install_ui_account, token

SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}
ENVIRONMENT = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Environment
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{clusterSelector: {{matchLabels: {{fleet: edge}}}}}}
"""


def _reader(kubectl: Kubectl, hub: APIServer, account: str, account_ns: str, where: str) -> None:
    """``account_ns/account`` may get and list Clusters and Environments in ``where`` only."""
    kubectl(hub, "-n", where, "create", "role", account, "--verb=get,list",
            "--resource=clusters.delivery.kokumi.dev,environments.delivery.kokumi.dev")  # fmt: skip
    kubectl(hub, "-n", where, "create", "rolebinding", account, f"--role={account}",
            f"--serviceaccount={account_ns}:{account}")  # fmt: skip


async def _signed_in(app: App, bearer: str) -> httpx.Response:
    signed = await app.browser.post("/signin", data={"token": bearer}, headers=SAME_ORIGIN)
    assert signed.status_code == 303, signed.text
    return await app.browser.get("/environments")


def _environments(page: str) -> list[str]:
    return re.findall(r'href="/environments/([^"?]+)"', page)


async def test_a_namespace_user_finds_their_environments_where_the_clusters_list_looks(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    other = f"{namespace}-team"
    ensure_namespace(hub, other)
    for where, name in ((namespace, "edge"), (other, "far"), ("default", "guarded")):
        kubectl(hub, "apply", "-f", "-", input=ENVIRONMENT.format(name=name, namespace=where))
    for account in ("alice", "bob"):
        kubectl(hub, "-n", namespace, "create", "serviceaccount", account)
    _reader(kubectl, hub, "alice", namespace, namespace)  # her own namespace
    _reader(kubectl, hub, "bob", namespace, other)  # his are in another one
    alice, bob = token(hub, namespace, "alice"), token(hub, namespace, "bob")
    own = install_ui_account(hub)
    async with in_cluster_app(own) as app:
        # alice may list neither every namespace nor the Namespaces: her ServiceAccount's own
        # namespace is looked in, as her; no error, and nothing of another namespace.
        hers = await _signed_in(app, alice)
        assert hers.status_code == 200
        assert 'role="alert"' not in hers.text, hers.text
        assert _environments(hers.text) == [f"{namespace}/edge"]
        found = re.search(r'name="csrf" value="([^"]+)"', hers.text)
        assert found is not None
        await app.browser.post("/signout", data={"csrf": found.group(1)}, headers=SAME_ORIGIN)

        # bob's are elsewhere: the page says where it looked, not "No Environments".
        empty = await _signed_in(app, bob)
        assert empty.status_code == 200 and 'role="alert"' not in empty.text
        assert "No Environments" not in empty.text and _environments(empty.text) == []
        looked = empty.text.split('id="looked">', 1)[1].split("</p>", 1)[0]
        assert looked.startswith(
            f'None you may list in namespace <a href="/environments?namespace={namespace}">'
        ), looked
        # He names his namespace: listed as him, and remembered like the Clusters list's.
        typed = await app.browser.get(f"/environments?namespace={other}")
        assert _environments(typed.text) == [f"{other}/far"]
        again = await app.browser.get("/environments")
        assert _environments(again.text) == [f"{other}/far"]
        # One he may not list is the page's one-line error, as before.
        refused = await app.browser.get("/environments?namespace=default")
        assert "cannot list Environments in namespace default: Forbidden" in refused.text
        assert "guarded" not in refused.text and _environments(refused.text) == []
    # The operator's --namespaces: found at once.
    async with in_cluster_app(own, namespaces=(other,)) as named:
        listed = await _signed_in(named, bob)
        assert _environments(listed.text) == [f"{other}/far"]
