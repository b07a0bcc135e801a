"""The embedding example of docs/embedding.md, run as written against the real hub."""

from __future__ import annotations

import re
from pathlib import Path

import trio

import kokumi
from kokumi.testing.controlplane import APIServer
from tests.support.manager import hub_client, make_namespace

DOC = Path(__file__).resolve().parent.parent / "docs" / "embedding.md"


def test_public_names() -> None:
    """The names the page uses; tests/test_exports.py checks each has one home."""
    assert sorted(kokumi.__all__) == [
        "Config",
        "EgressPolicy",
        "LeaderElection",
        "LeadershipLost",
        "Manager",
        "Options",
        "SecretScope",
        "Sharding",
        "Timing",
        "run_manager",
    ]
    for name in kokumi.__all__:
        assert getattr(kokumi, name) is not None


async def test_the_documented_example_runs(hub: APIServer, crds: object, capsys: object) -> None:
    source = re.search(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert source is not None
    async with hub_client(hub) as client:
        own = await make_namespace(client, "kokumi")
        argo = await make_namespace(client, "argocd")
    code = (
        source.group(1)
        .replace('"hub.kubeconfig"', repr(str(hub.admin_kubeconfig)))
        .replace('namespace="kokumi"', f"namespace={own!r}")
        .replace('argocd_namespace="argocd"', f"argocd_namespace={argo!r}")
        .replace("trio.run(main)", "")
    )
    scope: dict[str, object] = {}
    exec(compile(code, str(DOC), "exec"), scope)  # noqa: S102 - our own documentation
    main = scope["main"]
    with trio.fail_after(60):
        await main()  # type: ignore[operator]
    async with hub_client(hub) as client:
        from kokumi.core import api

        kept = await client.get(api.CLUSTERS, "in-cluster", namespace=own)
        assert kept["metadata"]["labels"][api.IN_CLUSTER_LABEL] == "true"
