"""The Clusters' pages as a person reads them in chromium (as test_browser.py drives it), on
the real hub: a long status message keeps its row one line, the Age counts on in an open page,
a narrowed overview says so, and a namespace user reads their registration and a namespace they
may not list in plain, wrapped words. The statuses are written as the manager writes them, with
no manager running, so that nothing else changes them. Screenshots: tests/artifacts/ui/words-*.
"""

from __future__ import annotations

import json

import trio
from selenium.webdriver.common.by import By

from kokumi.core import api
from kokumi.kube.config import Config
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.support.cli import user_with
from tests.ui.test_browser import Browser, running_ui
from tests.ui.test_browser_live import _cell, _live, _mark, _marked

CLUSTER = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: {namespace}, labels: {{env: {env}}}}}
spec: {{connection: Kubeconfig, kubeconfig: {{secretRef: {{name: {name}-kubeconfig}}}}}}
"""
LONG = (
    "Secret {name}-kubeconfig not found in namespace {namespace}: create it with the kubeconfig "
    "under key kubeconfig (kubectl create secret generic {name}-kubeconfig -n {namespace} "
    "--from-file=kubeconfig=...)"
)


def _status(kubectl: Kubectl, hub: APIServer, namespace: str, name: str, reason: str,
            message: str) -> None:  # fmt: skip
    ready = "True" if reason == "Ready" else "False"
    status = {"status": {"server": "https://10.9.8.7:6443", "kubernetesVersion": "v1.31.4",
              "conditions": [{"type": "Ready", "status": ready, "reason": reason,
                              "message": message,
                              "lastTransitionTime": "2026-12-01T12:00:00Z"}]}}  # fmt: skip
    kubectl(hub, "-n", namespace, "patch", "kcl", name, "--subresource=status", "--type=merge",
            "-p", json.dumps(status))  # fmt: skip


async def _height(browser: Browser, selector: str) -> int:
    found = await browser._run(
        lambda: browser.driver.find_element(By.CSS_SELECTOR, selector).size["height"]
    )
    return int(found)


async def _fleet(hub: APIServer, kubectl: Kubectl, namespace: str) -> None:
    for name, env in (("edge", "prod"), ("core", "dev"), ("lab", "dev")):
        kubectl(hub, "apply", "-f", "-",
                input=CLUSTER.format(name=name, namespace=namespace, env=env))  # fmt: skip
    _status(kubectl, hub, namespace, "edge", "SecretNotFound",
            LONG.format(name="edge", namespace=namespace))  # fmt: skip
    _status(kubectl, hub, namespace, "core", "Ready", "connected")
    _status(kubectl, hub, namespace, "lab", "SecretNotFound",
            LONG.format(name="lab", namespace=namespace))  # fmt: skip


async def test_a_long_message_keeps_its_row_one_line_and_the_age_counts_on(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    await _fleet(hub, kubectl, namespace)
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    async with running_ui(config, "argocd") as browser:
        await browser.open(f"/clusters?namespace={namespace}")
        edge, core = (f"tr[data-cluster='{namespace}/{n}']" for n in ("edge", "core"))
        assert await _height(browser, edge) == await _height(browser, core)
        title = await browser._run(
            lambda: browser.driver.find_element(By.CSS_SELECTOR, f"{edge} .message")
            .get_attribute("title")
        )  # fmt: skip
        assert title == LONG.format(name="edge", namespace=namespace)
        await browser.shot("words-list-long-message")
        # An open, live page: the Age counts on without a reload (seconds, for a new Cluster).
        await _live(browser)
        await _mark(browser)
        first = await _cell(browser, f"{edge} td.age")
        later = first
        with trio.move_on_after(30):
            while later == first:
                await trio.sleep(0.2)
                later = await _cell(browser, f"{edge} td.age")
        assert later != first, f"the Age stayed {first!r}"
        assert later.endswith(("s", "m")), later
        assert await _marked(browser), "the list was reloaded"

        await browser.open(f"/clusters/{namespace}/edge")
        await _mark(browser)
        first = await _cell(browser, "dd.age")
        later = first
        with trio.move_on_after(30):
            while later == first:
                await trio.sleep(0.2)
                later = await _cell(browser, "dd.age")
        assert later != first, f"the Cluster page's Age stayed {first!r}"
        assert await _marked(browser), "the Cluster's page was reloaded"

        await browser.open(f"/overview?selector=env%3Ddev&namespace={namespace}")
        total = await _cell(browser, "#total")
        assert total.startswith(f"2 Clusters matching env=dev in namespace {namespace}"), total
        await browser.shot("words-overview-narrowed")
        await browser.open(f"/clusters?selector=env%3Ddev&namespace={namespace}")
        count = await _cell(browser, "#count")
        wanted = f"1\N{EN DASH}2 of 2 matching env=dev in namespace {namespace}"
        assert count.startswith(wanted), count


async def test_a_namespace_user_reads_the_registration_and_a_refusal_in_plain_words(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    await _fleet(hub, kubectl, namespace)
    kubectl(hub, "-n", namespace, "patch", "kcl", "core", "--type=merge", "-p",
            json.dumps({"metadata": {"finalizers": [api.FINALIZER]}}))  # fmt: skip
    try:
        grants = {"environments.delivery.kokumi.dev": "list", "events": "list",
                  "clusters.delivery.kokumi.dev": "get,list,watch"}  # fmt: skip
        config = Config.from_kubeconfig(user_with(hub, kubectl, namespace, grants))
        async with running_ui(config, "argocd") as browser:
            await browser.open(f"/clusters/{namespace}/core")
            line = await _cell(browser, ".registration")
            assert line.startswith("registered: Secret argocd/kokumi-"), line
            assert "As the Cluster's status tells it" in await browser.text()
            await browser.shot("words-cluster-registered-by-status")
            await browser.open(f"/clusters/{namespace}/edge")
            line = await _cell(browser, ".registration")
            assert line.startswith("not registered: Kokumi registers the Cluster once it is "
                                   "Ready (SecretNotFound now)"), line  # fmt: skip
            await browser.open("/clusters?namespace=kube-system")
            refusal = await _cell(browser, "p.error")
            assert refusal.startswith(
                "You may not list Clusters in namespace kube-system: your RBAC grants no list"
            ), refusal
            assert "is forbidden" not in refusal
            # Wrapped in the page's width, not one line running off it.
            width = await browser._run(
                lambda: browser.driver.find_element(By.CSS_SELECTOR, "p.error").size["width"]
            )
            assert int(width) <= 920
            assert await _height(browser, "p.error") > 40
            await browser.shot("words-forbidden-namespace")
    finally:
        kubectl(hub, "-n", namespace, "patch", "kcl", "core", "--type=merge", "-p",
                json.dumps({"metadata": {"finalizers": []}}))  # fmt: skip
