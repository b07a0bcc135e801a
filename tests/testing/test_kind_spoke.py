"""`make kind-spoke` and the flag it rests on, `kokumi cluster add --secret-only`.

Kind needs a Docker engine, and the machines these tests run on have none: no test creates a Kind
cluster. What runs here is everything after "the cluster exists", for real: the Makefile's own
recipe, run by make, against the real hub and spoke, with a stand-in ``kind`` on PATH that prints
the spoke's kubeconfig in Kind's format (its ``--internal`` one naming the spoke by another
address, as Kind's names the node's container), and a ``docker`` that answers. The hub, the spoke,
kubectl, kokumi and the manager are the real ones; the test ends at a Ready Cluster registered with
Argo CD at the internal address. The messages for a missing kind, docker or kubectl come from the
Makefile with those tools left off PATH.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import yaml

from kokumi.kube.resources import SECRETS
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.testing.kubectl import kubectl_binary
from kokumi.testing.spoke import Registration
from tests.support.cli import kokumi, one_error_line, stored_kubeconfig, whoami
from tests.support.manager import manager, wait_for, wait_reason, workspace
from tests.support.paths import REPO as ROOT

EXAMPLE = ROOT / "examples" / "multi-cluster" / "platform"
SPOKE_NAME = "kokumi-spoke"


@attrs.frozen
class Made:
    code: int
    out: str
    err: str

    def ours(self) -> list[str]:
        """stderr without make's own closing line (``make: *** [...] Error 1``)."""
        return [line for line in self.err.splitlines() if not line.startswith("make: ")]


def run_make(*args: str, env: Mapping[str, str]) -> Made:
    make = shutil.which("make")
    assert make is not None, "make is not installed: .ci/run installs it"
    result = subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), *args, f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=dict(env),
    )
    return Made(result.returncode, result.stdout, result.stderr)


async def run_make_async(*args: str, env: Mapping[str, str]) -> Made:
    return await trio.to_thread.run_sync(functools.partial(run_make, *args, env=env))


FAKE_KIND = """\
import json, pathlib, sys
here = pathlib.Path(__file__).parent
state = json.loads((here / "kind-state.json").read_text())
args = sys.argv[1:]
with open(here / "kind-calls", "a") as calls:
    calls.write(" ".join(args) + "\\n")
def named():
    return args[args.index("--name") + 1]
if args[:2] == ["get", "clusters"]:
    if not state["clusters"]:
        print("No kind clusters found.", file=sys.stderr)
    for name in state["clusters"]:
        print(name)
elif args[:2] == ["create", "cluster"]:
    state["clusters"].append(named())
    (here / "kind-state.json").write_text(json.dumps(state))
    path = pathlib.Path(args[args.index("--kubeconfig") + 1])
    path.write_text(state["external"])
    print(f"Set kubectl context to \\"kind-{named()}\\" in {path}", file=sys.stderr)
elif args[:2] == ["get", "kubeconfig"]:
    if named() not in state["clusters"]:
        sys.exit(f'ERROR: could not locate any control plane nodes for cluster named "{named()}"')
    print(state["internal" if "--internal" in args else "external"], end="")
else:
    sys.exit("the test's kind does not know: " + " ".join(args))
"""


def kind_kubeconfig(spoke: APIServer, server: str) -> str:
    """The spoke's admin kubeconfig as ``kind get kubeconfig`` prints one (YAML, kind-NAME)."""
    admin = json.loads(spoke.admin_kubeconfig.read_text())
    name = f"kind-{SPOKE_NAME}"
    cluster = {**admin["clusters"][0]["cluster"], "server": server}
    document = {
        "apiVersion": "v1",
        "clusters": [{"cluster": cluster, "name": name}],
        "contexts": [{"context": {"cluster": name, "user": name}, "name": name}],
        "current-context": name,
        "kind": "Config",
        "preferences": {},
        "users": [{"name": name, "user": admin["users"][0]["user"]}],
    }
    return yaml.safe_dump(document)


def internal_address(spoke: APIServer) -> str:
    """Another name of the spoke (its certificate holds localhost), standing in for Kind's
    ``https://kokumi-spoke-control-plane:6443``: reachable from where the manager runs."""
    return spoke.url.replace("127.0.0.1", "localhost")


def tools(tmp_path: Path, *names: str, docker: str | None = None) -> Path:
    """A PATH of only the named tools (and a docker whose ``docker info`` says ``docker``)."""
    directory = tmp_path / "bin"
    directory.mkdir(exist_ok=True)
    for name in names:
        found = kubectl_binary() if name == "kubectl" else shutil.which(name)
        assert found is not None, name
        (directory / name).symlink_to(found)
    if docker is not None:
        (directory / "docker").write_text(f"#!/bin/sh\n{docker}\n")
        (directory / "docker").chmod(0o755)
    return directory


def with_kind(directory: Path, spoke: APIServer | None, *, exists: bool) -> None:
    """The stand-in kind in ``directory``, knowing the spoke as cluster kokumi-spoke."""
    state = {
        "clusters": [SPOKE_NAME] if exists else [],
        "external": kind_kubeconfig(spoke, spoke.url) if spoke else "",
        "internal": kind_kubeconfig(spoke, internal_address(spoke)) if spoke else "",
    }
    (directory / "kind-state.json").write_text(json.dumps(state))
    (directory / "kind").write_text(f"#!{sys.executable}\n{FAKE_KIND}")
    (directory / "kind").chmod(0o755)


def kind_calls(directory: Path) -> list[str]:
    calls = directory / "kind-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def environment(tmp_path: Path, path: Path, hub_kubeconfig: Path | None) -> dict[str, str]:
    env = {"PATH": str(path), "HOME": str(tmp_path)}
    if hub_kubeconfig is not None:
        env["KUBECONFIG"] = str(hub_kubeconfig)
    return env


def printed_cluster(out: str) -> tuple[list[str], str]:
    """make's output: the commands it echoed, and what kokumi printed from its first comment."""
    lines = out.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("# Secret "))
    return [line.rstrip("\n") for line in lines[:start]], "".join(lines[start:])


def example_cluster() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLE / "cluster-spoke.yaml").read_text())
    return loaded


# --- make kind-spoke, on the real hub and spoke -------------------------------------------------


async def test_kind_spoke_writes_the_secret_prints_the_cluster_and_it_becomes_ready(
    hub: APIServer,
    spoke: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    path = tools(tmp_path, "grep", "sed", "mkdir", "chmod", "kubectl", docker="exit 0")
    with_kind(path, spoke, exists=False)
    env = environment(tmp_path, path, hub.admin_kubeconfig)
    internal = internal_address(spoke)
    spoke_file = tmp_path / ".kube" / f"{SPOKE_NAME}.kubeconfig"
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = f"platform-{uuid.uuid4().hex[:6]}"  # made by the target: it does not exist yet
        ws.namespaces.append(ns)
        first = await run_make_async("kind-spoke", f"KIND_SPOKE_NAMESPACE={ns}", env=env)
        assert first.code == 0, first.err

        # Kind was asked for the cluster, created it into its own file (the hub's current
        # context stays), and was asked for the internal address the hub's pods reach.
        calls = kind_calls(path)
        assert calls[:2] == [
            "get clusters",
            f"create cluster --name {SPOKE_NAME} --kubeconfig {spoke_file}",
        ]
        assert f"get kubeconfig --internal --name {SPOKE_NAME}" in calls
        assert spoke_file.stat().st_mode & 0o077 == 0

        # The cluster-admin warning, and nothing else, on stderr (kind's own note aside).
        warnings = [line for line in first.err.splitlines() if line.startswith("kokumi:")]
        assert len(warnings) == 1
        assert warnings[0].startswith("kokumi: warning: ServiceAccount kube-system/kokumi gets")
        assert "--cluster-role" in warnings[0]

        echoed, printed = printed_cluster(first.out)
        # What make showed is what `make -n` shows past the silent checks, and kubectl's line.
        dry = run_make("-n", "kind-spoke", f"KIND_SPOKE_NAMESPACE={ns}", env=env).out.splitlines()
        shown = dry[next(i for i, line in enumerate(dry) if line.startswith("kind get")) :]
        assert echoed == [*shown[:3], f"namespace/{ns} created", *shown[3:]]

        head = printed.splitlines()[:2]
        assert head[0] == (
            f"# Secret {ns}/spoke-kubeconfig created: token of ServiceAccount "
            f"kube-system/kokumi, server {internal}"
        )
        cluster = yaml.safe_load(printed)
        assert cluster == {**example_cluster(), "metadata": {
            **example_cluster()["metadata"], "namespace": ns,
        }}  # fmt: skip
        assert printed.splitlines()[-1] == (
            f"# Then watch it: kubectl get clusters.delivery.kokumi.dev spoke -n {ns} -w"
        )

        # Only the Secret was written; it holds the ServiceAccount's token, at the address
        # the hub's pods reach, and nothing owns it yet.
        listed = kubectl(hub, "get", "kcl", "-n", ns, "-o", "name")
        assert listed.stdout == ""
        text = stored_kubeconfig(kubectl, hub, ns, "spoke-kubeconfig")
        assert yaml.safe_load(text)["clusters"][0]["cluster"]["server"] == internal
        assert whoami(kubectl, text, tmp_path / "stored") == (
            "system:serviceaccount:kube-system:kokumi"
        )
        secret = await ws.client.get(SECRETS, "spoke-kubeconfig", namespace=ns)
        assert "ownerReferences" not in secret["metadata"]

        # The user's next steps: apply what was printed, then the multi-cluster example.
        kubectl(hub, "apply", "-f", "-", input=printed)
        kubectl(hub, "apply", "-n", ns, "-k", str(EXAMPLE))
        ready = await wait_reason(ws, ns, "spoke", "Ready")
        assert ready["status"]["server"] == internal
        registered = await wait_for(ws.argocd_secrets, lambda found: len(found) == 1, "it")
        assert base64.b64decode(registered[0]["data"]["server"]).decode() == internal

        # Again, with the cluster there: Kind keeps it, the Secret is updated in place.
        again = await run_make_async("kind-spoke", f"KIND_SPOKE_NAMESPACE={ns}", env=env)
        assert again.code == 0, again.err
        assert not any(call.startswith("create") for call in kind_calls(path)[len(calls) :])
        assert (
            printed_cluster(again.out)[1]
            .splitlines()[0]
            .startswith(f"# Secret {ns}/spoke-kubeconfig updated: ")
        )
        await wait_reason(ws, ns, "spoke", "Ready")
        for run in (first, again):
            assert spoke_kubeconfig.token not in run.out + run.err
        await ws.cleanup()


def test_kind_spoke_apply_creates_the_cluster_that_owns_its_secret(
    hub: APIServer, spoke: APIServer, crds: object, kubectl: Kubectl, tmp_path: Path
) -> None:
    path = tools(tmp_path, "grep", "sed", "mkdir", "chmod", "kubectl", docker="exit 0")
    with_kind(path, spoke, exists=True)
    ns = f"platform-{uuid.uuid4().hex[:6]}"
    env = environment(tmp_path, path, hub.admin_kubeconfig)
    try:
        made = run_make("kind-spoke", f"KIND_SPOKE_NAMESPACE={ns}", "KIND_SPOKE_APPLY=1", env=env)
        assert made.code == 0, made.err
        assert not any(call.startswith("create") for call in kind_calls(path))
        said = made.out.splitlines()[-3:]
        assert said == [
            f"Cluster {ns}/spoke created",
            f"Secret {ns}/spoke-kubeconfig created: the kubeconfig of {internal_address(spoke)}, "
            "owned by the Cluster and deleted with it",
            f"Kokumi checks it within a minute: kokumi cluster describe spoke -n {ns}",
        ]
        cluster = json.loads(kubectl(hub, "get", "kcl", "spoke", "-n", ns, "-o", "json").stdout)
        assert cluster["metadata"]["labels"] == example_cluster()["metadata"]["labels"]
        secret = json.loads(
            kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", ns, "-o", "json").stdout
        )
        assert [owner["uid"] for owner in secret["metadata"]["ownerReferences"]] == [
            cluster["metadata"]["uid"]
        ]
    finally:
        kubectl(hub, "delete", "namespace", ns, "--wait=false", "--ignore-not-found")


# --- make kind-spoke, what needs no cluster -----------------------------------------------------


@pytest.mark.parametrize(
    ("present", "docker", "said"),
    [
        (
            (),
            None,
            "make kind-spoke needs Docker, which runs Kind's clusters: install Docker Engine or "
            "Docker Desktop (https://docs.docker.com/get-docker/)",
        ),
        (
            (),
            "echo 'Cannot connect to the Docker daemon' >&2; exit 1",
            "make kind-spoke needs Docker's engine, and docker info gets no answer from it: "
            "start Docker (Docker Desktop, or sudo systemctl start docker)",
        ),
        (
            (),
            "exit 0",
            "make kind-spoke needs kind: install it "
            "(https://kind.sigs.k8s.io/docs/user/quick-start/#installation)",
        ),
        (
            ("kind",),
            "exit 0",
            "make kind-spoke needs kubectl: install it (https://kubernetes.io/docs/tasks/tools/)",
        ),
    ],
    ids=["no-docker", "no-docker-engine", "no-kind", "no-kubectl"],
)
def test_a_missing_tool_is_one_line_that_says_what_to_install(
    tmp_path: Path, present: tuple[str, ...], docker: str | None, said: str
) -> None:
    path = tools(tmp_path, "grep", "sed", "mkdir", docker=docker)
    if "kind" in present:
        with_kind(path, None, exists=False)
    made = run_make("kind-spoke", env=environment(tmp_path, path, None))
    assert made.code != 0
    assert made.ours() == [said]
    assert made.out == ""
    assert kind_calls(path) == []


def test_the_spokes_own_context_as_hub_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A Kind cluster made by hand with ``kind create cluster`` becomes the current context."""
    path = tools(tmp_path, "grep", "sed", "mkdir", "chmod", "kubectl", docker="exit 0")
    with_kind(path, None, exists=True)
    name = f"kind-{SPOKE_NAME}"
    config = tmp_path / "config"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": name, "user": {}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
                "current-context": name,
            }
        )
    )
    made = run_make("kind-spoke", env=environment(tmp_path, path, config))
    assert made.code != 0
    assert made.ours() == [
        f"make kind-spoke writes the Secret to the hub, and the current context {name} is the "
        "spoke: switch to the hub first (kubectl config get-contexts; kubectl config use-context "
        "HUB)"
    ]
    assert kind_calls(path) == []


def test_make_n_shows_the_commands_a_user_will_see(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    shown = run_make("-n", "kind-spoke", env=env).out.splitlines()
    spoke_file = f"{tmp_path}/.kube/{SPOKE_NAME}.kubeconfig"
    assert (
        f"kind get clusters | grep -qx {SPOKE_NAME} || kind create cluster --name {SPOKE_NAME} "
        f'--kubeconfig "{spoke_file}"'
    ) in shown
    assert (
        f'umask 077 && kind get kubeconfig --name {SPOKE_NAME} > "{spoke_file}" && '
        f'chmod 600 "{spoke_file}"'
    ) in shown
    assert (
        "kubectl get namespace platform >/dev/null 2>&1 || kubectl create namespace platform"
    ) in shown
    add = shown[shown.index(next(line for line in shown if " -m kokumi cluster add" in line)) :]
    assert add == [
        f"{sys.executable} -m kokumi cluster add spoke -n platform --secret-only \\",
        f'  --kubeconfig "{spoke_file}" --create-service-account --cluster-role cluster-admin \\',
        f"  --server \"$(kind get kubeconfig --internal --name {SPOKE_NAME} | sed -n 's/^ *server:"
        " *//p')\" \\",
        "  --label fleet=edge --label topology.kubernetes.io/region=eu --description 'Spoke "
        "cluster'",
    ]

    other = run_make(
        "-n", "kind-spoke", "KIND_SPOKE_NAMESPACE=team-a", "KIND_SPOKE_NAME=edge-1",
        "KIND_SPOKE_CLUSTER_ROLE=edit", "KIND_SPOKE_APPLY=1", env=env,
    ).out  # fmt: skip
    assert "kind create cluster --name edge-1 " in other
    assert "-m kokumi cluster add spoke -n team-a \\\n" in other
    assert "--cluster-role edit" in other
    assert "--secret-only" not in other


def test_help_lists_every_target(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    listed = run_make(env=env)
    assert listed.code == 0, listed.err
    targets = [line.split()[1] for line in listed.out.splitlines() if line.startswith("  make ")]
    assert targets == ["help", "test", "demo", "lint", "kind-spoke"]
    assert "KIND_SPOKE_NAMESPACE=platform" in listed.out


def test_the_everyday_targets_run_the_readmes_commands(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for target in ("test", "demo", "lint"):
        command = subprocess.run(
            [shutil.which("make") or "make", "--no-print-directory", "-C", str(ROOT), "-n",
             target],
            capture_output=True, text=True, check=True, env=env,
        ).stdout.strip()  # fmt: skip
        assert command in readme.splitlines(), target  # a line of its own there


# --- kokumi cluster add --secret-only -----------------------------------------------------------


def spoke_args(registration: Registration, namespace: str) -> tuple[str, ...]:
    return (
        "cluster", "add", "spoke", "-n", namespace, "--kubeconfig", str(registration.path),
        "--label", "fleet=edge", "--label", "topology.kubernetes.io/region=eu",
        "--description", "Spoke cluster",
    )  # fmt: skip


def test_secret_only_writes_the_secret_and_a_later_add_takes_it_over(
    hub: APIServer,
    crds: object,
    namespace: str,
    kubectl: Kubectl,
    spoke_kubeconfig: Registration,
) -> None:
    args = spoke_args(spoke_kubeconfig, namespace)
    first = kokumi(*args, "--secret-only", hub=hub.admin_kubeconfig)
    assert first.code == 0, first.err
    assert first.err == ""
    assert first.out.splitlines()[0] == (
        f"# Secret {namespace}/spoke-kubeconfig created: context spoke, server "
        f"{spoke_kubeconfig.server}"
    )
    assert kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name").stdout == ""
    stored = yaml.safe_load(stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig"))
    assert stored["users"] == [
        {"name": spoke_kubeconfig.service_account, "user": {"token": spoke_kubeconfig.token}}
    ]
    secret = json.loads(
        kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, "-o", "json").stdout
    )
    assert "ownerReferences" not in secret["metadata"]
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kokumi-cli",
        "delivery.kokumi.dev/cluster": "spoke",
    }

    # What it printed is what the user applies; the Cluster then reads the Secret.
    kubectl(hub, "apply", "-f", "-", input=first.out)
    cluster = json.loads(kubectl(hub, "get", "kcl", "spoke", "-n", namespace, "-o", "json").stdout)
    assert cluster["spec"]["kubeconfig"]["secretRef"]["name"] == "spoke-kubeconfig"

    # A later add takes the Secret over: it now belongs to the Cluster...
    adopted = kokumi(*args, hub=hub.admin_kubeconfig)
    assert adopted.code == 0, adopted.err
    assert adopted.out.splitlines()[:2] == [
        f"Cluster {namespace}/spoke updated",
        f"Secret {namespace}/spoke-kubeconfig updated: the kubeconfig of "
        f"{spoke_kubeconfig.server}, owned by the Cluster and deleted with it",
    ]

    # ...and --secret-only again keeps that owner and the labels others added.
    kubectl(hub, "label", "secret", "spoke-kubeconfig", "-n", namespace, "team=edge")
    again = kokumi(*args, "--secret-only", hub=hub.admin_kubeconfig)
    assert again.code == 0, again.err
    assert again.out.startswith(f"# Secret {namespace}/spoke-kubeconfig updated: ")
    secret = json.loads(
        kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, "-o", "json").stdout
    )
    assert [owner["uid"] for owner in secret["metadata"]["ownerReferences"]] == [
        cluster["metadata"]["uid"]
    ]
    assert secret["metadata"]["labels"]["team"] == "edge"
    for run in (first, adopted, again):
        assert spoke_kubeconfig.token not in run.out + run.err


def test_secret_only_refuses_a_secret_kokumi_did_not_write(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    kubectl(
        hub, "create", "secret", "generic", "spoke-kubeconfig", "-n", namespace,
        "--from-literal=value=somebody else's kubeconfig",
    )  # fmt: skip
    refused = kokumi(
        *spoke_args(spoke_kubeconfig, namespace), "--secret-only", hub=hub.admin_kubeconfig
    )
    assert refused.code == 1
    assert one_error_line(refused) == (
        f"kokumi: Secret {namespace}/spoke-kubeconfig exists and kokumi did not write it (it "
        "lacks the labels app.kubernetes.io/managed-by=kokumi-cli and "
        "delivery.kokumi.dev/cluster=spoke), so nothing was written: choose another Cluster "
        "name, or delete that Secret if nothing uses it"
    )
    assert refused.out == ""
    kept = stored_kubeconfig(kubectl, hub, namespace, "spoke-kubeconfig")
    assert kept == "somebody else's kubeconfig"


def test_secret_only_by_a_user_who_may_not_write_secrets_says_so_in_one_line(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, spoke_kubeconfig: Registration
) -> None:
    nobody = hub.kubeconfig_for("kokumi-nobody")
    refused = kokumi(*spoke_args(spoke_kubeconfig, namespace), "--secret-only", hub=nobody)
    assert refused.code == 1
    line = one_error_line(refused)
    assert line.startswith(f"kokumi: cannot create Secret {namespace}/spoke-kubeconfig: Forbidden:")
    assert 'User "kokumi-nobody" cannot create resource "secrets"' in line
    assert refused.out == ""
    found = kubectl(hub, "get", "secret", "spoke-kubeconfig", "-n", namespace, check=False)
    assert "NotFound" in found.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--in-cluster", "--secret-only"),
            "kokumi: --secret-only writes the kubeconfig Secret, and an --in-cluster Cluster has "
            "none: leave --secret-only out",
        ),
        (
            ("--context", "spoke", "--create-service-account", "--server", "", "--secret-only"),
            "kokumi: --server is empty: give the API server's URL as the hub reaches it, such as "
            "https://spoke.example:6443",
        ),
    ],
    ids=["in-cluster", "empty-server"],
)
def test_secret_only_refusals_before_anything_ran_exit_2(args: tuple[str, ...], said: str) -> None:
    refused = kokumi("cluster", "add", "spoke", "-n", "platform", *args)
    assert refused.code == 2, refused.err
    assert one_error_line(refused) == said
