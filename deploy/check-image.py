"""Run the built image as the Deployment would, against the local control plane.

    python deploy/check-image.py IMAGE            # e.g. localhost/kokumi-clusters:0.1.0

Needs buildah (``--isolation chroot`` works without a daemon) and the image in its local
storage. Starts the test hub, applies install.yaml, mounts a token of the ServiceAccount
kokumi:kokumi, the hub's CA and the namespace where a pod has them, and runs ``kokumi manager``
from the image as the user 65532 with /tmp on tmpfs. Passes when the manager leads, creates the
Cluster in-cluster, reports it Ready, answers /healthz and /readyz, serves /metrics in a form
prometheus_client parses, stops cleanly on SIGTERM, handing the Lease back, and has written no
file into the image (what a read-only root filesystem would have refused).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kokumi.testing.controlplane import ControlPlane, free_port

DEPLOY = Path(__file__).resolve().parent


def kubectl(kubeconfig: Path, *args: str) -> str:
    kubectl = str(Path(sys.executable).with_name("kubectl"))
    return subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


RUNTIME_PATHS = ("run/", "tmp/", "etc/hosts", "etc/hostname", "etc/resolv.conf")


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    """Every file under ``root`` with its size and modification time."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[path.relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime)
    return found


def manager_pid(port: int) -> int:
    """The process of ``kokumi manager`` started with ``--health-port=port`` (not buildah's)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--health-port={port}".encode() in argv and b"buildah" not in argv[0]:
            return int(proc.name)
    raise AssertionError("the manager's process is not to be found")


def main(image: str) -> int:
    with ControlPlane.start() as plane, tempfile.TemporaryDirectory() as scratch:
        hub = plane.hub
        admin = hub.admin_kubeconfig
        kubectl(admin, "create", "namespace", "argocd")  # install.yaml's last document needs it
        kubectl(admin, "apply", "--server-side", "-f", str(DEPLOY / "install.yaml"))
        token = kubectl(admin, "-n", "kokumi", "create", "token", "kokumi").strip()
        mount = Path(scratch, "serviceaccount")
        mount.mkdir()
        (mount / "token").write_text(token)
        (mount / "ca.crt").write_bytes(hub.ca_pem)
        (mount / "namespace").write_text("kokumi")
        for path in mount.iterdir():
            path.chmod(0o644)  # the pod's projected volume is readable by the pod's user
        mount.chmod(0o755)
        port = free_port()
        container = subprocess.run(
            ["buildah", "from", image], capture_output=True, text=True, check=True
        ).stdout.strip()
        root = Path(
            subprocess.run(
                ["buildah", "mount", container], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        before = snapshot(root)
        log = Path(scratch, "manager.log")
        with log.open("wb") as out:
            manager = subprocess.Popen(
                [
                    "buildah",
                    "run",
                    "--isolation=chroot",
                    "--user=65532:65532",
                    # /var/run is a link to /run in the image; buildah mounts only on the target.
                    f"--volume={mount}:/run/secrets/kubernetes.io/serviceaccount:ro",
                    "--mount=type=tmpfs,destination=/tmp",
                    "--env=KUBERNETES_SERVICE_HOST=127.0.0.1",
                    f"--env=KUBERNETES_SERVICE_PORT={hub.port}",
                    container,
                    "--",
                    "kokumi",
                    "manager",
                    f"--health-port={port}",
                    "--log-format=json",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            ready = ""
            while time.monotonic() < deadline and manager.poll() is None:
                try:
                    status = kubectl(
                        admin,
                        "-n",
                        "kokumi",
                        "get",
                        "kcl",
                        "in-cluster",
                        "-o",
                        "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                    )
                    ready = status if status else ready
                    if ready == "True" and httpx.get(f"{base}/readyz").status_code == 200:
                        break
                except (subprocess.CalledProcessError, httpx.HTTPError):
                    pass
                time.sleep(1)
            assert ready == "True", f"in-cluster never became Ready:\n{log.read_text()}"
            assert httpx.get(f"{base}/healthz").text == "ok\n"
            metrics = {
                f.name: f.samples
                for f in text_string_to_metric_families(httpx.get(f"{base}/metrics").text)
            }
            assert metrics["kokumi_leader"][0].value == 1.0
            assert any(s.labels["reason"] == "Ready" for s in metrics["kokumi_clusters"])
            # buildah run kills its child on a signal instead of passing it on: SIGTERM goes to
            # the manager's own process, as the kubelet's runtime would deliver it.
            os.kill(manager_pid(port), signal.SIGTERM)
            assert manager.wait(timeout=60) == 0, log.read_text()
            lines = [json.loads(line) for line in log.read_text().splitlines() if line]
            assert any("handed the Lease" in line["message"] for line in lines)
            # What a read-only root filesystem would have refused: nothing, outside what buildah
            # itself mounts or writes for a run (/run, /etc/hosts and friends; /tmp is tmpfs).
            changed = {
                path
                for path, stamp in snapshot(root).items()
                if before.get(path) != stamp and not path.startswith(RUNTIME_PATHS)
            }
            assert not changed, f"the manager wrote into its image: {sorted(changed)}"
            print(f"{image}: ran as 65532, led, in-cluster Ready, /metrics parsed, clean stop")
        finally:
            if manager.poll() is None:
                manager.kill()
            subprocess.run(["buildah", "umount", container], capture_output=True, check=False)
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
