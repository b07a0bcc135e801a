"""kokumi-object-limits: a tenant's Clusters, Environments and ClusterSources stay small.

Labels and annotations are counted and measured in bytes (UTF-8, keys and values) by the real API
server, at the bounds and one past them, on create and on update, for each of the three kinds. The
bounds are read from the policy and must be the ones docs/operations.md states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml

from kokumi.core import limits
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import POLICIES, apply, run, wait_object_limits_enforced, wait_until
from tests.support.paths import REPO

pytestmark = pytest.mark.usefixtures("admission_policies")

GROUP = "/apis/delivery.kokumi.dev/v1alpha1"
SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "Cluster": ("clusters", {"connection": "InCluster"}),
    "Environment": ("environments", {"clusterSelector": {}}),
    "ClusterSource": ("clustersources", {"from": "ClusterAPI"}),
}


def bounds() -> dict[str, int]:
    policy = next(yaml.safe_load_all((POLICIES / "kokumi-object-limits.yaml").read_text()))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    return {name: int(variables[name]) for name in
            ("labelsMax", "labelBytesMax", "annotationsMax", "annotationBytesMax")}  # fmt: skip


B = bounds()


def test_the_bounds_are_the_documented_ones() -> None:
    operations = (REPO / "docs" / "operations.md").read_text()
    assert (
        f"at most {B['labelsMax']} labels of at most {B['labelBytesMax']} bytes in all"
        in operations
    )
    assert (
        f"at most {B['annotationsMax']} annotations of at most {B['annotationBytesMax']} bytes"
        " in all" in operations
    )
    # The door and the manager hold one set of numbers: the manager reports as ObjectTooLarge
    # exactly what the policy would have refused.
    assert (B["labelsMax"], B["labelBytesMax"], B["annotationsMax"], B["annotationBytesMax"]) == (
        limits.LABELS_MAX, limits.LABEL_BYTES_MAX, limits.ANNOTATIONS_MAX,
        limits.ANNOTATION_BYTES_MAX,
    )  # fmt: skip


def label(i: int, size: int) -> tuple[str, str]:
    """A valid label of exactly ``size`` bytes (key and value), 6 to 380, unique by ``i``."""
    name, rest = f"l{i:05d}", size - 6
    value = min(rest, 63)
    rest -= value
    more = min(rest, 57)
    rest -= more
    if rest == 1:  # a prefix is at least a character and the slash
        value, rest = value - 1, 2
    key = name + "n" * more
    if rest:
        prefix = ["p"] * (rest - 1)
        for dot in range(50, rest - 2, 51):  # DNS labels of at most 50 characters
            prefix[dot] = "."
        key = "".join(prefix) + "/" + key
    pair = (key, "v" * value)
    assert len(pair[0]) + len(pair[1]) == size
    return pair


def labels(count: int, total: int) -> dict[str, str]:
    sizes = [total // count + (1 if i < total % count else 0) for i in range(count)]
    return dict(label(i, size) for i, size in enumerate(sizes))


def annotated(count: int, total: int, filler: str = "v") -> dict[str, str]:
    """``count`` annotations of ``total`` bytes in UTF-8; ``filler`` may be a multi-byte letter."""
    keys = [f"a{i:03d}.example/a" for i in range(count)]
    rest = total - sum(len(k) for k in keys)
    width = len(filler.encode())
    values = ["" for _ in keys]
    values[0] = filler * (rest // width) + "v" * (rest % width)
    out = dict(zip(keys, values, strict=True))
    assert sum(len(k.encode()) + len(v.encode()) for k, v in out.items()) == total
    return out


@pytest.fixture
def admin(hub: APIServer) -> Iterator[httpx.Client]:
    context = hub.ssl_context("kokumi-admin", ["system:masters"])
    with httpx.Client(base_url=hub.url, verify=context, timeout=60) as client:
        yield client


def create(
    admin: httpx.Client, namespace: str, kind: str, name: str, metadata: dict[str, Any]
) -> httpx.Response:
    plural, spec = SPECS[kind]
    return admin.post(
        f"{GROUP}/namespaces/{namespace}/{plural}",
        json={
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, **metadata},
            "spec": spec,
        },
    )


def refused(answer: httpx.Response, *says: str) -> str:
    assert answer.status_code == 422, answer.text
    message: str = answer.json()["message"]
    assert "ValidatingAdmissionPolicy 'kokumi-object-limits'" in message, message
    for text in says:
        assert text in message, message
    return message


@pytest.mark.parametrize("kind", list(SPECS))
def test_labels_past_the_bounds_are_refused_and_at_them_accepted(
    admin: httpx.Client, namespace: str, kind: str
) -> None:
    most, most_bytes = B["labelsMax"], B["labelBytesMax"]
    how = f"carries at most {most} labels of at most {most_bytes} bytes in all; remove labels"
    answer = create(admin, namespace, kind, "many", {"labels": labels(most + 1, (most + 1) * 8)})
    refused(answer, f"{kind} {namespace}/many has {most + 1} labels: a Cluster", how)
    answer = create(admin, namespace, kind, "long", {"labels": labels(most, most_bytes + 1)})
    refused(answer, f"has {most} labels of {most_bytes + 1} bytes (keys and values)", how)
    # Many more: refused by the count, at no cost of measuring them.
    answer = create(admin, namespace, kind, "huge", {"labels": labels(20000, 20000 * 10)})
    refused(answer, "has 20000 labels: a Cluster", how)

    at = create(admin, namespace, kind, "at", {"labels": labels(most, most_bytes)})
    assert at.status_code == 201, at.text
    # An update that adds a label past a bound is refused; one that drops one is not.
    plural = SPECS[kind][0]
    url = f"{GROUP}/namespaces/{namespace}/{plural}/at"
    current = admin.get(url).json()
    grown = {**current["metadata"]["labels"], "extra": "x"}
    answer = admin.put(url, json={**current, "metadata": {**current["metadata"], "labels": grown}})
    refused(answer, f"has {most + 1} labels")
    fewer = dict(list(current["metadata"]["labels"].items())[1:])
    answer = admin.put(url, json={**current, "metadata": {**current["metadata"], "labels": fewer}})
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("kind", list(SPECS))
def test_annotations_past_the_bounds_are_refused_and_at_them_accepted(
    admin: httpx.Client, namespace: str, kind: str
) -> None:
    most, most_bytes = B["annotationsMax"], B["annotationBytesMax"]
    how = f"carries at most {most} annotations of at most {most_bytes} bytes in all"
    answer = create(admin, namespace, kind, "many",
                    {"annotations": annotated(most + 1, 2000)})  # fmt: skip
    refused(answer, f"has {most + 1} annotations: a", how, "kubectl apply --server-side")
    # Bytes, not characters: é is two bytes in UTF-8.
    wide = annotated(most, most_bytes + 1, filler="é")
    assert sum(len(k) + len(v) for k, v in wide.items()) <= most_bytes
    answer = create(admin, namespace, kind, "wide", {"annotations": wide})
    refused(answer, f"has {most} annotations of {most_bytes + 1} bytes (keys and values)", how)

    at = create(admin, namespace, kind, "at", {"annotations": annotated(most, most_bytes)})
    assert at.status_code == 201, at.text


@pytest.fixture
def unbound(hub: APIServer) -> Iterator[Callable[[], None]]:
    """Take kokumi-object-limits' binding away, for objects made before the policy; ``rebind``
    (the fixture's value) puts it back and waits until it is enforced, as does the teardown."""
    run(hub.admin_kubeconfig, "delete", "validatingadmissionpolicybinding",
        "kokumi-object-limits")  # fmt: skip
    bound = False

    def rebind() -> None:
        nonlocal bound
        apply(hub, POLICIES / "kokumi-object-limits.yaml")
        wait_object_limits_enforced(hub)
        bound = True

    try:
        yield rebind
    finally:
        if not bound:
            rebind()


def test_an_object_made_before_the_policy_may_still_lose_entries(
    hub: APIServer, admin: httpx.Client, namespace: str, unbound: Callable[[], None]
) -> None:
    most = B["labelsMax"]
    many = labels(most + 6, (most + 6) * 8)
    url = f"{GROUP}/namespaces/{namespace}/clusters/old"

    def made() -> bool | None:
        answer = create(admin, namespace, "Cluster", "old",
                        {"labels": many, "finalizers": ["example.com/keep"]})  # fmt: skip
        return True if answer.status_code == 201 else None

    wait_until(made, "the Cluster past the bounds is made without the binding")
    unbound()
    current = admin.get(url).json()
    meta = current["metadata"]
    # Adding, or changing a value, is refused; dropping labels and the finalizer is not.
    grown = admin.put(url, json={**current, "metadata": {**meta, "labels": {**many, "x": "y"}}})
    refused(grown, f"has {most + 7} labels")
    changed = {**many, next(iter(many)): "other"}
    refused(admin.put(url, json={**current, "metadata": {**meta, "labels": changed}}))
    fewer = dict(list(many.items())[1:])
    answer = admin.put(url, json={**current, "metadata": {**meta, "labels": fewer}})
    assert answer.status_code == 200, answer.text
    current = answer.json()
    answer = admin.put(url, json={**current, "metadata": {**current["metadata"], "finalizers": []}})
    assert answer.status_code == 200, answer.text
