"""Which containers of a pod hold its ServiceAccount's token: the UI's alone.

In proxy mode an authenticating proxy, facing the internet, runs in the UI's pod. The account's
token may read the session key and impersonate anyone, so the pod mounts no token itself
(automountServiceAccountToken: false) and the ui container alone mounts a projected one where the
in-cluster configuration reads it.
"""

from __future__ import annotations

from typing import Any

from kokumi.kube.config import SERVICE_ACCOUNT_ROOT


def token_volumes(pod: dict[str, Any]) -> set[str]:
    """The volumes of ``pod`` that carry a ServiceAccount token."""
    names = set()
    for volume in pod.get("volumes", []):
        sources = volume.get("projected", {}).get("sources", [])
        if any("serviceAccountToken" in source for source in sources):
            names.add(volume["name"])
    return names


def holders(pod: dict[str, Any]) -> list[str]:
    """The containers (init containers too) that mount a token, or anything where it goes."""
    tokens = token_volumes(pod)
    found = []
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for mount in container.get("volumeMounts", []):
            where = mount["mountPath"]
            if mount["name"] in tokens or where.startswith("/var/run/secrets/kubernetes.io"):
                found.append(container["name"])
                break
    return found


def assert_only_the_ui_holds_the_token(pod: dict[str, Any]) -> None:
    assert pod.get("automountServiceAccountToken") is False, "the kubelet mounts every container"
    assert holders(pod) == ["ui"]
    (ui,) = [c for c in pod["containers"] if c["name"] == "ui"]
    (mount,) = [m for m in ui["volumeMounts"] if m["name"] in token_volumes(pod)]
    assert mount == {"name": mount["name"], "mountPath": SERVICE_ACCOUNT_ROOT, "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    sources = volume["projected"]["sources"]
    # What the in-cluster configuration reads: the token, the cluster's CA, the namespace.
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}} in sources
    assert {
        "configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    } in sources
    field = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
    assert {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": field}]}} in sources
