"""``kokumi ui`` in a real browser (Debian's chromium, driven by Selenium), against the real hub
and spoke with a manager running: what a person does, and what a forged page cannot. The fleet's
pages (the overview, a long list) run against Clusters on the hub with statuses written as the
manager writes them, and no manager, so that their counts hold still while they are checked.

The browser is required: without chromium and chromium-driver these tests fail, saying how to
install them (`.ci/run` does). Each page visited is saved as a PNG under tests/artifacts/ui/ to
be looked at; every page source is kept and searched for the spoke's token and the canary.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from selenium import webdriver
from selenium.webdriver.chrome.options import Options as ChromeOptions
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from kokumi.core.sources.spec import SOURCE_LABEL
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import NotFound
from kokumi.kube.resources import SECRETS
from kokumi.testing import Kubectl, canary
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from kokumi.ui.pages import REVOKED_LINE
from kokumi.ui.serve import serve_in_cluster, serve_ui
from tests.support.cli import user_with
from tests.support.fleet import Member, make_fleet, make_source
from tests.support.manager import Workspace, manager, ready_of, wait_for, wait_reason, workspace
from tests.support.paths import REPO
from tests.support.ui import install_ui_account, refused_by_the_hub, user

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = REPO / "tests" / "artifacts" / "ui"


def _chrome() -> webdriver.Chrome:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: apt-get install chromium chromium-driver "
            "(.ci/run does), the UI is tested in a real browser"
        )
    options = ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1440,1000", "--disable-gpu"):  # fmt: skip
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@attrs.define
class Browser:
    """One Chrome, called from Trio through a thread; every page source it saw is kept."""

    driver: webdriver.Chrome
    base: str
    sources: list[str] = attrs.field(factory=list)

    async def _run(self, fn: Callable[[], Any]) -> Any:
        return await trio.to_thread.run_sync(fn)

    async def open(self, path: str) -> str:
        await self._run(functools.partial(self.driver.get, self.base + path))
        return await self.source()

    async def source(self) -> str:
        text: str = await self._run(lambda: self.driver.page_source)
        self.sources.append(text)
        return text

    async def fill(self, field: str, text: str) -> None:
        def fill() -> None:
            element = self.driver.find_element(By.ID, field)
            element.clear()
            element.send_keys(text)

        await self._run(fill)

    async def choose(self, how: str) -> None:
        await self._run(
            lambda: self.driver.find_element(By.CSS_SELECTOR, f"input[value={how}]").click()
        )

    async def submit(self, selector: str = "main button[type=submit]") -> str:
        """Click, and wait for the next page: the old one goes stale once it is replaced."""

        def click() -> None:
            old = self.driver.find_element(By.TAG_NAME, "html")
            self.driver.find_element(By.CSS_SELECTOR, selector).click()
            for _ in range(200):
                try:
                    old.is_enabled()
                except Exception:  # the old page is gone
                    return
                trio.from_thread.check_cancelled()
                threading.Event().wait(0.05)

        await self._run(click)
        return await self.source()

    async def text(self) -> str:
        found: str = await self._run(lambda: self.driver.find_element(By.TAG_NAME, "body").text)
        return found

    @property
    def url(self) -> str:
        return str(self.driver.current_url)

    async def shot(self, name: str, *, narrow: bool = False) -> None:
        """Save the page as a person sees it; ``narrow`` also as on a phone-wide window."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

        def save(width: int, path: Path) -> None:
            # The whole page, not the window: the device's height set to the content's.
            self.driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 600, "deviceScaleFactor": 1, "mobile": False},
            )
            metrics = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
            height = int(metrics["cssContentSize"]["height"])
            self.driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": min(max(height, 600), 3000), "deviceScaleFactor": 1,
                 "mobile": False},
            )  # fmt: skip
            try:
                self.driver.save_screenshot(str(path))
            finally:
                self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

        await self._run(lambda: save(1440, ARTIFACTS / f"{name}.png"))
        if narrow:
            await self._run(lambda: save(420, ARTIFACTS / f"{name}-narrow.png"))

    async def until(
        self, path: str, accept: Callable[[str], bool], what: str, timeout: float = 60
    ) -> str:
        """Reload ``path`` until its text says so: the pages refresh themselves, the test faster."""
        last = ""
        with trio.move_on_after(timeout):
            while True:
                await self.open(path)
                last = await self.text()
                if accept(last):
                    return last
                await trio.sleep(1)
        raise AssertionError(f"timed out waiting for {what}; the page said: {last[:2000]}")


@asynccontextmanager
async def running_ui(config: Config, argocd_namespace: str) -> AsyncIterator[Browser]:
    driver = await trio.to_thread.run_sync(_chrome)
    try:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(
                functools.partial(serve_ui, config, argocd_namespace=argocd_namespace)
            )
            browser = Browser(driver, running.url)
            await browser.open(running.sign_in_url.removeprefix(running.url))
            # The session's pages are under its secret path, which the cookie alone is not.
            pages = re.fullmatch(rf"{re.escape(running.url)}(/s/[\w-]{{43}})/clusters", browser.url)
            assert pages is not None, browser.url
            # The link is spent once used: opened again, it signs in no one.
            await browser.open(running.sign_in_url.removeprefix(running.url))
            assert "This sign-in link cannot be used" in await browser.text()
            # With the cookie but without the path, as another port of 127.0.0.1 would be sent.
            await browser.open("/clusters/new")
            assert "The cookie alone signs nobody in" in await browser.text()
            await browser.shot("sign-in-without-the-sessions-path")
            browser.base += pages[1]
            await browser.open("/clusters")
            yield browser
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(driver.quit)


@asynccontextmanager
async def running_in_cluster_ui(own: Config, argocd_namespace: str) -> AsyncIterator[Browser]:
    """``kokumi ui --in-cluster`` as its Deployment runs it, the browser on its sign-in page."""
    driver = await trio.to_thread.run_sync(_chrome)
    try:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                functools.partial(
                    serve_in_cluster, own, bind="127.0.0.1:0", argocd_namespace=argocd_namespace
                )
            )
            browser = Browser(driver, url)
            await browser.open("/clusters")
            yield browser
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(driver.quit)


_PEM_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE" r" KEY-----")


def _no_credentials(browser: Browser, spoke: Registration) -> None:
    for source in browser.sources:
        assert spoke.token not in source
        assert canary.found(source) == []
        # Any PEM private key (RSA, EC, PKCS #8), not just one kind of header.
        assert _PEM_PRIVATE_KEY.search(source) is None
        assert "client-key-data" not in source


@asynccontextmanager
async def fleet(hub: APIServer) -> AsyncIterator[tuple[Workspace, str]]:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        namespace = await ws.namespace()
        try:
            yield ws, namespace
        finally:
            await ws.cleanup()


async def test_add_from_a_pasted_kubeconfig_turns_ready_then_edit_and_delete(
    hub: APIServer,
    admission_policies: object,
    spoke_kubeconfig: Registration,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fleet(hub) as (ws, ns):
        config = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with running_ui(config, ws.argocd) as browser:
            await browser.open(f"/clusters?namespace={ns}")
            assert "No Clusters in namespace" in await browser.text()
            await browser.open(f"/clusters/new?namespace={ns}")
            await browser.fill("name", "spoke")
            await browser.choose("kubeconfig")
            await browser.fill("labels", "fleet=edge\ntier=prod")
            await browser.fill("description", "The edge spoke")
            # Shown before the paste: a screenshot is no place for a token either.
            await browser.shot("new-cluster-form", narrow=True)
            await browser.fill("kubeconfig", spoke_kubeconfig.kubeconfig)
            await browser.submit()
            assert browser.url == f"{browser.base}/clusters/{ns}/spoke", await browser.text()
            secret = await ws.client.get(SECRETS, "spoke-kubeconfig", namespace=ns)
            assert secret["metadata"]["labels"] == {
                "app.kubernetes.io/managed-by": "kokumi-cli", "delivery.kokumi.dev/cluster": "spoke"
            }  # fmt: skip
            assert secret["metadata"]["ownerReferences"][0]["kind"] == "Cluster"

            await ws.environment(ns, "edge", {"fleet": "edge"})
            listed = await browser.until(
                f"/clusters?namespace={ns}", lambda t: "True Ready" in t, "Ready"
            )
            assert spoke_kubeconfig.server.rstrip("/") in listed
            assert "fleet=edge" in listed
            await browser.shot("clusters-list", narrow=True)
            page = await browser.until(
                f"/clusters/{ns}/spoke", lambda t: "registers this Cluster" in t, "registered"
            )
            assert "edge" in page and "Deploy" in page
            assert "Secret spoke-kubeconfig (key value)" in page
            await browser.shot("cluster-page", narrow=True)

            environment = await browser.until(
                f"/environments/{ns}/edge", lambda t: "Deploy" in t, "the target Deploy"
            )
            assert "fleet=edge" in environment and "1 Cluster, 1 deploying" in environment
            await browser.shot("environment-page")
            await browser.open("/environments")
            await browser.shot("environments-list")

            await browser.open(f"/clusters/{ns}/spoke/edit")
            await browser.fill("labels", "fleet=core")
            await browser.submit()
            cluster = await ws.get_cluster(ns, "spoke")
            assert cluster["metadata"]["labels"] == {"fleet": "core"}
            assert cluster["spec"]["description"] == "The edge spoke"
            page = await browser.until(
                f"/clusters/{ns}/spoke", lambda t: "None selects it" in t, "no Environment"
            )

            await browser.open(f"/clusters/{ns}/spoke/delete")
            await browser.fill("confirm", "nope")
            await browser.submit()
            assert "type the Cluster's name, spoke, to delete it" in await browser.text()
            await browser.shot("delete-confirm")
            await browser.fill("confirm", "spoke")
            await browser.submit()

            async def gone() -> bool:
                try:
                    await ws.get_cluster(ns, "spoke")
                except NotFound:
                    return True
                return False

            await wait_for(gone, bool, "the Cluster to be deleted")
        _no_credentials(browser, spoke_kubeconfig)
        assert spoke_kubeconfig.token not in caplog.text


async def test_add_from_server_ca_and_token_and_the_cluster_kokumi_runs_in(
    hub: APIServer, admission_policies: object, spoke_kubeconfig: Registration
) -> None:
    async with fleet(hub) as (ws, ns):
        config = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with running_ui(config, ws.argocd) as browser:
            await browser.open(f"/clusters/new?namespace={ns}")
            await browser.fill("name", "by-token")
            await browser.choose("token")
            await browser.fill("server", spoke_kubeconfig.server)
            await browser.fill("ca", spoke_kubeconfig.ca_pem.decode())
            await browser.shot("new-cluster-token")
            await browser.fill("token", spoke_kubeconfig.token)
            await browser.submit()
            assert browser.url.endswith(f"/clusters/{ns}/by-token"), await browser.text()

            await browser.open(f"/clusters/new?namespace={ns}")
            await browser.fill("name", "in-cluster")
            await browser.choose("incluster")
            await browser.fill("labels", "delivery.kokumi.dev/in-cluster=true")
            await browser.submit()
            assert browser.url.endswith(f"/clusters/{ns}/in-cluster"), await browser.text()
            in_cluster = await ws.get_cluster(ns, "in-cluster")
            assert in_cluster["spec"] == {"connection": "InCluster"}
            with pytest.raises(NotFound):
                await ws.client.get(SECRETS, "in-cluster-kubeconfig", namespace=ns)

            await browser.until(
                f"/clusters?namespace={ns}",
                lambda t: t.count("True Ready") >= 2,
                "both Ready",
            )
            listed = await browser.open(f"/clusters?namespace={ns}&reason=Ready")
            assert "by-token" in listed and "in-cluster" in listed
            filtered = await browser.open(
                f"/clusters?namespace={ns}&selector=delivery.kokumi.dev/in-cluster%3Dtrue"
            )
            assert "in-cluster" in filtered and "by-token" not in filtered
        _no_credentials(browser, spoke_kubeconfig)


async def test_what_is_refused_leaves_nothing_behind(
    hub: APIServer,
    admission_policies: object,
    spoke_kubeconfig: Registration,
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    async with fleet(hub) as (ws, ns):
        # A Secret spoke-kubeconfig that neither the UI nor the CLI wrote.
        await ws.kubeconfig_secret(ns, "spoke-kubeconfig", spoke_kubeconfig.kubeconfig)
        config = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with running_ui(config, ws.argocd) as browser:
            await browser.open(f"/clusters/new?namespace={ns}")
            await browser.fill("name", "spoke")
            await browser.fill("kubeconfig", spoke_kubeconfig.kubeconfig)
            await browser.submit()
            said = await browser.text()
            assert f"Secret {ns}/spoke-kubeconfig exists and kokumi did not write it" in said
            assert "so nothing was created" in said
            await browser.shot("refused-foreign-secret")
            assert (
                await browser._run(
                    lambda: browser.driver.find_element(By.ID, "kubeconfig").get_attribute("value")
                )
                == ""
            )
            with pytest.raises(NotFound):
                await ws.get_cluster(ns, "spoke")

            # A kubeconfig that names files, with a token carrying the canary: refused with the
            # manager's reason, and the token is nowhere on the page.
            leaky = spoke_kubeconfig.kubeconfig.replace(
                spoke_kubeconfig.token, canary.token()
            ).replace("certificate-authority-data:", "certificate-authority: /etc/ca.crt\n    x:")
            await browser.open(f"/clusters/new?namespace={ns}")
            await browser.fill("name", "leaky")
            await browser.fill("kubeconfig", leaky)
            await browser.submit()
            assert "FilePath: " in await browser.text()

            # A forged form on another port of 127.0.0.1: the same site, so SameSite lets the
            # cookie through; Sec-Fetch-Site does not, even for a page that knew the session's
            # path (which another port is never told).
            with _attacker_page(browser.base, ns) as attack:
                await browser._run(functools.partial(browser.driver.get, attack))
                await browser.submit("button")
                refused = await browser.text()
            assert "Refused: the request came from another site" in refused
            with pytest.raises(NotFound):
                await ws.get_cluster(ns, "forged")
        _no_credentials(browser, spoke_kubeconfig)

    async with fleet(hub) as (ws, ns):
        # A user who may manage Clusters but not read Secrets: the policy refuses, in one line.
        user = user_with(
            hub, kubectl, ns, {"clusters.delivery.kokumi.dev": "create,get,list,update"}
        )
        async with running_ui(Config.from_kubeconfig(user), ws.argocd) as browser:
            await browser.open(f"/clusters/new?namespace={ns}")
            await browser.fill("name", "spoke")
            await browser.fill("kubeconfig", spoke_kubeconfig.kubeconfig)
            await browser.submit()
            line = await browser._run(lambda: browser.driver.find_element(By.ID, "form-error").text)
            await browser.shot("refused-by-policy")
            assert "\n" not in line
            assert line.startswith(f"cannot create Cluster {ns}/spoke: Forbidden: ")
            assert "ValidatingAdmissionPolicy 'kokumi-cluster-secret-access'" in line
            assert f"you may not read Secret spoke-kubeconfig in namespace {ns}" in line
            listed = await browser.open("/clusters")
            assert "Clusters" in listed
        assert kubectl(hub, "get", "kcl,secrets", "-n", ns, "-o", "name").stdout == ""
        _no_credentials(browser, spoke_kubeconfig)


@functools.cache
def _attack_dir() -> Path:
    path = ARTIFACTS.parent / "attacker"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _attacker_page(target: str, namespace: str) -> Iterator[str]:
    """A page on another port of 127.0.0.1 with a form that posts to the UI (the same site)."""
    directory = _attack_dir()
    (directory / "index.html").write_text(
        f'<form method="post" action="{target}/clusters/new">'
        f'<input name="namespace" value="{namespace}"><input name="name" value="forged">'
        '<input name="how" value="incluster"><input name="csrf" value="guessed">'
        '<button type="submit">win a prize</button></form>'
    )
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_cluster_in_conflict_says_who_holds_its_server(
    hub: APIServer, admission_policies: object, spoke_kubeconfig: Registration
) -> None:
    async with fleet(hub) as (ws, first):
        second = await ws.namespace()
        for ns in (first, second):
            await ws.kubeconfig_secret(ns, "spoke-kubeconfig", spoke_kubeconfig.kubeconfig)
            await ws.environment(ns, "edge", {"fleet": "edge"})
        await ws.cluster(first, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})
        await wait_reason(ws, first, "spoke", "Ready")
        await ws.cluster(second, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})
        waiting = ready_of(await wait_reason(ws, second, "spoke", "ClusterConflict"))
        config = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with running_ui(config, ws.argocd) as browser:
            page = await browser.until(
                f"/clusters/{second}/spoke", lambda t: "holds server" in t, "the holder"
            )
            assert f"Cluster {first}/spoke holds server" in page
            assert "this Cluster waits and takes over once it lets go" in page
            assert re.sub(r"\s+", " ", waiting["message"])[:60] in re.sub(r"\s+", " ", page)
            await browser.shot("cluster-conflict")
            listed = await browser.open("/clusters?reason=ClusterConflict")
            assert f"{second}" in listed and f"cluster-{first}-spoke" not in listed
            environment = await browser.open(f"/environments/{second}/edge")
            assert "ClusterConflict" in environment
        _no_credentials(browser, spoke_kubeconfig)


async def test_in_cluster_a_bearer_token_signs_in_and_shows_the_clusters(
    hub: APIServer, admission_policies: object, caplog: pytest.LogCaptureFixture
) -> None:
    async with fleet(hub) as (ws, ns):
        await ws.cluster(ns, "in-cluster")
        own = install_ui_account(hub)
        alice = user(hub, ns, "alice", verbs="get,list")
        async with running_in_cluster_ui(own, ws.argocd) as browser:
            assert "Paste a Kubernetes bearer token" in await browser.text()
            await browser.fill("token", canary.token())
            await browser.submit()
            refused = await browser.text()
            assert "Refused: the API server does not accept this token" in refused
            await browser.shot("in-cluster-sign-in-refused")
            await browser.fill("token", alice)
            await browser.submit()
            assert browser.url == f"{browser.base}/clusters", await browser.text()
            # Her ServiceAccount's own namespace is where the list looks: no namespace to type.
            listed = await browser.until(
                "/clusters", lambda t: "in-cluster" in t and "True Ready" in t, "Ready"
            )
            assert f"system:serviceaccount:{ns}:alice" in listed
            cookie = await browser._run(lambda: browser.driver.get_cookie("kokumi_session"))
            assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert alice not in cookie["value"]
            await browser.shot("in-cluster-clusters-list")
            await browser.open("/clusters/new")
            assert "aria-current" in await browser._run(
                lambda: browser.driver.find_element(
                    By.CSS_SELECTOR, "header a.button"
                ).get_attribute("outerHTML")
            )
        for source in browser.sources:
            assert alice not in source
            assert canary.found(source) == []
        assert alice not in caplog.text


CLUSTER = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{connection: InCluster}}
"""


async def test_in_cluster_a_namespace_user_finds_their_clusters_until_their_token_is_revoked(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    other = f"{namespace}-team"
    kubectl(hub, "create", "namespace", other)
    try:
        kubectl(hub, "apply", "-f", "-", input=CLUSTER.format(name="far", namespace=other))
        # bob's ServiceAccount is in the test's namespace; his Role, and his Clusters, elsewhere.
        kubectl(hub, "-n", namespace, "create", "serviceaccount", "bob")
        kubectl(hub, "-n", other, "create", "role", "bob", "--verb=get,list",
                "--resource=clusters.delivery.kokumi.dev")  # fmt: skip
        kubectl(hub, "-n", other, "create", "rolebinding", "bob", "--role=bob",
                f"--serviceaccount={namespace}:bob")  # fmt: skip
        bob = kubectl(hub, "-n", namespace, "create", "token", "bob").stdout.strip()
        own = install_ui_account(hub)
        async with running_in_cluster_ui(own, "argocd") as browser:
            await browser.fill("token", bob)
            await browser.submit()
            empty = await browser.text()
            assert "No Clusters" not in empty
            assert f"None you may list in namespace {namespace}" in empty
            assert "0 in the namespace looked in" in empty
            await browser.shot("in-cluster-namespace-user-empty", narrow=True)
            await browser.fill("empty-namespace", other)
            await browser.submit("#empty button[type=submit]")
            assert "far" in await browser.text()
            # Remembered in his session: the plain list finds it from now on.
            listed = await browser.open("/clusters")
            assert f"cluster-{other}-far" in listed
            assert f"1 in namespace {other}" in await browser.text()
            await browser.shot("in-cluster-namespace-user-remembered")
            # His ServiceAccount deleted mid-session: the next page is the sign-in, in one line.
            kubectl(hub, "-n", namespace, "delete", "serviceaccount", "bob")
            await refused_by_the_hub(hub, bob)
            await browser.open("/clusters")
            back = await browser.text()
            assert REVOKED_LINE in back and "Unauthorized" not in back
            assert "Paste a Kubernetes bearer token" in back
            assert await browser._run(lambda: browser.driver.get_cookie("kokumi_session")) is None
            await browser.shot("in-cluster-token-revoked")
        for source in browser.sources:
            assert bob not in source
    finally:
        kubectl(hub, "delete", "namespace", other, "--wait=false", check=False)


async def test_in_cluster_sign_out_at_one_replica_is_refused_at_the_other(
    hub: APIServer, crds: object, namespace: str
) -> None:
    own = install_ui_account(hub)
    alice = user(hub, namespace, "alice", verbs="get,list")
    async with running_in_cluster_ui(own, "argocd") as browser, trio.open_nursery() as nursery:
        other = await nursery.start(
            functools.partial(serve_in_cluster, own, bind="127.0.0.1:0", argocd_namespace="argocd")
        )
        first = browser.base
        await browser.fill("token", alice)
        await browser.submit()
        # A browser sends one host's cookie to each of its ports: both replicas serve her.
        browser.base = other
        assert f"system:serviceaccount:{namespace}:alice" in await browser.open("/clusters")
        copied = await browser._run(lambda: browser.driver.get_cookie("kokumi_session"))
        assert copied is not None
        browser.base = first
        await browser.open("/clusters")
        await browser.submit("form.signout button")
        assert "Signed out" in await browser.text()
        # The cookie put back, as a copy taken before the sign-out would be: the other
        # replica refuses it too, once it has read the list again (about a second).
        await browser._run(lambda: browser.driver.add_cookie(copied))
        assert await browser._run(lambda: browser.driver.get_cookie("kokumi_session")) is not None
        browser.base = other
        back = await browser.until(
            "/clusters", lambda t: "Paste a Kubernetes bearer token" in t, "the sign-in page"
        )
        assert "alice" not in back
        await browser.shot("in-cluster-signed-out-at-the-other-replica")
        nursery.cancel_scope.cancel()


def _fleet_members(first: str, second: str) -> list[Member]:
    """130 Clusters in two namespaces, labelled by region and tier, in the states a fleet has."""
    reasons = ("Ready",) * 7 + ("Unreachable", "TLSError", "Ready", "Unauthorized",
                                "ClusterConflict", None)  # fmt: skip
    regions = ("eu-west", "us-east", "ap-south")
    return [
        Member(first if i % 4 else second, f"edge-{regions[i % 3]}-{i:03d}",
               {"fleet-run": first, "region": regions[i % 3],
                "tier": "prod" if i % 5 else "staging"},
               reasons[i % len(reasons)], version=f"v1.{34 + i % 3}.{i % 4}")
        for i in range(130)
    ]  # fmt: skip


async def test_the_overview_counts_the_fleet_and_each_count_opens_exactly_its_clusters(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    second = f"{namespace}-b"
    kubectl(hub, "create", "namespace", second)
    try:
        members = _fleet_members(namespace, second)
        made = [Member(namespace, f"capi-{i}", {"fleet-run": namespace, SOURCE_LABEL: "capi"})
                for i in range(2)]  # fmt: skip
        everything = members + made
        async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
            await make_fleet(admin, everything)
            await make_source(admin, namespace, "capi")
        scope = f"selector=fleet-run%3D{namespace}"
        config = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with running_ui(config, "argocd") as browser:
            await browser.open(f"/overview?{scope}&labels=region,tier")
            text = await browser.text()
            ready = [m for m in everything if m.reason == "Ready"]
            assert (
                f"{len(everything)} Clusters matching fleet-run={namespace} in all namespaces"
                in text
            )
            big = await browser._run(
                lambda: browser.driver.find_element(By.CSS_SELECTOR, "p.big a").text
            )
            assert big == str(len(ready))
            await browser.shot("overview", narrow=True)

            def open_count(heading: str, title: str) -> int:
                """Click the count of ``title`` under ``heading``, as a person would; its number."""
                for section in browser.driver.find_elements(By.CSS_SELECTOR, "section.tile"):
                    if section.find_element(By.TAG_NAME, "h2").text != heading:
                        continue
                    for row in section.find_elements(By.TAG_NAME, "tr"):
                        cells = row.find_elements(By.TAG_NAME, "td")
                        if cells and cells[0].text.strip() == title:
                            link = cells[1].find_element(By.TAG_NAME, "a")
                            count = int(link.text.replace(",", ""))
                            old = browser.driver.find_element(By.TAG_NAME, "html")
                            link.click()
                            _until_stale(old)
                            return count
                raise AssertionError(f"no count {title} under {heading}")

            cases: list[tuple[str, str, Callable[[Member], bool]]] = [
                ("By reason", "TLSError", lambda m: m.reason == "TLSError"),
                ("By reason", "Checking…", lambda m: m.reason is None),
                ("Ready", "False", lambda m: m.reason not in (None, "Ready")),
                ("By namespace", second, lambda m: m.namespace == second),
                ("By label region", "eu-west", lambda m: m.labels.get("region") == "eu-west"),
                ("By label tier", "without tier", lambda m: "tier" not in m.labels),
            ]
            for heading, title, chosen in cases:
                await browser.open(f"/overview?{scope}&labels=region,tier")
                count = await browser._run(functools.partial(open_count, heading, title))
                want = {(m.namespace, m.name) for m in everything if chosen(m)}
                assert count == len(want), (heading, title)
                assert f" of {count:,} " in await browser.text(), (heading, title)
                if (heading, title) == ("By reason", "TLSError"):
                    await browser.shot("overview-to-list")
                assert await _every_row(browser) == want, (heading, title)
        _no_credentials_at_all(browser)
    finally:
        kubectl(hub, "delete", "namespace", second, "--wait=false", check=False)


async def test_page_two_of_a_long_list_and_sorting_by_a_column(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    second = f"{namespace}-b"
    kubectl(hub, "create", "namespace", second)
    try:
        members = _fleet_members(namespace, second)
        async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
            await make_fleet(admin, members)
        config = Config.from_kubeconfig(hub.admin_kubeconfig)
        async with running_ui(config, "argocd") as browser:
            await browser.open(f"/clusters?namespace={namespace}")
            ours = sorted(m.name for m in members if m.namespace == namespace)
            text = await browser.text()
            assert f"1{DASH}50 of {len(ours)} in namespace {namespace}" in text
            assert await _names(browser) == ours[:50]
            await browser.submit("a[rel=next]")
            second_page = f"51{DASH}{min(100, len(ours))} of {len(ours)} in namespace {namespace}"
            assert second_page in await browser.text()
            assert await _names(browser) == ours[50:100]
            assert "page=2" in browser.url
            await browser.shot("clusters-list-page-2", narrow=True)
            # A heading sorts by its column, keeping the namespace, from the first page.
            await browser.submit("th a.sort[href*='sort=name']")
            assert await _names(browser) == ours[:50] and "page=" not in browser.url
            await browser.submit("th a.sort[href*='sort=name']")  # again: the other way
            assert await _names(browser) == ours[::-1][:50]
            assert f"namespace={namespace}" in browser.url and "order=desc" in browser.url
            await browser.submit("th a.sort[href*='sort=reason']")
            by_reason = await _names(browser)
            reason_of = {m.name: m.reason or "Checking…" for m in members}
            assert [reason_of[n] for n in by_reason] == sorted(reason_of[n] for n in by_reason)
            # The filters, from the form, keep the order; Next keeps both.
            await browser.open(
                f"/clusters?{'selector=fleet-run%3D' + namespace}&sort=version&order=desc"
            )
            await browser.shot("clusters-list-sorted")
            # By version as numbers (v1.9 before v1.10), the unchecked (no version: "-") last.
            everything_sorted = sorted(
                members,
                key=lambda m: (
                    tuple(int(p) for p in m.version[1:].split(".")) if m.reason else (10**9,),
                    m.namespace,
                    m.name,
                ),
                reverse=True,
            )
            assert await _names(browser) == [m.name for m in everything_sorted[:50]]
            await browser.submit("a[rel=next]")
            assert await _names(browser) == [m.name for m in everything_sorted[50:100]]
            assert "sort=version" in browser.url and "order=desc" in browser.url
            # Ready only, by name: page 2 of 2, as the docs show it.
            await browser.open(f"/clusters?selector=fleet-run%3D{namespace}&ready=True&sort=name")
            ready = sorted(m.name for m in members if m.reason == "Ready")
            await browser.submit("a[rel=next]")
            assert await _names(browser) == ready[50:]
            assert f"51{DASH}{len(ready)} of {len(ready)} matching" in await browser.text()
            await browser.shot("clusters-list-ready-page-2")
        _no_credentials_at_all(browser)
    finally:
        kubectl(hub, "delete", "namespace", second, "--wait=false", check=False)


async def _names(browser: Browser) -> list[str]:
    found: list[str] = await browser._run(
        lambda: [
            a.text
            for a in browser.driver.find_elements(
                By.CSS_SELECTOR, "table.clusters tbody tr td:first-child a"
            )
        ]
    )
    return found


async def _every_row(browser: Browser) -> set[tuple[str, str]]:
    """The (namespace, name) of every row over every page of the list, following Next."""
    found: set[tuple[str, str]] = set()
    while True:
        rows = await browser._run(
            lambda: [
                tuple(td.text for td in row.find_elements(By.TAG_NAME, "td")[:2])
                for row in browser.driver.find_elements(By.CSS_SELECTOR, "table.clusters tbody tr")
            ]
        )
        found |= {(ns, name) for name, ns in rows}
        has_next = await browser._run(
            lambda: bool(browser.driver.find_elements(By.CSS_SELECTOR, "a[rel=next]"))
        )
        if not has_next:
            return found
        await browser.submit("a[rel=next]")


DASH = "\N{EN DASH}"


def _until_stale(old: Any) -> None:
    """Wait (in the driver's thread) until the page ``old`` belonged to is replaced."""
    for _ in range(200):
        try:
            old.is_enabled()
        except Exception:  # the old page is gone
            return
        trio.from_thread.check_cancelled()
        threading.Event().wait(0.05)


def _no_credentials_at_all(browser: Browser) -> None:
    for source in browser.sources:
        assert canary.found(source) == []
        assert _PEM_PRIVATE_KEY.search(source) is None
