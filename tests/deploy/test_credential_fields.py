"""Every field that chooses a credential is held by the Secret access policies, found by walking.

kokumi-cluster-secret-access and kokumi-cluster-source-access let an update through without access
to the Secrets only when it keeps what chooses the credential. A hand-kept list of those fields
missed one (a Cluster's ``spec.kubeconfig.context``), so these tests keep no list: they walk the
CRDs' openAPIV3Schema under ``spec``, and for every leaf (a scalar, a map, a list of scalars) make
each valid change the schema allows (another value, the field removed, another of a few valid
objects' values), valid as the real hub says with a dry run. As a user who may update the objects
but may not read the Secrets every one is refused; as one who may, every one is accepted. A field
added to a CRD later is walked too; one the example objects do not carry fails the walk until
they do. The only fields whose change needs no access are named here: FREE_TEXT.
"""

from __future__ import annotations

import copy
import functools
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, kubectl_as, run, wait_until

pytestmark = pytest.mark.usefixtures("admission_policies")

GROUP = "/apis/delivery.kokumi.dev/v1alpha1"
Path_ = tuple[str | int, ...]

# Text for people, never read to reach a cluster: its change needs no access to the Secret.
FREE_TEXT: dict[str, set[Path_]] = {"Cluster": {("description",)}, "ClusterSource": set()}

# Valid objects that between them carry every field of spec (the walk fails if one is missing).
BASES: dict[str, list[dict[str, Any]]] = {
    "Cluster": [
        {
            "connection": "Kubeconfig",
            "description": "Spoke cluster",
            "kubeconfig": {
                "secretRef": {"name": "spoke-kubeconfig", "key": "admin.conf"},
                "context": "dev",
            },
            "scope": {"namespaces": ["team-a", "team-a-jobs"], "clusterResources": True},
        },
        {"connection": "InCluster", "description": "Here"},
    ],
    "ClusterSource": [
        {
            "from": "Secrets",
            "secretSelector": {
                "matchLabels": {"kokumi.dev/kubeconfig": "true"},
                "matchExpressions": [{"key": "fleet", "operator": "In", "values": ["edge"]}],
            },
            "key": "kubeconfig",
            "contexts": "Current",
            "naming": {"trimPrefix": "kubeconfig-", "trimSuffix": "-admin"},
            "labels": {"fleet": "edge"},
            "scope": {"namespaces": ["team-a", "team-a-jobs"], "clusterResources": True},
        },
        {
            "from": "Secrets",
            "secretSelector": {"matchLabels": {"kokumi.dev/kubeconfig": "true"}},
            "naming": {"label": "crossplane.io/claim-name"},
        },
        {
            "from": "Secrets",
            "secretSelector": {"matchExpressions": [{"key": "fleet", "operator": "Exists"}]},
            "contexts": "All",
        },
        {
            "from": "ClusterAPI",
            "selector": {
                "matchLabels": {"fleet": "edge"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["dev"]}],
            },
            "labels": {"team": "a"},
        },
        {"from": "VCluster", "secretSelector": {"matchLabels": {"team": "a"}}},
    ],
}
PLURAL = {"Cluster": "clusters", "ClusterSource": "clustersources"}
CRD = {
    "Cluster": "delivery.kokumi.dev_clusters.yaml",
    "ClusterSource": "delivery.kokumi.dev_clustersources.yaml",
}
POLICY = {
    "Cluster": "kokumi-cluster-secret-access",
    "ClusterSource": "kokumi-cluster-source-access",
}
MISSING = object()


def spec_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((DEPLOY / "crds" / CRD[kind]).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]  # type: ignore[no-any-return]


def leaves(schema: dict[str, Any], path: Path_ = ()) -> Iterator[tuple[Path_, dict[str, Any]]]:
    """Every leaf under ``schema``: a scalar, a map of scalars or a list of scalars."""
    if schema.get("type") == "object" and "properties" in schema:
        for name, sub in schema["properties"].items():
            yield from leaves(sub, (*path, name))
    elif schema.get("type") == "array" and schema["items"].get("type") == "object":
        yield from leaves(schema["items"], (*path, 0))
    else:
        yield path, schema


def get(value: Any, path: Path_) -> Any:
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or len(value) <= step:
                return MISSING
        elif not isinstance(value, dict) or step not in value:
            return MISSING
        value = value[step]
    return value


def put(value: Any, path: Path_, leaf: Any) -> Any:
    """``value`` with the leaf at ``path`` set (or, with MISSING, removed); a copy."""
    value = copy.deepcopy(value)
    *parents, last = path
    here = value
    for step in parents:
        here = here[step]
    if leaf is MISSING:
        del here[last]
    else:
        here[last] = leaf
    return value


def other_values(schema: dict[str, Any], value: Any) -> list[Any]:
    """Values of ``schema`` other than ``value``, within its bounds and pattern."""
    kind = schema.get("type")
    if "enum" in schema:
        return [v for v in schema["enum"] if v != value]
    if kind == "string":
        changed = value + "x"
        assert len(changed) <= schema.get("maxLength", len(changed))
        assert re.fullmatch(schema.get("pattern", ".*"), changed), changed
        return [changed]
    if kind == "object":
        return [{**value, "other.example/x": "y"}, {k: v + "x" for k, v in value.items()}]
    if kind == "array":
        return [[*value, "other"]]
    if kind == "integer":
        return [value + 1]
    if kind == "boolean":
        return [not value]
    raise AssertionError(f"no other value for a {kind}: teach other_values")


def changed_leaves(kind: str, old: dict[str, Any], new: dict[str, Any]) -> set[Path_]:
    return {p for p, _ in leaves(spec_schema(kind)) if get(old, p) != get(new, p)}


def admin_client(hub: APIServer) -> httpx.Client:
    context = hub.ssl_context("kokumi-admin", ["system:masters"])
    return httpx.Client(base_url=hub.url, verify=context, timeout=30)


def body(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def valid(admin: httpx.Client, namespace: str, kind: str, spec: dict[str, Any]) -> Any:
    """The spec as the hub would store it (its defaults written out), or None where invalid."""
    url = f"{GROUP}/namespaces/{namespace}/{PLURAL[kind]}"
    answer = admin.post(url, params={"dryRun": "All"}, json=body(kind, "probe", spec))
    if answer.status_code == 422:
        return None
    assert answer.status_code == 201, answer.text
    return answer.json()["spec"]


def candidates(
    admin: httpx.Client, namespace: str, kind: str
) -> list[tuple[Path_, dict[str, Any], dict[str, Any]]]:
    """(leaf, old spec, new spec) for every valid change of every leaf, as the hub stores them."""
    bases = [valid(admin, namespace, kind, base) for base in BASES[kind]]
    assert None not in bases, "every base must be valid"
    found = []
    for path, schema in leaves(spec_schema(kind)):
        changes = []
        for old in bases:
            value = get(old, path)
            if value is MISSING:
                continue
            changes += [(old, put(old, path, v)) for v in other_values(schema, value)]
            changes.append((old, put(old, path, MISSING)))
            changes += [(old, new) for new in bases if get(new, path) != value]
        kept = []
        for old, new in changes:
            stored = valid(admin, namespace, kind, new)
            if stored is not None and stored != old:
                kept.append((old, stored))
        assert kept, f"{kind} spec.{'.'.join(map(str, path))}: no base carries it, add one"
        found += [(path, old, new) for old, new in kept]
    return found


def reads_a_secret(kind: str, spec: dict[str, Any]) -> bool:
    """Whether the policy is about the object at all: an InCluster Cluster names no Secret."""
    return kind == "ClusterSource" or spec["connection"] == "Kubeconfig"


def settled(kubectl: Any, namespace: str, verb: str, what: str, answer: str) -> bool | None:
    """True once ``kubectl auth can-i`` gives ``answer``: RBAC reaches the authorizer late."""
    said = kubectl("-n", namespace, "auth", "can-i", verb, what, check=False)
    return True if said.stdout.strip() == answer else None


@pytest.fixture
def users(hub: APIServer, namespace: str) -> Iterator[dict[str, httpx.Client]]:
    """Clients as two users who may update Clusters and ClusterSources: one reads no Secret, one
    may list and get every Secret of ``namespace``."""
    admin = hub.admin_kubeconfig
    names = {"without": f"no-secrets-{uuid.uuid4().hex[:6]}",
             "with": f"secrets-{uuid.uuid4().hex[:6]}"}  # fmt: skip
    run(admin, "-n", namespace, "create", "role", "author", "--verb=get,list,create,update,patch",
        "--resource=clusters.delivery.kokumi.dev,clustersources.delivery.kokumi.dev")  # fmt: skip
    run(admin, "-n", namespace, "create", "role", "secrets", "--verb=get,list",
        "--resource=secrets")  # fmt: skip
    for user in names.values():
        run(admin, "-n", namespace, "create", "rolebinding", f"author-{user}", "--role=author",
            f"--user={user}")  # fmt: skip
    run(admin, "-n", namespace, "create", "rolebinding", "secrets", "--role=secrets",
        f"--user={names['with']}")  # fmt: skip
    for who, user in names.items():
        kubectl = kubectl_as(hub.kubeconfig_for(user))
        for verb, what, answer in (
            ("update", "clustersources.delivery.kokumi.dev", "yes"),
            ("update", "clusters.delivery.kokumi.dev", "yes"),
            ("get", "secrets", "yes" if who == "with" else "no"),
        ):
            wait_until(
                functools.partial(settled, kubectl, namespace, verb, what, answer),
                f"{user} {verb} {what}: {answer}",
            )
    clients = {
        who: httpx.Client(base_url=hub.url, verify=hub.ssl_context(user), timeout=30)
        for who, user in names.items()
    }
    yield clients
    for client in clients.values():
        client.close()


def update(
    admin: httpx.Client, as_user: httpx.Client, url: str, spec: dict[str, Any]
) -> httpx.Response:
    current = admin.get(url).json()
    return as_user.put(url, json={**current, "spec": spec})


def restore(admin: httpx.Client, url: str, spec: dict[str, Any]) -> None:
    current = admin.get(url).json()
    assert admin.put(url, json={**current, "spec": spec}).status_code == 200


@pytest.mark.parametrize("kind", ["Cluster", "ClusterSource"])
def test_every_change_of_what_chooses_a_credential_needs_the_secrets(
    hub: APIServer, namespace: str, users: dict[str, httpx.Client], kind: str
) -> None:
    with admin_client(hub) as admin:
        walked = candidates(admin, namespace, kind)
        names: dict[str, str] = {}
        refused: set[Path_] = set()
        for path, old, new in walked:
            key = repr(sorted(old.items()))
            if key not in names:
                names[key] = f"o-{len(names)}"
                created = admin.post(f"{GROUP}/namespaces/{namespace}/{PLURAL[kind]}",
                                     json=body(kind, names[key], old))  # fmt: skip
                assert created.status_code == 201, created.text
            url = f"{GROUP}/namespaces/{namespace}/{PLURAL[kind]}/{names[key]}"
            changed = changed_leaves(kind, old, new)
            field = "spec." + ".".join(map(str, path))
            # A change beyond the walked leaves (a second list item) is no free text either.
            needs = reads_a_secret(kind, new) and (not changed or bool(changed - FREE_TEXT[kind]))

            answer = update(admin, users["without"], url, new)
            if needs:
                assert answer.status_code == 403, f"{field}: {old} -> {new} was let through"
                assert POLICY[kind] in answer.json()["message"], answer.text
                refused.add(path)
            else:
                assert answer.status_code == 200, f"{field}: {answer.text}"
                restore(admin, url, old)

            # Who may read the Secrets may make every change.
            answer = update(admin, users["with"], url, new)
            assert answer.status_code == 200, f"{field}: {answer.text}"
            restore(admin, url, old)

        # Every field but the free text chooses the credential: some change of it was refused.
        walked_paths = {path for path, _ in leaves(spec_schema(kind))}
        assert walked_paths - FREE_TEXT[kind] <= refused


@pytest.mark.parametrize("kind", ["Cluster", "ClusterSource"])
def test_labels_annotations_and_free_text_need_no_secret(
    hub: APIServer, namespace: str, users: dict[str, httpx.Client], kind: str
) -> None:
    with admin_client(hub) as admin:
        spec = BASES[kind][0]
        created = admin.post(f"{GROUP}/namespaces/{namespace}/{PLURAL[kind]}",
                             json=body(kind, "kept", spec))  # fmt: skip
        assert created.status_code == 201, created.text
        url = f"{GROUP}/namespaces/{namespace}/{PLURAL[kind]}/kept"
        current = admin.get(url).json()
        current["metadata"]["labels"] = {"fleet": "edge"}
        current["metadata"]["annotations"] = {"team.example/owner": "platform"}
        answer = users["without"].put(url, json=current)
        assert answer.status_code == 200, answer.text
        for path in FREE_TEXT[kind]:
            answer = update(admin, users["without"], url, put(current["spec"], path, "Edited"))
            assert answer.status_code == 200, answer.text
