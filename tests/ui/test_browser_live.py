"""Live status in a real browser (chromium, as test_browser.py drives it), against the real hub.

A Cluster whose status the hub changes shows the change on the list and on its page without a
reload: a mark set on ``window`` before the change is still there after it, which a reload would
have wiped. With script off (chromium's own switch) the same page shows it after its reload,
the ``<meta http-equiv="refresh">`` inside ``<noscript>`` that applies only then. The statuses are
written as the manager writes them, with no manager running, so that nothing else changes them.
"""

from __future__ import annotations

import json

import trio
from selenium.webdriver.common.by import By

from kokumi.kube.config import Config
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.ui.test_browser import Browser, running_ui

CLUSTER = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{connection: InCluster}}
"""


def _status(kubectl: Kubectl, hub: APIServer, namespace: str, name: str, ready: str,
            reason: str, message: str) -> None:  # fmt: skip
    status = {"status": {"server": "https://10.9.8.7:6443", "kubernetesVersion": "v1.31.4",
              "conditions": [{"type": "Ready", "status": ready, "reason": reason,
                              "message": message,
                              "lastTransitionTime": "2026-12-01T12:00:00Z"}]}}  # fmt: skip
    kubectl(hub, "-n", namespace, "patch", "kcl", name, "--subresource=status", "--type=merge",
            "-p", json.dumps(status))  # fmt: skip


async def _mark(browser: Browser) -> None:
    """A mark on this page's window: a reload makes a new window object, without it."""
    await browser._run(lambda: browser.driver.execute_script("window.kokumiMark = 'unreloaded';"))


async def _marked(browser: Browser) -> bool:
    found = await browser._run(lambda: browser.driver.execute_script("return window.kokumiMark;"))
    return bool(found == "unreloaded")


async def _cell(browser: Browser, selector: str) -> str:
    def read() -> str:
        try:
            return str(browser.driver.find_element(By.CSS_SELECTOR, selector).text)
        except Exception:  # the page is being loaded again: nothing to read yet
            return ""

    text: str = await browser._run(read)
    return text


async def _live(browser: Browser, responses: int = 1) -> None:
    """Until the page's stream is open (the hub's version is read, every later change comes),
    and has been answered ``responses`` times."""
    with trio.move_on_after(60):
        while True:
            state, opened = await browser._run(
                lambda: browser.driver.execute_script(
                    "return [document.body.getAttribute('data-live-state'),"
                    " document.body.getAttribute('data-live-opened')];"
                )
            )
            if state == "open" and int(opened or 0) >= responses:
                return
            await trio.sleep(0.1)
    raise AssertionError(f"the live stream did not open {responses} times")


async def _until_cell(browser: Browser, selector: str, wanted: str, what: str) -> None:
    """Read ``selector`` (never reloading) until it says ``wanted``."""
    last = ""
    with trio.move_on_after(30):
        while True:
            last = await _cell(browser, selector)
            if wanted in last:
                return
            await trio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; the cell said {last!r}")


async def test_a_cluster_turning_ready_shows_on_the_list_and_its_page_without_a_reload(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    for name in ("edge", "core"):
        kubectl(hub, "apply", "-f", "-", input=CLUSTER.format(name=name, namespace=namespace))
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    async with running_ui(config, "argocd") as browser:
        await browser.open(f"/clusters?namespace={namespace}")
        row = f"tr[data-cluster='{namespace}/edge']"
        assert "Checking" in await _cell(browser, row) or "Unknown" in await _cell(browser, row)
        await _live(browser)
        assert await _cell(browser, "#count .refreshing") == "updated live"
        await _mark(browser)
        await browser.shot("live-list-before")
        _status(kubectl, hub, namespace, "edge", "True", "Ready", "connected as the spoke's SA")
        await _until_cell(browser, f"{row} td.ready", "True", "edge Ready on the list")
        assert await _cell(browser, f"{row} .badge") == "Ready"
        assert await _cell(browser, f"{row} td.server") == "https://10.9.8.7:6443"
        assert await _cell(browser, f"{row} td.version") == "v1.31.4"
        core = f"tr[data-cluster='{namespace}/core']"
        assert await _cell(browser, f"{core} td.ready") == "Unknown"
        assert await _marked(browser), "the list was reloaded"
        await browser.shot("live-list-after")
        # Each response of the stream ends within seconds and the browser asks again, resumed
        # where it was: a change after that arrives as well, still without a reload.
        await _live(browser, responses=2)
        _status(kubectl, hub, namespace, "core", "False", "TLSError",
                "the server's certificate is not signed by the CA given")  # fmt: skip
        await _until_cell(browser, f"{core} .badge", "TLSError", "core TLSError on the list")
        assert await _cell(browser, f"{core} td.ready") == "False"
        assert await _marked(browser), "the list was reloaded"
        await browser.shot("live-list-resumed")

        await browser.open(f"/clusters/{namespace}/edge")
        await _mark(browser)
        await _live(browser)
        _status(kubectl, hub, namespace, "edge", "False", "Unreachable",
                "cannot reach https://10.9.8.7:6443: connection refused")  # fmt: skip
        await _until_cell(browser, "h1 .badge", "Unreachable", "edge Unreachable on its page")
        assert await _cell(browser, "dd .ready") == "False"
        assert "connection refused" in await _cell(browser, "dd.status-message")
        assert await _marked(browser), "the Cluster's page was reloaded"
        await browser.shot("live-cluster-page")


async def test_with_script_off_the_page_still_shows_the_change_after_its_reload(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    kubectl(hub, "apply", "-f", "-", input=CLUSTER.format(name="edge", namespace=namespace))
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    async with running_ui(config, "argocd") as browser:
        await browser._run(lambda: browser.driver.execute_cdp_cmd(
            "Emulation.setScriptExecutionDisabled", {"value": True}))  # fmt: skip
        await browser.open(f"/clusters?namespace={namespace}")
        assert "refreshed every 10 s" in await _cell(browser, "#count")
        old = await browser._run(lambda: browser.driver.find_element(By.TAG_NAME, "html"))
        _status(kubectl, hub, namespace, "edge", "True", "Ready", "connected")
        row = f"tr[data-cluster='{namespace}/edge'] td.ready"
        await _until_cell(browser, row, "True", "edge Ready after the page's own reload")

        def reloaded() -> bool:
            try:
                old.is_enabled()
            except Exception:  # the old page is gone: the browser loaded it again
                return True
            return False

        assert await browser._run(reloaded), "the status changed without a reload, with no script"
        assert "refreshed every 10 s" in await _cell(browser, "#count")
        await browser.shot("no-script-list-after-reload")
