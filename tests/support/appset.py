"""Running ApplicationSets through Argo CD's own cluster generator against the Secrets on the hub.

``argocd-appset-clusters`` (kokumi/testing/go/argocd/appset) is Argo CD's ApplicationSet code
without its controller: it lists the cluster Secrets of one namespace as the controller does,
and renders the Applications with the controller's renderer. What it prints is what Argo CD
would generate from the Secrets Kokumi wrote, read by Argo CD's code rather than by ours.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import attrs
import trio
import yaml

from kokumi.testing.controlplane import APIServer
from tests.support.paths import REPO

__all__ = [
    "EXAMPLES",
    "GeneratorError",
    "Generated",
    "example",
    "readme_example",
    "generate",
    "with_selector",
]

EXAMPLES = REPO / "examples" / "argocd"


class GeneratorError(AssertionError):
    """Argo CD's code refused the ApplicationSet; the message is its own words."""


@attrs.frozen
class Generated:
    """One generation: each generator's params, and the Applications rendered from them."""

    params: list[list[dict[str, Any]]]
    applications: list[dict[str, Any]]

    @property
    def clusters(self) -> list[dict[str, Any]]:
        """The first generator's params, one per matched cluster, in server order (Argo CD's
        own order is a map's, so unordered)."""
        return sorted(self.params[0], key=lambda p: (str(p.get("server")), str(p.get("name"))))

    @property
    def servers(self) -> list[str]:
        return [str(p["server"]) for p in self.clusters]

    def application(self, name: str) -> dict[str, Any]:
        found = [a for a in self.applications if a["metadata"]["name"] == name]
        assert len(found) == 1, [a["metadata"]["name"] for a in self.applications]
        return found[0]


def example(name: str) -> dict[str, Any]:
    """An ApplicationSet of examples/argocd, as the docs show it."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    assert document["kind"] == "ApplicationSet", name
    return document


def readme_example() -> dict[str, Any]:
    """The ApplicationSet README.md shows in its Argo CD section."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Deploy to the clusters with Argo CD", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert found is not None, "README's Argo CD section shows no ApplicationSet"
    document: dict[str, Any] = yaml.safe_load(found.group(1))
    assert document["kind"] == "ApplicationSet"
    return document


def with_selector(application_set: dict[str, Any], selector: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``application_set`` whose (one) cluster generator selects with ``selector``."""
    changed = copy.deepcopy(application_set)
    (generator,) = changed["spec"]["generators"]
    generator["clusters"]["selector"] = selector
    return changed


async def generate(
    binary: Path, hub: APIServer, argocd_namespace: str, application_set: dict[str, Any]
) -> Generated:
    """What Argo CD generates from ``application_set`` with the cluster Secrets of
    ``argocd_namespace`` on ``hub``; raises GeneratorError with Argo CD's message if it refuses.

    A process of its own, awaited: a test's manager runs in the same Trio loop meanwhile.
    """
    done = await trio.run_process(
        [
            str(binary),
            "--kubeconfig",
            str(hub.admin_kubeconfig),
            "--namespace",
            argocd_namespace,
            "-",
        ],
        stdin=yaml.safe_dump(application_set).encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    if done.returncode != 0:
        raise GeneratorError(done.stderr.decode(errors="replace").strip())
    out = json.loads(done.stdout)
    return Generated(params=out["generators"], applications=out["applications"])
