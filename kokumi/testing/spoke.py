"""Register the spoke as the spec's "Register a cluster" steps do, for the tests and the demo.

The steps are run for real with kubectl against the spoke: a ServiceAccount, a ClusterRoleBinding to
cluster-admin, a service-account-token Secret that the spoke's token controller fills in, and a
self-contained kubeconfig written with ``kubectl config ... --embed-certs``. Tests and the demo then
hold exactly what a user would put into the kubeconfig Secret, not something we assembled by hand.
"""

from __future__ import annotations

import base64
import copy
import socket
import time
from pathlib import Path

import attrs
import yaml

from kokumi.testing import canary
from kokumi.testing.controlplane import APIServer, CertificateAuthority
from kokumi.testing.kubectl import Kubectl, KubectlError

__all__ = [
    "BAD_TOKEN",
    "Registration",
    "closed_port_server",
    "closed_port_servers",
    "foreign_ca_pem",
    "register",
]

BAD_TOKEN = canary.token("not-a-valid-token")  # the spoke answers 401 to it

_SERVICE_ACCOUNT_MANIFEST = """\
apiVersion: v1
kind: Secret
metadata:
  name: {name}
  namespace: kube-system
  annotations:
    kubernetes.io/service-account.name: {service_account}
type: kubernetes.io/service-account-token
"""


@attrs.frozen
class Registration:
    """The spoke as a user registers it: the kubeconfig text and what it holds."""

    server: str
    token: str = attrs.field(repr=False)
    ca_pem: bytes
    kubeconfig: str = attrs.field(repr=False)
    path: Path  # the kubeconfig file kubectl wrote (0600)
    service_account: str

    def variant(
        self,
        *,
        server: str | None = None,
        token: str | None = None,
        ca_pem: bytes | None = None,
        exec_plugin: bool = False,
    ) -> str:
        """The kubeconfig text with one thing changed: a bad token, a wrong CA, another server...

        ``exec_plugin`` replaces the token with an exec credential plugin, which Kokumi refuses.
        """
        document = copy.deepcopy(yaml.safe_load(self.kubeconfig))
        cluster = document["clusters"][0]["cluster"]
        user = document["users"][0]["user"]
        if server is not None:
            cluster["server"] = server
        if ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
        if token is not None:
            user["token"] = token
        if exec_plugin:
            user.pop("token", None)
            user["exec"] = {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "kokumi-credential-helper",
                "interactiveMode": "Never",
            }
        return str(yaml.safe_dump(document, sort_keys=False))


def register(
    spoke: APIServer,
    kubectl: Kubectl,
    *,
    service_account: str = "kokumi",
    server: str | None = None,
    timeout: float = 30.0,
    namespace: str | None = None,
) -> Registration:
    """Run the spec's steps; again for the same ``service_account`` it returns the same token.

    ``server`` is the URL written into the kubeconfig, the spoke's own by default.
    ``namespace``: grant less than cluster-admin, as the spec advises where you can: the
    ServiceAccount gets the ClusterRole ``admin`` in that namespace only (created if missing),
    by a RoleBinding, and nothing cluster-wide.
    """
    secret = f"{service_account}-token"
    _create(kubectl, spoke, "serviceaccount", service_account, "-n", "kube-system")
    if namespace is None:
        _create(
            kubectl,
            spoke,
            "clusterrolebinding",
            service_account,
            "--clusterrole=cluster-admin",
            f"--serviceaccount=kube-system:{service_account}",
        )
    else:
        _create(kubectl, spoke, "namespace", namespace)
        _create(
            kubectl,
            spoke,
            "rolebinding",
            service_account,
            "-n",
            namespace,
            "--clusterrole=admin",
            f"--serviceaccount=kube-system:{service_account}",
        )
    kubectl(
        spoke,
        "apply",
        "-f",
        "-",
        input=_SERVICE_ACCOUNT_MANIFEST.format(name=secret, service_account=service_account),
    )
    token, ca_pem = _wait_for_token(spoke, kubectl, secret, timeout)

    directory = spoke.workdir / f"registered-{service_account}"
    directory.mkdir(mode=0o700, exist_ok=True)
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(ca_pem)
    path = directory / "spoke.kubeconfig"
    path.unlink(missing_ok=True)
    url = server or spoke.url
    # kubectl config --kubeconfig F ..., as in the spec (the runner passes F as --kubeconfig).
    kubectl(
        path,
        "config",
        "set-cluster",
        "spoke",
        "--server",
        url,
        "--certificate-authority",
        str(ca_file),
        "--embed-certs",
    )
    kubectl(path, "config", "set-credentials", service_account, "--token", token)
    kubectl(path, "config", "set-context", "spoke", "--cluster", "spoke", "--user", service_account)
    kubectl(path, "config", "use-context", "spoke")
    path.chmod(0o600)
    return Registration(
        server=url,
        token=token,
        ca_pem=ca_pem,
        kubeconfig=path.read_text(),
        path=path,
        service_account=service_account,
    )


def foreign_ca_pem() -> bytes:
    """A CA that signed nothing the spoke serves: the kubeconfig's CA is then the wrong one."""
    return CertificateAuthority.create("kokumi-foreign-ca").pem


def closed_port_server() -> str:
    """An https URL on loopback where nothing listens: the port was bound, then released."""
    return closed_port_servers(1)[0]


def closed_port_servers(count: int) -> list[str]:
    """``count`` such URLs, each on its own port: all are bound before any is released, since
    the system may hand a port just released to the next bind (two Clusters meant to have a
    server each then shared one, and one waited behind the other)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [f"https://127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _create(kubectl: Kubectl, spoke: APIServer, *args: str) -> None:
    """``kubectl create``, where "already exists" is success: registering twice is fine."""
    result = kubectl(spoke, "create", *args, check=False)
    if result.returncode != 0 and "already exists" not in result.stderr:
        raise KubectlError(f"kubectl create {' '.join(args)} failed:\n{result.stderr}")


def _wait_for_token(
    spoke: APIServer, kubectl: Kubectl, secret: str, timeout: float
) -> tuple[str, bytes]:
    """The token controller fills the Secret in asynchronously, usually within a second."""
    deadline = time.monotonic() + timeout
    jsonpath = "jsonpath={.data.token} {.data.ca\\.crt}"
    while True:
        result = kubectl(spoke, "get", "secret", secret, "-n", "kube-system", "-o", jsonpath)
        parts = result.stdout.split()
        if len(parts) == 2:
            return base64.b64decode(parts[0]).decode(), base64.b64decode(parts[1])
        if time.monotonic() > deadline:
            raise TimeoutError(f"the token controller did not fill the Secret {secret} in")
        time.sleep(0.1)
