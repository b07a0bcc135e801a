"""Objects the CRD schema lets through but the code might not expect, on the real hub.

Each ends in a precise reason and a one-line message that names what was found and how to fix it:
a PEM certificate stored as the kubeconfig is called a certificate, a JSON array a list, bytes
that are not UTF-8 are called that; a kubeconfig of almost 1 MiB (the most a Secret holds) is
read like any other; label values at the edges of what Kubernetes allows select as they should,
through a selector that uses every operator.
"""

from __future__ import annotations

import base64
from typing import Any

from kokumi.core import api
from kokumi.kube import errors
from kokumi.kube.resources import SECRETS
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support import strategies as s
from tests.support.manager import manager, ready_of, wait_for, wait_reason, workspace

SECRET_LIMIT = 1024 * 1024  # the API server refuses a Secret whose data is larger


def padded(kubeconfig: str, size: int) -> str:
    """The kubeconfig grown to ``size`` bytes by a YAML comment at its end."""
    filler = size - len(kubeconfig.encode()) - 3
    return f"{kubeconfig}\n# {'x' * filler}"


async def test_bad_kubeconfigs_get_a_precise_reason_and_message(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    cases: dict[str, tuple[bytes, str, str]] = {
        "pem-certificate": (
            reg.ca_pem,
            "InvalidKubeconfig",
            "the kubeconfig is a PEM certificate (CERTIFICATE), not a kubeconfig",
        ),
        "pem-key": (
            s.lone_key_pem("rsa"),
            "InvalidKubeconfig",
            "the kubeconfig is a PEM private key (PRIVATE KEY), not a kubeconfig",
        ),
        "json-array": (
            b'["' + reg.server.encode() + b'", "' + reg.token.encode() + b'"]',
            "InvalidKubeconfig",
            "the kubeconfig is a list, not a mapping",
        ),
        "not-utf-8": (
            b"\xff\xfe" + reg.kubeconfig.encode("utf-16-le"),
            "InvalidKubeconfig",
            "the kubeconfig is not UTF-8 text: save it as UTF-8",
        ),
        "base64-twice": (
            base64.b64encode(reg.kubeconfig.encode()),
            "InvalidKubeconfig",
            "the kubeconfig is base64-encoded once more than it should be",
        ),
        "one-mebibyte": (
            padded(reg.kubeconfig, SECRET_LIMIT - 64).encode(),
            "Ready",
            "",
        ),
    }
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        for name, (data, _, _) in cases.items():
            await ws.client.create(
                SECRETS,
                {
                    "metadata": {"name": name, "namespace": ns},
                    "data": {"value": base64.b64encode(data).decode()},
                },
                namespace=ns,
            )
            await ws.cluster(ns, name, secret=name)
        for name, (_, reason, start) in cases.items():
            cluster = await wait_reason(ws, ns, name, reason)
            message = ready_of(cluster)["message"]
            if reason != "Ready":
                assert message.startswith(f"Secret {name} key value: {start}"), (name, message)
            assert message.splitlines() == [message], name
            assert reg.token not in message
            assert "BEGIN" not in message and "MII" not in message  # no PEM quoted
        await ws.cleanup()


ODD_LABELS = {
    # The longest prefix-less key and value Kubernetes allows, an empty value, and every
    # character a value may hold.
    "k" * 63: "v" * 63,
    "example.com/empty": "",
    "kokumi.example/odd": "A-b_c.9",
    "tier": "gold",
}

EVERY_OPERATOR: dict[str, Any] = {
    "matchLabels": {"example.com/empty": "", "k" * 63: "v" * 63},
    "matchExpressions": [
        {"key": "kokumi.example/odd", "operator": "In", "values": ["A-b_c.9", "other"]},
        {"key": "tier", "operator": "NotIn", "values": ["iron", ""]},
        {"key": "example.com/empty", "operator": "Exists"},
        {"key": "example.com/absent", "operator": "DoesNotExist"},
    ],
}


BAD_SELECTORS: dict[str, dict[str, Any]] = {
    "empty-in": {"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]},
    "values-on-exists": {
        "matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]
    },
    "bad-key": {"matchLabels": {"not a key!": "x"}},
    "bad-value": {"matchLabels": {"tier": "a/b"}},
    "long-value": {"matchLabels": {"tier": "v" * 64}},
    "bad-expression-key": {"matchExpressions": [{"key": "-x", "operator": "Exists"}]},
    "bad-expression-value": {
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["no spaces"]}]
    },
}


def environment_body(namespace: str, name: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Environment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterSelector": selector},
    }


async def test_odd_labels_and_a_selector_with_every_operator(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "spoke", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "odd", secret="spoke", labels=ODD_LABELS)
        await ws.cluster(ns, "plain", secret="spoke", labels={"tier": "gold"})
        await ws.client.create(
            api.ENVIRONMENTS,
            environment_body(ns, "every-operator", EVERY_OPERATOR),
            namespace=ns,
        )
        # Either the schema refuses the selector, naming the field, or the manager reports
        # InvalidSelector, naming it too.
        refused_by_schema: dict[str, str] = {}
        for name, selector in BAD_SELECTORS.items():
            try:
                await ws.client.create(
                    api.ENVIRONMENTS, environment_body(ns, name, selector), namespace=ns
                )
            except errors.Invalid as refused:
                refused_by_schema[name] = str(refused)
        for message in refused_by_schema.values():
            assert "spec.clusterSelector" in message, message

        async def environment(name: str) -> dict[str, Any]:
            return await ws.client.get(api.ENVIRONMENTS, name, namespace=ns)

        chosen = await wait_for(
            lambda: environment("every-operator"),
            lambda e: ready_of(e).get("reason") == "Ready",
            "the Environment with every operator to be Ready",
        )
        # odd is selected and deploys (plain, labelled tier=gold only, is not selected): the
        # status counts Clusters that deploy and lists only those that do not.
        status = chosen["status"]
        assert (status["selected"], status["deploying"], status["clusters"]) == (1, 1, [])
        assert ready_of(chosen)["message"] == "1 of 1 selected Clusters deploy"
        await wait_reason(ws, ns, "odd", "Ready")
        for name in BAD_SELECTORS.keys() - refused_by_schema.keys():
            refused = await wait_for(
                lambda name=name: environment(name),  # type: ignore[misc]
                lambda e: ready_of(e).get("reason") == "InvalidSelector",
                f"{name} to report InvalidSelector",
            )
            message = ready_of(refused)["message"]
            assert message.startswith("spec.clusterSelector."), message
            assert message.splitlines() == [message]
        print(f"refused by the schema: {sorted(refused_by_schema)}")
        print(f"InvalidSelector: {sorted(BAD_SELECTORS.keys() - refused_by_schema.keys())}")
        await ws.cleanup()
