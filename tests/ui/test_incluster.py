"""The UI in a cluster, against the real hub: httpx against the ASGI app, as two replicas would be.

Users are ServiceAccounts signing in with tokens from the TokenRequest API, checked by a
SelfSubjectReview; the UI's own account is deploy/ui/'s ServiceAccount with deploy/ui/'s Role and
admission policy, applied for real. What is shown: who gets in and who does not (in one line,
never with the token), the cookie's flags and lifetime, one key shared through kokumi-signing so
that replicas accept each other's cookies, the proxy's headers believed from the proxy only, and
every call made as the user, so that their RBAC refuses what they may not do.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import re
import ssl
import time
from pathlib import Path

import httpx
import pytest
import trio

from kokumi.core import api
from kokumi.core.sessioncookie import user_key
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import Forbidden
from kokumi.kube.resources import SECRETS
from kokumi.testing import Kubectl, canary
from kokumi.testing.controlplane import APIServer, CertificateAuthority
from kokumi.ui.incluster import KEY_NAMESPACE, KEY_SECRET, ProxyTrust, SessionKeyError, session_key
from kokumi.ui.pages import REVOKED_LINE
from kokumi.ui.security import COOKIE
from kokumi.ui.serve import serve_in_cluster
from tests.support.deploy import apply, wait_until
from tests.support.ui import (
    UI_FILES,
    App,
    config_for,
    delete_session_key,
    in_cluster_app,
    install_ui_account,
    refused_by_the_hub,
    token,
    user,
)

SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}
CLUSTER = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{connection: InCluster}}
"""


def _cluster(kubectl: Kubectl, hub: APIServer, namespace: str, name: str) -> None:
    kubectl(hub, "apply", "-f", "-", input=CLUSTER.format(name=name, namespace=namespace))


async def _sign_in(app: App, bearer: str, **headers: str) -> httpx.Response:
    return await app.browser.post(
        "/signin", data={"token": bearer}, headers={**SAME_ORIGIN, **headers}
    )


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:500]
    return found.group(1)


def _error_line(page: str, marker: str = 'role="alert">') -> str:
    return page.split(marker, 1)[1].split("</p>", 1)[0]


async def test_a_service_account_token_signs_in_and_lists_as_that_user(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice")
    _cluster(kubectl, hub, namespace, "edge")
    async with in_cluster_app(own) as app:
        first = await app.browser.get("/clusters")
        assert first.status_code == 401
        assert 'name="token" type="password"' in first.text
        signed = await _sign_in(app, alice)
        assert signed.status_code == 303, signed.text
        assert signed.headers["location"] == "/clusters"
        cookie = signed.headers["set-cookie"]
        listed = await app.browser.get(f"/clusters?namespace={namespace}")
        assert listed.status_code == 200
        assert f"cluster-{namespace}-edge" in listed.text
        assert f"system:serviceaccount:{namespace}:alice" in listed.text
    # The token is sealed: neither it nor its claims (the JWT's middle part) show in the cookie.
    claims = alice.split(".")[1]
    for where in (cookie, listed.text, first.text, caplog.text):
        assert alice not in where and claims not in where
    assert f"signed in as system:serviceaccount:{namespace}:alice" in caplog.text


async def test_a_wrong_token_is_refused_in_one_line_and_never_shown(
    hub: APIServer, crds: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # The test's own client logs each URL it asks for, as a proxy in front would: which is why
    # a token in a URL is refused. What is checked below is the UI's logging.
    caplog.set_level(logging.WARNING, logger="httpx")
    own = install_ui_account(hub)
    async with in_cluster_app(own) as app:
        wrong = canary.token()
        refused = await _sign_in(app, wrong)
        assert refused.status_code == 401
        line = _error_line(refused.text)
        assert line.startswith("Refused: the API server does not accept this token")
        assert "\n" not in line
        assert COOKIE not in refused.headers.get("set-cookie", "")
        in_url = await app.browser.get(f"/signin?token={wrong}")
        assert in_url.status_code == 400
        assert "a token in a URL ends up in browser histories" in in_url.text
        empty = await _sign_in(app, "  ")
        assert empty.status_code == 400 and "paste a bearer token" in empty.text
        broken = await _sign_in(app, f"{wrong}\nsecond line")
        assert broken.status_code in (400, 401)
        assert (await app.browser.get("/clusters")).status_code == 401
        for page in (refused, in_url, empty, broken):
            assert canary.found(page.text) == []
            assert canary.found(dict(page.headers)) == []
    assert canary.found(caplog.text) == []
    assert "refused a sign-in" in caplog.text


async def test_the_cookie_is_strict_http_only_secure_behind_tls_and_ends_with_its_token(
    hub: APIServer, crds: object, namespace: str
) -> None:
    own = install_ui_account(hub)
    user(hub, namespace, "alice")
    short = token(hub, namespace, "alice", seconds=600)
    async with in_cluster_app(own) as app:
        plain = (await _sign_in(app, short)).headers["set-cookie"]
        forwarded = (await _sign_in(app, short, **{"X-Forwarded-Proto": "https"})).headers[
            "set-cookie"
        ]
    async with in_cluster_app(own, base_url="https://kokumi-ui.example") as tls:
        direct = (await _sign_in(tls, short)).headers["set-cookie"]
    for cookie in (plain, forwarded, direct):
        for attribute in ("HttpOnly", "SameSite=Strict", "Path=/"):
            assert attribute in cookie
        max_age = int(re.search(r"Max-Age=(\d+)", cookie).group(1))  # type: ignore[union-attr]
        # Not the 8 hours of a session: the token's own 10 minutes.
        assert 0 < max_age <= 600
    assert "Secure" not in plain
    assert cookie.endswith("; Secure") and forwarded.endswith("; Secure")


async def test_a_session_expires_and_a_changed_cookie_opens_nothing(
    hub: APIServer, crds: object, namespace: str
) -> None:
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice")
    async with in_cluster_app(own) as app:
        await _sign_in(app, alice)
        value = app.browser.cookies[COOKIE]
        assert (await app.browser.get("/clusters")).status_code == 200
        flipped = value[:10] + ("A" if value[10] != "A" else "B") + value[11:]
        app.browser.cookies.set(COOKIE, flipped)
        assert (await app.browser.get("/clusters")).status_code == 401
        app.browser.cookies.set(COOKIE, value)
        assert (await app.browser.get("/clusters")).status_code == 200
        app.sessions.clock = lambda: time.time() + 9 * 3600
        expired = await app.browser.get("/clusters")
        assert expired.status_code == 401
        assert 'name="token"' in expired.text


async def test_two_replicas_share_the_key_in_kokumi_signing_and_each_others_cookies(
    hub: APIServer, crds: object, namespace: str
) -> None:
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice")
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        await delete_session_key(admin)
        async with in_cluster_app(own) as first, in_cluster_app(own) as second:
            secret = await admin.get(SECRETS, KEY_SECRET, namespace=KEY_NAMESPACE)
            assert len(base64.b64decode(secret["data"]["key"])) == 32
            assert secret["metadata"]["labels"]["app.kubernetes.io/name"] == "kokumi-clusters-ui"
            await _sign_in(first, alice)
            second.browser.cookies.set(COOKIE, first.browser.cookies[COOKIE])
            page = await second.browser.get(f"/clusters/new?namespace={namespace}")
            assert page.status_code == 200
            # A form from the first replica, posted to the second: the CSRF token holds there.
            form = {"csrf": _csrf((await first.browser.get("/clusters/new")).text),
                    "namespace": namespace, "name": "by-alice", "how": "incluster"}  # fmt: skip
            created = await second.browser.post("/clusters/new", data=form, headers=SAME_ORIGIN)
            assert created.status_code == 303, created.text
            made = await admin.get(api.CLUSTERS, "by-alice", namespace=namespace)
            # Created by the New Cluster path, with alice's rights: the UI's own account may not
            # touch Clusters at all (deploy/ui/ grants it no such verb).
            assert {f["manager"] for f in made["metadata"]["managedFields"]} == {"kokumi-cli"}

        # A Secret applied without its key (or with it deleted) is filled by the next replica,
        # which signs everyone out: the old cookies were sealed with the old key.
        old_cookie = first.browser.cookies[COOKIE]
        await admin.replace(SECRETS, {**secret, "data": {}}, namespace=KEY_NAMESPACE)
        async with in_cluster_app(own) as third:
            third.browser.cookies.set(COOKIE, old_cookie)
            assert (await third.browser.get("/clusters")).status_code == 401
        filled = await admin.get(SECRETS, KEY_SECRET, namespace=KEY_NAMESPACE)
        assert filled["data"]["key"] != secret["data"]["key"]

    # The UI's account reads that one Secret and nothing else in kokumi-signing, and may create
    # no other: RBAC cannot narrow a create to a name, the admission policy does.
    async with Client(own) as account:
        with pytest.raises(Forbidden):
            await account.get(SECRETS, "kokumi-signing-key", namespace=KEY_NAMESPACE)
        with pytest.raises(Forbidden, match="kokumi-clusters-ui-session-key"):
            await account.create(
                SECRETS,
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "planted"}},
                namespace=KEY_NAMESPACE,
            )
        with pytest.raises(SessionKeyError) as refused:
            await session_key(account, KEY_NAMESPACE, "another-key")
        said = str(refused.value)
        assert said.startswith(f"cannot read the session key Secret {KEY_NAMESPACE}/another-key")
        assert "apply deploy/ui/" in said and "\n" not in said


async def test_the_users_rbac_applies_not_the_uis_account(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    alice = user(hub, namespace, "alice")
    other = f"{namespace}-other"
    kubectl(hub, "create", "namespace", other)
    try:
        _cluster(kubectl, hub, other, "hidden")
        # The UI's own account here is the hub's admin, who may do anything: still the pages
        # act as alice only, who may not see or create Clusters in the other namespace.
        admin = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with in_cluster_app(admin) as app:
            await _sign_in(app, alice)
            listed = await app.browser.get(f"/clusters?namespace={other}")
            assert f"cluster-{other}-hidden" not in listed.text
            line = _error_line(listed.text)
            assert line.startswith(f"You may not list Clusters in namespace {other}: your RBAC")
            assert f"--user=system:serviceaccount:{namespace}:alice" in line
            csrf = _csrf(listed.text)
            form = {"csrf": csrf, "namespace": other, "name": "sneaky", "how": "incluster"}
            refused = await app.browser.post("/clusters/new", data=form, headers=SAME_ORIGIN)
            assert refused.status_code == 422
            said = _error_line(refused.text, 'id="form-error" role="alert">')
            assert said.startswith(f"cannot create Cluster {other}/sneaky: Forbidden")
            assert f"system:serviceaccount:{namespace}:alice" in said
            assert "\n" not in said
        assert kubectl(hub, "get", "kcl", "-n", other, "-o", "name").stdout.split() == [
            "cluster.delivery.kokumi.dev/hidden"
        ]
    finally:
        kubectl(hub, "delete", "namespace", other, "--wait=false", check=False)


async def test_a_forged_or_sessionless_post_is_refused_in_a_cluster_too(
    hub: APIServer, crds: object, namespace: str
) -> None:
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice")
    async with in_cluster_app(own) as app:
        login = await app.browser.post(
            "/signin", data={"token": alice}, headers={"Sec-Fetch-Site": "cross-site"}
        )
        assert login.status_code == 403
        assert (
            login.text
            == "Refused: the request came from another site (Sec-Fetch-Site: cross-site)."
        )
        await _sign_in(app, alice)
        form = {"namespace": namespace, "name": "forged", "how": "incluster"}
        tokenless = await app.browser.post("/clusters/new", data=form, headers=SAME_ORIGIN)
        assert tokenless.status_code == 403
        assert tokenless.text.startswith("Refused: the form is not from this session")
        cross = await app.browser.post(
            "/clusters/new", data={**form, "csrf": "x"}, headers={"Origin": "https://evil.example"}
        )
        assert cross.status_code == 403 and "another origin" in cross.text


async def test_behind_the_trusted_proxy_its_user_and_groups_are_impersonated_and_only_there(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    own = install_ui_account(hub)
    apply(hub, UI_FILES / "optional" / "impersonate.yaml")
    _cluster(kubectl, hub, namespace, "edge")
    for subject in ("--user=bob", "--group=kokumi-clusters-users"):
        name = subject.split("=")[1]
        kubectl(hub, "-n", namespace, "create", "role", name, "--verb=get,list",
                "--resource=clusters.delivery.kokumi.dev")  # fmt: skip
        kubectl(hub, "-n", namespace, "create", "rolebinding", name, f"--role={name}", subject)

    def impersonating() -> bool | None:
        can = kubectl(hub, "auth", "can-i", "impersonate", "groups/kokumi-clusters-users",
                      "--as=system:serviceaccount:kokumi:kokumi-clusters-ui",
                      check=False)  # fmt: skip
        return True if can.stdout.strip() == "yes" else None

    wait_until(impersonating, "the UI may impersonate")
    proxy = ProxyTrust.parse(["10.1.2.3"], "X-Forwarded-User", "X-Forwarded-Groups")
    path = f"/clusters?namespace={namespace}"
    async with in_cluster_app(own, proxy=proxy, client=("10.1.2.3", 5000)) as app:
        bob = await app.browser.get(path, headers={"X-Forwarded-User": "bob"})
        assert bob.status_code == 200
        assert f"cluster-{namespace}-edge" in bob.text and ">bob<" in bob.text
        assert "HttpOnly; SameSite=Strict" in bob.headers["set-cookie"]
        carol = await app.browser.get(
            path,
            headers={"X-Forwarded-User": "carol", "X-Forwarded-Groups": "kokumi-clusters-users"},
        )
        assert f"cluster-{namespace}-edge" in carol.text
        # carol without the group: her own RBAC (none) applies, not the UI's account.
        alone = await app.browser.get(path, headers={"X-Forwarded-User": "carol"})
        assert f"cluster-{namespace}-edge" not in alone.text
        assert "You may not list Clusters in namespace" in alone.text
        # A group not in the ClusterRole's resourceNames: the API server refuses to impersonate.
        other = await app.browser.get(
            path, headers={"X-Forwarded-User": "carol", "X-Forwarded-Groups": "other-team"}
        )
        assert "cannot impersonate" in other.text
        anonymous = await app.browser.get(path)
        assert anonymous.status_code == 401
        assert anonymous.text.startswith("Refused: the authenticating proxy named no user")
        masters = await app.browser.get(
            path, headers={"X-Forwarded-User": "bob", "X-Forwarded-Groups": "system:masters"}
        )
        assert masters.status_code == 403
        assert "the UI never impersonates those" in masters.text
    async with in_cluster_app(own, proxy=proxy, client=("10.9.9.9", 5000)) as elsewhere:
        forged = await elsewhere.browser.get(path, headers={"X-Forwarded-User": "bob"})
        assert forged.status_code == 403
        assert forged.text == (
            "Refused: 10.9.9.9 is not the trusted proxy, so its X-Forwarded-User header is not "
            "believed."
        )
        assert COOKIE not in forged.headers.get("set-cookie", "")
        bare = await elsewhere.browser.get(path)
        assert bare.status_code == 403 and "through their authenticating proxy only" in bare.text
        assert (await elsewhere.browser.get("/healthz")).text == "ok"


async def test_a_ui_account_without_deploy_uis_role_says_what_to_apply(
    hub: APIServer, namespace: str, kubectl: Kubectl
) -> None:
    kubectl(hub, "-n", namespace, "create", "serviceaccount", "stranger")
    stranger = config_for(hub, token(hub, namespace, "stranger"), namespace)
    async with Client(stranger) as account:
        with pytest.raises(SessionKeyError) as refused:
            await session_key(account)
    said = str(refused.value)
    assert said.startswith(f"cannot read the session key Secret {KEY_NAMESPACE}/{KEY_SECRET}: ")
    assert "Forbidden" in said and "apply deploy/ui/" in said and "\n" not in said


async def test_a_namespace_user_finds_their_clusters_where_they_may_list_them(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    alice = user(hub, namespace, "alice", verbs="get,list")
    _cluster(kubectl, hub, namespace, "edge")
    other = f"{namespace}-team"
    kubectl(hub, "create", "namespace", other)
    try:
        _cluster(kubectl, hub, other, "far")
        # bob's ServiceAccount lives in the test's namespace, his Clusters in the other one.
        kubectl(hub, "-n", namespace, "create", "serviceaccount", "bob")
        kubectl(hub, "-n", other, "create", "role", "bob", "--verb=get,list",
                "--resource=clusters.delivery.kokumi.dev")  # fmt: skip
        kubectl(hub, "-n", other, "create", "rolebinding", "bob", "--role=bob",
                f"--serviceaccount={namespace}:bob")  # fmt: skip
        bob = token(hub, namespace, "bob")
        own = install_ui_account(hub)
        async with in_cluster_app(own) as app, in_cluster_app(own) as second:
            # alice may list neither every namespace nor the Namespaces: her ServiceAccount's
            # own namespace is where she is looked for, with her token.
            await _sign_in(app, alice)
            listed = await app.browser.get("/clusters")
            assert f"cluster-{namespace}-edge" in listed.text
            assert f"1 in namespace {namespace} " in listed.text
            await app.browser.post("/signout", data={"csrf": _csrf(listed.text)},
                                   headers=SAME_ORIGIN)  # fmt: skip

            await _sign_in(app, bob)
            empty = await app.browser.get("/clusters")
            assert empty.status_code == 200
            assert "No Clusters" not in empty.text and "cluster-" not in empty.text
            looked = _error_line(empty.text, 'id="looked">')
            assert looked.startswith(f'None you may list in namespace <a href="/clusters'
                                     f'?namespace={namespace}">{namespace}</a>:')  # fmt: skip
            assert 'id="empty-namespace" name="namespace"' in empty.text
            # He types his namespace: listed as him, and remembered in his (sealed) session.
            typed = await app.browser.get(f"/clusters?namespace={other}")
            assert f"cluster-{other}-far" in typed.text
            assert COOKIE in typed.headers["set-cookie"]
            again = await app.browser.get("/clusters")
            assert f"cluster-{other}-far" in again.text
            assert f"1 in namespace {other} " in again.text
            # The cookie carries it, so another replica remembers it too; the form still holds.
            second.browser.cookies.set(COOKIE, app.browser.cookies[COOKIE])
            there = await second.browser.get("/clusters")
            assert f"cluster-{other}-far" in there.text
            assert _csrf(there.text) == _csrf(again.text)
            # A namespace he may not list is not remembered, and says so in one line.
            refused = await app.browser.get("/clusters?namespace=kube-system")
            assert "You may not list Clusters in namespace kube-system" in refused.text
            assert "set-cookie" not in refused.headers
        # The operator's --namespaces: bob finds his Clusters at once, with his own rights.
        async with in_cluster_app(own, namespaces=(other, "kube-system")) as named:
            await _sign_in(named, bob)
            found = await named.browser.get("/clusters")
            assert f"cluster-{other}-far" in found.text
            assert f"1 in namespace {other} " in found.text
            await _sign_in(named, alice)
            hers = await named.browser.get("/clusters")
            assert f"cluster-{namespace}-edge" in hers.text
            assert f"cluster-{other}-far" not in hers.text
    finally:
        kubectl(hub, "delete", "namespace", other, "--wait=false", check=False)


async def test_a_token_revoked_mid_session_ends_it_back_at_the_sign_in_in_one_line(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    own = install_ui_account(hub)
    carol = user(hub, namespace, "carol")
    _cluster(kubectl, hub, namespace, "edge")
    async with in_cluster_app(own) as app, in_cluster_app(own) as second:
        cookies = []
        for _ in range(3):  # three sessions of hers, each ended on its own below
            await _sign_in(app, carol)
            cookies.append(app.browser.cookies[COOKIE])
        listed = await app.browser.get("/clusters")
        assert f"cluster-{namespace}-edge" in listed.text
        kubectl(hub, "-n", namespace, "delete", "serviceaccount", "carol")
        await refused_by_the_hub(hub, carol)
        for path, cookie in (
            ("/clusters", cookies[0]),
            (f"/clusters/{namespace}/edge", cookies[1]),
        ):
            app.browser.cookies.set(COOKIE, cookie)
            page = await app.browser.get(path)
            assert page.status_code == 401
            assert 'name="token" type="password"' in page.text
            assert _error_line(page.text) == REVOKED_LINE
            assert "Unauthorized" not in page.text
            assert page.headers["set-cookie"].startswith(f"{COOKIE}=; ")
            assert "Max-Age=0" in page.headers["set-cookie"]
        # A form posted with the refused token ends the same way, and creates nothing.
        second.browser.cookies.set(COOKIE, cookies[2])
        form = {"csrf": _csrf(listed.text), "namespace": namespace, "name": "late",
                "how": "incluster"}  # fmt: skip
        posted = await second.browser.post("/clusters/new", data=form, headers=SAME_ORIGIN)
        assert posted.status_code == 401 and _error_line(posted.text) == REVOKED_LINE
        # Ended: the cookie opens nothing here any more, not even a page that asks nothing.
        app.browser.cookies.set(COOKIE, cookies[0])
        again = await app.browser.get("/clusters")
        assert again.status_code == 401 and REVOKED_LINE not in again.text
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout.split() == [
        "cluster.delivery.kokumi.dev/edge"
    ]
    assert "no longer accepts its token" in caplog.text
    assert carol not in caplog.text and carol.split(".")[1] not in caplog.text


async def _refused_within(app: App, path: str, seconds: float = 30) -> httpx.Response:
    """``path`` until the replica refuses the cookie: it reads the signed-out list again about
    once a second, on a request that needs it."""
    with trio.fail_after(seconds):
        while True:
            page = await app.browser.get(path)
            if page.status_code == 401:
                return page
            await trio.sleep(0.1)


async def test_sign_out_at_one_replica_is_honoured_at_every_other(
    hub: APIServer, crds: object, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice")
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        async with in_cluster_app(own) as first, in_cluster_app(own) as second:
            page = await _sign_in(first, alice)
            cookie = first.browser.cookies[COOKIE]
            sealed = first.sessions.keys.open(cookie, time.time())
            assert sealed is not None
            second.browser.cookies.set(COOKIE, cookie)
            listed = await second.browser.get("/clusters")
            assert listed.status_code == 200
            out = await first.browser.post(
                "/signout", data={"csrf": _csrf(listed.text)}, headers=SAME_ORIGIN
            )
            assert out.status_code == 200 and "Signed out" in out.text
            refused = await _refused_within(second, "/clusters")
            assert 'name="token" type="password"' in refused.text
            # Kept beside the key, as a digest of the user and when the session was issued,
            # nothing more: no name, no token, no session id.
            secret = await admin.get(SECRETS, KEY_SECRET, namespace=KEY_NAMESPACE)
            ended = json.loads(base64.b64decode(secret["data"]["signedOut"]))
            assert ended["users"][user_key(sealed.user)] == sealed.issued + 1
            kept = json.dumps(secret)
            assert alice not in kept and alice.split(".")[1] not in kept
            assert sealed.user not in kept and sealed.session_id not in kept
            # Signing in again is a new session, honoured at both.
            second.browser.cookies.clear()
            await _sign_in(second, alice)
            first.browser.cookies.set(COOKIE, second.browser.cookies[COOKIE])
            assert (await first.browser.get("/clusters")).status_code == 200
        # A replica started after the sign-out refuses the cookie at its first request.
        async with in_cluster_app(own) as third:
            third.browser.cookies.set(COOKIE, cookie)
            assert (await third.browser.get("/clusters")).status_code == 401
            assert page.status_code == 303

            # The Secret gone meanwhile: the sign-out still ends the session here, and says in
            # the log that the others are not told.
            third.browser.cookies.clear()
            await _sign_in(third, alice)
            form = await third.browser.get("/clusters")
            await delete_session_key(admin)
            caplog.set_level(logging.WARNING)
            out = await third.browser.post(
                "/signout", data={"csrf": _csrf(form.text)}, headers=SAME_ORIGIN
            )
            assert out.status_code == 200 and "Signed out" in out.text
            assert out.headers["set-cookie"].startswith(f"{COOKIE}=; ")
            assert (await third.browser.get("/clusters")).status_code == 401
    said = [r.getMessage() for r in caplog.records if "not shared" in r.getMessage()]
    assert len(said) == 1 and "apply deploy/ui/" in said[0] and "\n" not in said[0]


async def test_served_over_https_with_its_certificate_every_cookie_secure(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice")
    _cluster(kubectl, hub, namespace, "edge")
    authority = CertificateAuthority.create("kokumi-ui-test-ca")
    cert, key = authority.issue("kokumi-ui", server_names=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    tls = (str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    verified = ssl.create_default_context(cadata=authority.pem.decode())
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            functools.partial(serve_in_cluster, own, bind="127.0.0.1:0", tls=tls)
        )
        assert url.startswith("https://127.0.0.1:")
        async with httpx.AsyncClient(base_url=url, verify=verified) as browser:
            assert 'name="token" type="password"' in (await browser.get("/signin")).text
            signed = await browser.post("/signin", data={"token": alice}, headers=SAME_ORIGIN)
            assert signed.status_code == 303
            cookie = signed.headers["set-cookie"]
            assert cookie.endswith("; Secure") and "HttpOnly; SameSite=Strict" in cookie
            listed = await browser.get("/clusters")
            assert listed.status_code == 200 and f"cluster-{namespace}-edge" in listed.text
        # The certificate is the one given: a client trusting other CAs refuses it, and plain
        # HTTP on the port gets no page.
        async with httpx.AsyncClient(base_url=url, verify=ssl.create_default_context()) as other:
            with pytest.raises(httpx.ConnectError) as unverified:
                await other.get("/healthz")
            causes = []
            cause: BaseException | None = unverified.value
            while cause is not None:
                causes.append(cause)
                cause = cause.__cause__ or cause.__context__
            assert any(isinstance(c, ssl.SSLCertVerificationError) for c in causes), causes
        async with httpx.AsyncClient(base_url=url.replace("https://", "http://")) as plain:
            with pytest.raises(httpx.TransportError):
                await plain.get("/healthz")
        nursery.cancel_scope.cancel()
