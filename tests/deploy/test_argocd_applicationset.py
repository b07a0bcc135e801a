"""ApplicationSets over the Secrets Kokumi's manager writes, read by Argo CD's own generator.

Each test runs a manager on the hub, lets it register Clusters with a per-test Argo CD namespace,
and runs ApplicationSets through ``argocd-appset-clusters`` (Argo CD v3.6.1's cluster generator
and renderer, tests/support/appset.py): what is matched, what the template sees, and what a
handover does to the generated Applications, as Argo CD itself computes them.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest

from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.core.registry.carry import Carry, Carrying, environment_label, is_reserved
from kokumi.core.registry.ownership import ClusterRef
from kokumi.runtime.options import Options
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.appset import (
    EXAMPLES,
    GeneratorError,
    example,
    generate,
    readme_example,
    with_selector,
)
from tests.support.manager import (
    Workspace,
    holder_labels,
    manager,
    wait_for,
    wait_reason,
    workspace,
)
from tests.support.paths import REPO

RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"


def servers(reg: Registration) -> tuple[str, str]:
    """Two servers of one spoke: two spellings of its address are two clusters to Argo CD."""
    first = reg.server.rstrip("/")
    return first, first.replace("127.0.0.1", "localhost")


async def registered(ws: Workspace, namespace: str, name: str) -> dict[str, Any]:
    """The Argo CD Secret ``namespace/name`` holds, once the manager has written it."""
    secrets: list[dict[str, Any]] = await wait_for(
        ws.argocd_secrets,
        lambda items: any(holder_labels(s) == (namespace, name) for s in items),
        f"an Argo CD Secret held by {namespace}/{name}",
    )
    return next(s for s in secrets if holder_labels(s) == (namespace, name))


async def selected_cluster(
    ws: Workspace,
    reg: Registration,
    server: str,
    *,
    name: str = "spoke",
    labels: dict[str, str] | None = None,
    environment: str = "edge",
) -> str:
    """A namespace with a Kubeconfig Cluster of ``server`` and an Environment selecting it."""
    ns = await ws.namespace()
    await ws.kubeconfig_secret(ns, f"{name}-kubeconfig", reg.variant(server=server))
    await ws.cluster(ns, name, secret=f"{name}-kubeconfig", labels={"team": "a", **(labels or {})})
    await ws.environment(ns, environment, {"team": "a"})
    return ns


def data_of(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


async def test_the_generator_selects_kokumis_secrets_by_holder_and_by_server(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """Argo CD reads what the manager wrote: name, server and labels per Secret; a selector on
    Kokumi's labels picks one, the generator-level selector picks by server, values pass."""
    one, two = servers(spoke_kubeconfig)
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns_one = await selected_cluster(ws, spoke_kubeconfig, one)
        ns_two = await selected_cluster(ws, spoke_kubeconfig, two)
        secret = await registered(ws, ns_one, "spoke")
        await registered(ws, ns_two, "spoke")

        async def run(application_set: dict[str, Any]) -> Any:
            return await generate(argocd_appset_clusters, hub, ws.argocd, application_set)

        base = example("applicationset.yaml")
        every = await run(base)
        assert every.servers == sorted([one, two])

        by_holder = await run(
            with_selector(base, {"matchLabels": {argocd.LABEL_CLUSTER_NAMESPACE: ns_one}})
        )
        (cluster,) = by_holder.clusters
        assert cluster["server"] == one == data_of(secret, "server")
        assert cluster["name"] == argocd.cluster_name(ClusterRef(ns_one, "spoke"), one)
        assert cluster["name"] == data_of(secret, "name")
        assert cluster["nameNormalized"] == cluster["name"]  # already a DNS name
        assert cluster["project"] == ""  # Kokumi writes no project
        assert cluster["metadata"]["labels"] == secret["metadata"]["labels"]

        # The generator-level selector filters the generated params, URLs included.
        by_server = copy.deepcopy(base)
        by_server["spec"]["generators"][0]["selector"] = {"matchLabels": {"server": two}}
        assert (await run(by_server)).servers == [two]

        valued = with_selector(base, {"matchLabels": {argocd.LABEL_CLUSTER_NAMESPACE: ns_two}})
        valued["spec"]["generators"][0]["clusters"]["values"] = {"revision": "v1-{{ .server }}"}
        (cluster,) = (await run(valued)).clusters
        assert cluster["values"] == {"revision": f"v1-{two}"}
        await ws.cleanup()


async def test_the_example_names_each_application_after_kokumis_server_hash(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """examples/argocd/applicationset.yaml, rendered by Argo CD's renderer (sprig's sha256sum):
    one Application per server, named with the 16 hex digits Kokumi names the Secret with."""
    one, two = servers(spoke_kubeconfig)
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        for server in (one, two):
            ns = await selected_cluster(ws, spoke_kubeconfig, server)
            await registered(ws, ns, "spoke")
        generated = await generate(
            argocd_appset_clusters, hub, ws.argocd, example("applicationset.yaml")
        )
        assert len(generated.applications) == 2
        for server in (one, two):
            app = generated.application(f"guestbook-{argocd.server_hash(server)}")
            assert argocd.secret_name(server) == f"kokumi-{argocd.server_hash(server)}"
            assert app["spec"]["destination"] == {"server": server, "namespace": "guestbook"}
            assert app["metadata"]["namespace"] == "argocd"
        await ws.cleanup()


async def test_a_handover_keeps_the_generated_application_and_moves_the_holder_labels(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """Two Clusters, one server: the holder goes, the second takes the Secret over in place.
    The generator still yields one cluster with the same server; its labels and name are the
    new holder's, and the example's Application keeps its name and destination."""
    server, _ = servers(spoke_kubeconfig)
    application_set = example("applicationset.yaml")
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        first = await selected_cluster(ws, spoke_kubeconfig, server)
        held = await registered(ws, first, "spoke")
        second = await selected_cluster(ws, spoke_kubeconfig, server)
        await wait_reason(ws, second, "spoke", "ClusterConflict")
        before = await generate(argocd_appset_clusters, hub, ws.argocd, application_set)
        (cluster,) = before.clusters
        assert cluster["metadata"]["labels"][argocd.LABEL_CLUSTER_NAMESPACE] == first

        await ws.client.delete(api.CLUSTERS, "spoke", namespace=first)
        taken = await registered(ws, second, "spoke")
        assert taken["metadata"]["uid"] == held["metadata"]["uid"], "handed over in place"
        after = await generate(argocd_appset_clusters, hub, ws.argocd, application_set)
        (cluster,) = after.clusters
        assert cluster["server"] == server
        assert cluster["metadata"]["labels"][argocd.LABEL_CLUSTER_NAMESPACE] == second
        assert cluster["name"] == argocd.cluster_name(ClusterRef(second, "spoke"), server)
        assert after.applications == before.applications
        await ws.cleanup()


async def test_the_set_empties_when_the_last_cluster_lets_go_and_bad_templates_fail(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """The failing paths, as Argo CD reports them: a template indexing the annotations of a
    Secret that has none fails, with or without ``missingkey=error``; with nobody left holding
    the server the Secret is deleted and the generator yields nothing (the Applications would
    go)."""
    server, _ = servers(spoke_kubeconfig)
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await selected_cluster(ws, spoke_kubeconfig, server)
        await registered(ws, ns, "spoke")
        application_set = example("applicationset.yaml")
        # Kokumi's Secret has no annotation here: docs/argocd.md's warning, as Argo CD says it.
        application_set["spec"]["template"]["spec"]["destination"]["namespace"] = (
            '{{ index .metadata.annotations "example.com/region" }}'
        )
        with pytest.raises(GeneratorError, match='no entry for key "annotations"'):
            await generate(argocd_appset_clusters, hub, ws.argocd, application_set)
        application_set["spec"]["goTemplateOptions"] = []
        with pytest.raises(GeneratorError, match="index of untyped nil"):
            await generate(argocd_appset_clusters, hub, ws.argocd, application_set)

        await ws.client.delete(api.CLUSTERS, "spoke", namespace=ns)
        await wait_for(ws.argocd_secrets, lambda items: items == [], "the Secret to go")
        gone = await generate(
            argocd_appset_clusters, hub, ws.argocd, example("applicationset.yaml")
        )
        assert gone.clusters == []
        assert gone.applications == []
        await ws.cleanup()


async def test_the_harness_refuses_a_generator_it_does_not_run(
    hub: APIServer, argocd_appset_clusters: Path
) -> None:
    """A generator the harness does not wire in is refused by name, never skipped."""
    application_set = example("applicationset.yaml")
    application_set["spec"]["generators"] = [
        {"git": {"repoURL": "https://example.com/x.git", "revision": "HEAD"}}
    ]
    with pytest.raises(GeneratorError, match="only the clusters and list generators"):
        await generate(argocd_appset_clusters, hub, "argocd", application_set)


# --- What the manager carries onto the Secret: Cluster labels and annotations, Environments ----


def carrying(ws: Workspace, labels: str = "fleet", annotations: str = "") -> Options:
    """The manager's options with ``--carry-labels=labels --carry-annotations=annotations``."""
    carry = Carrying(labels=Carry.parse([labels]), annotations=Carry.parse([annotations]))
    return ws.options(keep_in_cluster=False, carry=carry)


async def relabel(
    ws: Workspace,
    namespace: str,
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    name: str = "spoke",
) -> None:
    """Merge-patch the Cluster's labels or annotations (None removes a key)."""
    metadata: dict[str, Any] = {}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    await ws.client.patch_merge(api.CLUSTERS, name, {"metadata": metadata}, namespace=namespace)


def not_kokumis(annotations: dict[str, str]) -> dict[str, str]:
    """The annotations beside Kokumi's own records of what it carried."""
    return {k: v for k, v in annotations.items() if not is_reserved(k)}


async def secret_labelled(
    ws: Workspace, namespace: str, key: str, value: str | None
) -> dict[str, Any]:
    """The Secret held from ``namespace``, once its label ``key`` is ``value`` (None: absent)."""
    secrets: list[dict[str, Any]] = await wait_for(
        ws.argocd_secrets,
        lambda items: any(
            holder_labels(s)[0] == namespace and s["metadata"]["labels"].get(key) == value
            for s in items
        ),
        f"the Secret held from {namespace} to have {key}={value}",
    )
    return next(s for s in secrets if holder_labels(s)[0] == namespace)


async def test_a_carried_label_selects_and_a_label_edit_changes_the_set_in_place(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """examples/argocd/applicationset-by-label.yaml over two clusters, fleet edge and core: the
    edge one matches; relabelling moves the set, the Secrets updated in place; a label that is
    not carried selects nothing; the safe settings leave the Applications without finalizer."""
    one, two = servers(spoke_kubeconfig)
    application_set = example("applicationset-by-label.yaml")
    async with workspace(hub) as ws, manager(hub, carrying(ws)):
        ns_one = await selected_cluster(ws, spoke_kubeconfig, one, labels={"fleet": "edge"})
        ns_two = await selected_cluster(ws, spoke_kubeconfig, two, labels={"fleet": "core"})
        first = await secret_labelled(ws, ns_one, "fleet", "edge")
        second = await secret_labelled(ws, ns_two, "fleet", "core")
        assert "team" not in first["metadata"]["labels"], "only what is named is carried"

        async def run(application_set: dict[str, Any]) -> Any:
            return await generate(argocd_appset_clusters, hub, ws.argocd, application_set)

        generated = await run(application_set)
        assert generated.servers == [one]
        short = await run(readme_example())  # README's, the same selection written short
        assert short.servers == [one]
        assert [(a["metadata"]["name"], a["spec"]["destination"]) for a in short.applications] == [
            (a["metadata"]["name"], a["spec"]["destination"]) for a in generated.applications
        ]
        app = generated.application(f"guestbook-{argocd.server_hash(one)}")
        assert app["spec"]["destination"]["server"] == one
        assert RESOURCES_FINALIZER not in (app["metadata"].get("finalizers") or [])
        assert (
            await run(with_selector(application_set, {"matchLabels": {"team": "a"}}))
        ).servers == []

        await relabel(ws, ns_two, {"fleet": "edge"})
        edited = await secret_labelled(ws, ns_two, "fleet", "edge")
        assert edited["metadata"]["uid"] == second["metadata"]["uid"]
        assert edited["data"] == second["data"], "a label edit changes only the labels"
        assert (await run(application_set)).servers == sorted([one, two])

        await relabel(ws, ns_one, {"fleet": None})
        dropped = await secret_labelled(ws, ns_one, "fleet", None)
        assert dropped["metadata"]["uid"] == first["metadata"]["uid"]
        assert (await run(application_set)).servers == [two]
        await ws.cleanup()


async def test_an_environment_label_selects_the_clusters_an_environment_selects(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """examples/argocd/applicationset-by-environment.yaml: the clusters of Environment edge,
    whichever Clusters it selects now; an Environment whose name is too long for a label key
    is selected by its documented key."""
    one, two = servers(spoke_kubeconfig)
    application_set = example("applicationset-by-environment.yaml")
    long_name = "edge-" + "x" * 70
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns_one = await selected_cluster(ws, spoke_kubeconfig, one, environment="edge")
        ns_two = await selected_cluster(ws, spoke_kubeconfig, two, environment="core")
        await ws.environment(ns_two, long_name, {"team": "a"})
        edge_label = environment_label("edge")
        await secret_labelled(ws, ns_one, edge_label, "true")
        held = await secret_labelled(ws, ns_two, environment_label(long_name), "true")

        async def run(application_set: dict[str, Any]) -> Any:
            return await generate(argocd_appset_clusters, hub, ws.argocd, application_set)

        generated = await run(application_set)
        assert generated.servers == [one]
        (app,) = generated.applications
        assert app["metadata"]["name"] == f"guestbook-edge-{argocd.server_hash(one)}"
        long_selector = {"matchLabels": {environment_label(long_name): "true"}}
        assert (await run(with_selector(application_set, long_selector))).servers == [two]

        # Environment edge of the second namespace: its Cluster joins, its Secret kept.
        await ws.environment(ns_two, "edge", {"team": "a"})
        joined = await secret_labelled(ws, ns_two, edge_label, "true")
        assert joined["metadata"]["uid"] == held["metadata"]["uid"]
        assert (await run(application_set)).servers == sorted([one, two])
        # Edge of the first namespace selects nothing any more: its Cluster leaves the set.
        # Environment "all" still selects it, so the Secret stays, updated in place.
        await ws.environment(ns_one, "all", {"team": "a"})
        await secret_labelled(ws, ns_one, environment_label("all"), "true")
        await ws.client.patch_merge(
            api.ENVIRONMENTS,
            "edge",
            {"spec": {"clusterSelector": {"matchLabels": {"team": "nobody"}}}},
            namespace=ns_one,
        )
        await secret_labelled(ws, ns_one, edge_label, None)
        assert (await run(application_set)).servers == [two]
        await ws.cleanup()


async def test_a_template_reads_a_carried_annotation_and_label(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """examples/argocd/applicationset-templated.yaml: the fleet label names the destination
    namespace, the carried annotation sets the region (its default where a Cluster carries
    none); an annotation not named is not there, and an annotation edit reaches the
    Application."""
    one, two = servers(spoke_kubeconfig)
    application_set = example("applicationset-templated.yaml")
    async with (
        workspace(hub) as ws,
        manager(hub, carrying(ws, "fleet", "example.com/*")),
    ):
        ns_one = await selected_cluster(ws, spoke_kubeconfig, one, labels={"fleet": "edge"})
        await relabel(
            ws, ns_one, annotations={"example.com/region": "eu-west", "other.io/note": "x"}
        )
        ns_two = await selected_cluster(ws, spoke_kubeconfig, two, labels={"fleet": "core"})
        await secret_labelled(ws, ns_two, "fleet", "core")
        held = await wait_for(
            ws.argocd_secrets,
            lambda items: any(
                (s["metadata"].get("annotations") or {}).get("example.com/region") == "eu-west"
                for s in items
            ),
            "the region annotation carried",
        )
        assert len(held) == 2

        async def run() -> Any:
            return await generate(argocd_appset_clusters, hub, ws.argocd, application_set)

        generated = await run()
        assert generated.servers == sorted([one, two])
        annotated = next(c for c in generated.clusters if c["server"] == one)
        assert not_kokumis(annotated["metadata"]["annotations"]) == {
            "example.com/region": "eu-west"
        }
        bare = next(c for c in generated.clusters if c["server"] == two)
        assert not_kokumis(bare["metadata"].get("annotations") or {}) == {}
        for server, fleet, region in ((one, "edge", "eu-west"), (two, "core", "unknown")):
            app = generated.application(f"guestbook-{argocd.server_hash(server)}")
            assert app["spec"]["destination"] == {
                "server": server,
                "namespace": f"guestbook-{fleet}",
            }
            assert app["spec"]["source"]["helm"]["valuesObject"] == {"region": region}

        await relabel(ws, ns_one, annotations={"example.com/region": "eu-north"})
        edited = await wait_for(
            run,
            lambda g: (
                g.application(f"guestbook-{argocd.server_hash(one)}")["spec"]["source"]["helm"][
                    "valuesObject"
                ]
                == {"region": "eu-north"}
            ),
            "the edited annotation to reach the Application",
        )
        assert len(edited.applications) == 2
        await ws.cleanup()


async def test_at_a_handover_the_secret_takes_the_new_holders_carried_labels(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    argocd_appset_clusters: Path,
) -> None:
    """Two Clusters of one server, both fleet edge, owned by different teams: the holder is
    deleted, the second takes over in place; the generator still yields one cluster for the
    server, with the new holder's carried labels, and the same Application."""
    server, _ = servers(spoke_kubeconfig)
    application_set = example("applicationset-by-label.yaml")
    async with workspace(hub) as ws, manager(hub, carrying(ws, "fleet,example.com/*")):
        first = await selected_cluster(
            ws, spoke_kubeconfig, server, labels={"fleet": "edge", "example.com/owner": "a"}
        )
        held = await secret_labelled(ws, first, "example.com/owner", "a")
        second = await selected_cluster(
            ws, spoke_kubeconfig, server, labels={"fleet": "edge", "example.com/owner": "b"}
        )
        await wait_reason(ws, second, "spoke", "ClusterConflict")
        before = await generate(argocd_appset_clusters, hub, ws.argocd, application_set)
        (cluster,) = before.clusters
        assert cluster["metadata"]["labels"]["example.com/owner"] == "a"

        await ws.client.delete(api.CLUSTERS, "spoke", namespace=first)
        taken = await secret_labelled(ws, second, "example.com/owner", "b")
        assert taken["metadata"]["uid"] == held["metadata"]["uid"], "handed over in place"
        after = await generate(argocd_appset_clusters, hub, ws.argocd, application_set)
        (cluster,) = after.clusters
        assert cluster["server"] == server
        assert cluster["metadata"]["labels"]["example.com/owner"] == "b"
        assert cluster["metadata"]["labels"][argocd.LABEL_CLUSTER_NAMESPACE] == second
        assert after.applications == before.applications
        await ws.cleanup()


def test_every_example_is_documented_run_here_and_safe() -> None:
    """Each ApplicationSet of examples/argocd is linked from docs/argocd.md, run through Argo
    CD's generator by a test of this file, and written as the docs advise: by server, named
    after the server's hash, with the settings that keep Applications and what they deployed."""
    files = sorted(path.name for path in EXAMPLES.glob("applicationset*.yaml"))
    assert len(files) == 4, files
    doc = (REPO / "docs" / "argocd.md").read_text()
    this = Path(__file__).read_text()
    for name in files:
        assert f"examples/argocd/{name}" in doc, name
        assert f'example("{name}")' in this, name
        spec = example(name)["spec"]
        assert spec["goTemplate"] is True
        template = spec["template"]
        assert template["metadata"]["name"].endswith("-{{ .server | sha256sum | trunc 16 }}")
        assert "finalizers" not in template["metadata"], name
        assert template["spec"]["destination"]["server"] == "{{ .server }}"
        assert "name" not in template["spec"]["destination"]
        assert spec["syncPolicy"] == {
            "applicationsSync": "create-update",
            "preserveResourcesOnDeletion": True,
        }
