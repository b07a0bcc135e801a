"""`kokumi cluster remove | label`, `list -l`, `-o yaml|json|name`, `--version` and the help text,
as a user runs them: processes on the real hub, as the user of a kubeconfig with their own RBAC.
"""

from __future__ import annotations

import argparse
import functools
import json
import tomllib
from pathlib import Path

import pytest
import trio
import yaml

from kokumi.cmd.cluster.label import Change, change_of, patch_of
from kokumi.cmd.cluster.remove import goes_with
from kokumi.cmd.root import parser
from kokumi.core import api
from kokumi.kube.errors import NotFound
from kokumi.kube.resources import SECRETS
from kokumi.objects import Resource
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.cli import Run, kokumi, one_error_line, user_with
from tests.support.manager import manager, wait_for, wait_reason, workspace

CLUSTERS = "clusters.delivery.kokumi.dev"


async def kokumi_async(*args: str, hub: Path | None = None, stdin: str = "") -> Run:
    return await trio.to_thread.run_sync(functools.partial(kokumi, *args, hub=hub, stdin=stdin))


def in_cluster(kubectl: Kubectl, hub: APIServer, namespace: str, name: str, **labels: str) -> None:
    """A Cluster that needs no Secret: what label and list are about is its metadata."""
    document = {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"connection": "InCluster"},
    }
    path = hub.admin_kubeconfig.parent / f"cluster-{namespace}-{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    kubectl(hub, "apply", "-f", str(path))


def labels_of(kubectl: Kubectl, hub: APIServer, namespace: str, name: str) -> dict[str, str]:
    shown = kubectl(hub, "get", CLUSTERS, name, "-n", namespace, "-o", "json").stdout
    return dict(json.loads(shown)["metadata"].get("labels") or {})


# --- remove -------------------------------------------------------------------------------------


async def test_remove_says_what_goes_asks_then_the_secret_and_the_registration_go(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await ws.environment(ns, "edge", {"fleet": "edge"})  # what makes it registered
        added = await kokumi_async(
            "cluster", "add", "spoke", "-n", ns, "--kubeconfig", str(spoke_kubeconfig.path),
            "--label", "fleet=edge", hub=hub.admin_kubeconfig,
        )  # fmt: skip
        assert added.code == 0, added.err
        await wait_reason(ws, ns, "spoke", "Ready")
        await wait_for(ws.argocd_secrets, lambda found: len(found) == 1, "the registration")

        said = [
            "  Secret {ns}/spoke-kubeconfig: deleted with it (the Cluster owns it)",
            "  Argo CD registration: released by Kokumi's manager, which then lets the Cluster "
            f"go (finalizer {api.FINALIZER}); Argo CD no longer deploys to it",
        ]
        said[0] = said[0].format(ns=ns)
        declined = await kokumi_async(
            "cluster", "remove", "spoke", "-n", ns, hub=hub.admin_kubeconfig, stdin="n\n"
        )
        assert declined.out.splitlines() == [
            f"Cluster {ns}/spoke, and with it:",
            *said,
            f"Remove Cluster {ns}/spoke? [y/N] ",
        ]
        line = one_error_line(declined)
        assert line == f"kokumi: Cluster {ns}/spoke not removed: answer y, or pass --yes"
        unanswered = await kokumi_async(
            "cluster", "remove", "spoke", "-n", ns, hub=hub.admin_kubeconfig
        )
        assert unanswered.code == 1, unanswered.out
        await ws.get_cluster(ns, "spoke")  # still there

        removed = await kokumi_async(
            "cluster", "remove", "spoke", "-n", ns, hub=hub.admin_kubeconfig, stdin="y\n"
        )
        assert removed.code == 0, removed.err
        assert removed.out.splitlines()[:3] == [f"Cluster {ns}/spoke, and with it:", *said]
        assert removed.out.splitlines()[-1].startswith(
            f"Remove Cluster {ns}/spoke? [y/N] Cluster {ns}/spoke is being removed: it is gone "
            "once the manager has released its Argo CD registration"
        )
        await wait_for(ws.argocd_secrets, lambda found: found == [], "the registration released")

        async def left(resource: Resource, name: str) -> bool:
            try:
                await ws.client.get(resource, name, namespace=ns)
            except NotFound:
                return False
            return True

        await wait_for(functools.partial(left, api.CLUSTERS, "spoke"), lambda x: not x, "gone")
        # The garbage collector follows the ownerReference once it watches Clusters: on a hub
        # whose CRDs are minutes old that waits for its next discovery (every 30 s).
        secret = functools.partial(left, SECRETS, "spoke-kubeconfig")
        await wait_for(secret, lambda x: not x, "the owned Secret gone", timeout=90)
        assert spoke_kubeconfig.token not in removed.out + removed.err
        await ws.cleanup()


def test_remove_keeps_a_secret_it_does_not_own_and_asks_nothing_with_yes(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    kubectl(hub, "create", "secret", "generic", "capi-kubeconfig", "-n", namespace,
            "--from-literal=value=a kubeconfig Cluster API rotates")  # fmt: skip
    path = hub.admin_kubeconfig.parent / f"capi-{namespace}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": "capi", "namespace": namespace},
                "spec": {
                    "connection": "Kubeconfig",
                    "kubeconfig": {"secretRef": {"name": "capi-kubeconfig"}},
                },
            }
        )
    )
    kubectl(hub, "apply", "-f", str(path))
    in_cluster(kubectl, hub, namespace, "local")

    removed = kokumi("cluster", "remove", "capi", "-n", namespace, "--yes",
                     hub=hub.admin_kubeconfig)  # fmt: skip
    assert removed.code == 0, removed.err
    assert removed.out.splitlines() == [
        f"Cluster {namespace}/capi, and with it:",
        f"  Secret {namespace}/capi-kubeconfig: kept (the Cluster does not own it): delete it "
        "yourself if nothing else reads it",
        "  Argo CD registration: none held for it",
        f"Cluster {namespace}/capi removed",
    ]
    kubectl(hub, "get", "secret", "capi-kubeconfig", "-n", namespace)
    local = kokumi("cluster", "remove", "local", "-n", namespace, "-y", hub=hub.admin_kubeconfig)
    assert local.out.splitlines()[1] == "  Secret: none (the Cluster connects InCluster)"
    assert kubectl(hub, "get", CLUSTERS, "-n", namespace, "-o", "name").stdout == ""


def test_remove_forbidden_or_missing_says_what_to_ask_for_in_one_line(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    in_cluster(kubectl, hub, namespace, "spoke")
    reader = user_with(hub, kubectl, namespace, {CLUSTERS: "get,list"})
    refused = kokumi("cluster", "remove", "spoke", "-n", namespace, hub=reader, stdin="y\n")
    assert "Remove Cluster" not in refused.out  # told before being asked
    line = one_error_line(refused)
    assert line.startswith(
        f"kokumi: cannot delete Cluster {namespace}/spoke: you may not delete Clusters in "
        f"namespace {namespace}, so nothing was removed; "
    )
    assert line.endswith(
        f"ask your admin for delete on {CLUSTERS} in namespace {namespace} (a Role and RoleBinding)"
    )
    stranger = user_with(hub, kubectl, namespace, {"configmaps": "get"})
    unseen = one_error_line(kokumi("cluster", "remove", "spoke", "-n", namespace, hub=stranger))
    assert unseen.startswith(f"kokumi: cannot read Cluster {namespace}/spoke: Forbidden: ")
    assert f"ask your admin for get and delete on {CLUSTERS} in namespace" in unseen
    kubectl(hub, "get", CLUSTERS, "spoke", "-n", namespace)

    missing = kokumi("cluster", "remove", "nothing", "-n", namespace, "-y",
                     hub=hub.admin_kubeconfig)  # fmt: skip
    assert missing.code == 1
    assert one_error_line(missing) == (
        f"kokumi: no Cluster nothing in namespace {namespace}: see kokumi cluster list "
        f"-n {namespace}"
    )


# --- label --------------------------------------------------------------------------------------


def test_label_adds_changes_only_with_overwrite_and_removes(
    hub: APIServer, admission_policies: object, namespace: str, kubectl: Kubectl
) -> None:
    in_cluster(kubectl, hub, namespace, "spoke", fleet="edge")
    admin = hub.admin_kubeconfig

    added = kokumi("cluster", "label", "spoke", "-n", namespace, "tier=prod", "region=eu",
                   "fleet=edge", hub=admin)  # fmt: skip
    assert added.code == 0, added.err
    assert added.out == f"Cluster {namespace}/spoke labeled: set tier=prod, region=eu\n"
    assert labels_of(kubectl, hub, namespace, "spoke") == {
        "fleet": "edge", "tier": "prod", "region": "eu"
    }  # fmt: skip

    kept = kokumi("cluster", "label", "spoke", "-n", namespace, "tier=staging", hub=admin)
    assert one_error_line(kept) == (
        f"kokumi: label tier of Cluster {namespace}/spoke is 'prod' already, and --overwrite "
        "was not given: add --overwrite to make it 'staging'; nothing was changed"
    )
    assert labels_of(kubectl, hub, namespace, "spoke")["tier"] == "prod"

    changed = kokumi("cluster", "label", "spoke", "-n", namespace, "tier=staging", "region-",
                     "--overwrite", hub=admin)  # fmt: skip
    assert changed.code == 0, changed.err
    assert changed.out == f"Cluster {namespace}/spoke labeled: set tier=staging; removed region\n"
    assert labels_of(kubectl, hub, namespace, "spoke") == {"fleet": "edge", "tier": "staging"}

    again = kokumi("cluster", "label", "spoke", "-n", namespace, "region-", "fleet=edge",
                   hub=admin)  # fmt: skip
    assert again.code == 0, again.err
    assert again.out == f"Cluster {namespace}/spoke not labeled: its labels are so already\n"
    assert again.err == (
        f"kokumi: warning: Cluster {namespace}/spoke has no label region to remove\n"
    )


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (("fleet",), "'fleet' is neither KEY=VALUE (to set a label) nor KEY- (to remove one)"),
        (("tier=a", "tier-"), "label tier is both set and removed: give it once"),
    ],
)
def test_label_arguments_kubectl_would_refuse_exit_2_before_any_request(
    labels: tuple[str, ...], said: str
) -> None:
    refused = kokumi("cluster", "label", "spoke", "-n", "platform", *labels,
                     "--hub-kubeconfig", "/nonexistent/kubeconfig")  # fmt: skip
    assert refused.code == 2, refused.err
    assert one_error_line(refused).startswith(f"kokumi: {said}")


def test_label_refused_by_the_api_the_policy_or_rbac_in_one_line(
    hub: APIServer, admission_policies: object, namespace: str, kubectl: Kubectl
) -> None:
    in_cluster(kubectl, hub, namespace, "spoke")
    admin = hub.admin_kubeconfig
    invalid = kokumi("cluster", "label", "spoke", "-n", namespace, "bad key=x", hub=admin)
    line = one_error_line(invalid)
    assert line.startswith(f"kokumi: cannot label Cluster {namespace}/spoke: Invalid: ")
    assert "bad key" in line

    many = [f"team-{index}=x" for index in range(65)]
    over = one_error_line(kokumi("cluster", "label", "spoke", "-n", namespace, *many, hub=admin))
    assert over.startswith(f"kokumi: cannot label Cluster {namespace}/spoke: Invalid: ")
    assert "ValidatingAdmissionPolicy 'kokumi-object-limits'" in over
    assert over.endswith(
        "remove labels, and keep text for people in spec.description or annotations"
    )
    assert "ask your admin" not in over
    assert labels_of(kubectl, hub, namespace, "spoke") == {}

    reader = user_with(hub, kubectl, namespace, {CLUSTERS: "get,list"})
    refused = one_error_line(
        kokumi("cluster", "label", "spoke", "-n", namespace, "tier=prod", hub=reader)
    )
    assert refused.startswith(f"kokumi: cannot label Cluster {namespace}/spoke: Forbidden: ")
    assert refused.endswith(
        f"ask your admin for patch on {CLUSTERS} in namespace {namespace} (a Role and RoleBinding)"
    )
    missing = kokumi("cluster", "label", "nothing", "-n", namespace, "tier=prod", hub=admin)
    assert one_error_line(missing).startswith(
        f"kokumi: no Cluster nothing in namespace {namespace}"
    )


# --- list -l, -o --------------------------------------------------------------------------------


def test_list_by_selector_and_list_and_describe_print_yaml_json_and_names(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    in_cluster(kubectl, hub, namespace, "edge-1", fleet="edge", tier="prod")
    in_cluster(kubectl, hub, namespace, "edge-2", fleet="edge", tier="staging")
    in_cluster(kubectl, hub, namespace, "core", fleet="core")
    admin = hub.admin_kubeconfig

    def names(*args: str) -> list[str]:
        listed = kokumi("cluster", "list", "-n", namespace, *args, "-o", "name", hub=admin)
        assert listed.code == 0, listed.err
        return listed.out.splitlines()

    assert names() == [f"cluster.delivery.kokumi.dev/{n}" for n in ("core", "edge-1", "edge-2")]
    assert names("-l", "fleet=edge,tier!=prod") == ["cluster.delivery.kokumi.dev/edge-2"]
    assert names("--selector", "tier in (prod,staging)") == [
        "cluster.delivery.kokumi.dev/edge-1",
        "cluster.delivery.kokumi.dev/edge-2",
    ]
    table = kokumi("cluster", "list", "-n", namespace, "-l", "fleet=core", hub=admin)
    assert [row.split()[0] for row in table.out.splitlines()] == ["NAME", "core"]
    none = kokumi("cluster", "list", "-n", namespace, "-l", "fleet=moon", hub=admin)
    assert none.code == 0 and none.out == ""
    assert none.err == f"No Clusters matching fleet=moon in namespace {namespace}.\n"
    wrong = one_error_line(kokumi("cluster", "list", "-n", namespace, "-l", "fleet==,", hub=admin))
    assert wrong.startswith(
        f"kokumi: cannot list Clusters in namespace {namespace} with labels fleet==,: "
    )

    as_json = json.loads(
        kokumi("cluster", "list", "-n", namespace, "-l", "fleet=edge", "-o", "json", hub=admin).out
    )
    assert as_json["kind"] == "List"
    assert [c["metadata"]["name"] for c in as_json["items"]] == ["edge-1", "edge-2"]
    assert all("managedFields" not in c["metadata"] for c in as_json["items"])
    as_yaml = yaml.safe_load(
        kokumi("cluster", "list", "-n", namespace, "-l", "fleet=core", "-o", "yaml", hub=admin).out
    )
    assert [c["kind"] for c in as_yaml["items"]] == ["Cluster"]

    def described(output: str) -> str:
        shown = kokumi("cluster", "describe", "edge-1", "-n", namespace, "-o", output, hub=admin)
        assert shown.code == 0, shown.err
        return shown.out

    assert described("name") == "cluster.delivery.kokumi.dev/edge-1\n"
    one = json.loads(described("json"))
    assert (one["apiVersion"], one["kind"], one["metadata"]["name"]) == (
        api.API_VERSION, "Cluster", "edge-1"
    )  # fmt: skip
    assert one["metadata"]["labels"] == {"fleet": "edge", "tier": "prod"}
    assert "managedFields" not in one["metadata"]
    assert yaml.safe_load(described("yaml")) == one
    missing = kokumi("cluster", "describe", "nothing", "-n", namespace, "-o", "yaml", hub=admin)
    assert one_error_line(missing).startswith(
        f"kokumi: no Cluster nothing in namespace {namespace}"
    )


# --- version and help ---------------------------------------------------------------------------


def test_version_is_the_packages() -> None:
    shown = kokumi("--version")
    assert shown.code == 0, shown.err
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert shown.out == f"kokumi {project['project']['version']}\n"


def _parsers(parser: object) -> list[tuple[str, object]]:
    assert isinstance(parser, argparse.ArgumentParser)
    found: list[tuple[str, object]] = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += _parsers(child)
    return found


def test_every_help_is_plain_text_without_markup() -> None:
    """What a terminal shows: no reStructuredText (double backticks, :mod: roles) in any help."""
    parsers = _parsers(parser())
    assert {"kokumi", "kokumi cluster remove", "kokumi cluster label"} <= {p for p, _ in parsers}
    marked = {}
    for prog, each in parsers:
        assert isinstance(each, argparse.ArgumentParser)
        text = each.format_help()
        if "``" in text or ":mod:" in text or ":class:" in text:
            marked[prog] = text
    assert marked == {}


# --- pure pieces --------------------------------------------------------------------------------


def test_what_goes_with_a_cluster_whose_secret_is_unreadable_or_made_by_a_source() -> None:
    cluster = {
        "metadata": {
            "name": "vc-a",
            "namespace": "team-a",
            "uid": "u-1",
            "ownerReferences": [
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "ClusterSource",
                    "name": "vclusters",
                    "uid": "s-1",
                    "controller": True,
                }
            ],
        },
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "vc-a"}}},
    }
    assert goes_with(cluster, False) == [
        "Secret team-a/vc-a: deleted with it if the Cluster owns it (you may not read it to tell)",
        "Argo CD registration: none held for it",
        "ClusterSource vclusters made this Cluster and makes it again: to remove it for good, "
        "change or delete that source",
    ]
    assert goes_with(cluster, None)[0] == "Secret team-a/vc-a: not there"


def test_label_arguments_read_as_kubectl_reads_them() -> None:
    change = change_of(["a=b-", "c=", "d-", "d-"])
    assert change == Change({"a": "b-", "c": ""}, ("d",))
    patch = patch_of({"a": "b-", "d": "x"}, change, overwrite=False, where="ns/n")
    assert patch == {"c": "", "d": None}  # a is so already: no --overwrite needed
